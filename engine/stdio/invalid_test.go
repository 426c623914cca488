package stdio

// Tests of the limits on logging what a subprocess writes besides its
// messages: stdout lines that are not JSON-RPC, and stderr lines.

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// invalidLog is one log line about invalid stdout lines: "full" (one line
// logged in full), "summary" (a count, at most one per interval) or "exit"
// (the count at the subprocess's end).
type invalidLog struct {
	kind    string
	line    string // full: the dropped line
	dropped int    // summary, exit: lines dropped since the previous log line
	total   int    // dropped_total
	at      time.Time
}

func (l invalidLog) String() string {
	if l.kind == "full" {
		return fmt.Sprintf("full %d %q", l.total, l.line)
	}
	return fmt.Sprintf("%s %d/%d", l.kind, l.dropped, l.total)
}

var (
	logTime    = regexp.MustCompile(`^time=(\S+) `)
	logLine    = regexp.MustCompile(` line=("(?:[^"\\]|\\.)*"|\S+) dropped_total=(\d+)$`)
	logDropped = regexp.MustCompile(` dropped=(\d+) dropped_total=(\d+)(?: |$)`)
)

// invalidLogs returns the log lines of text with reason invalid_message, in
// order; it fails the test on one it cannot read.
func invalidLogs(t *testing.T, text string) []invalidLog {
	t.Helper()
	var out []invalidLog
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.Contains(line, " reason=invalid_message") {
			continue
		}
		var l invalidLog
		if m := logTime.FindStringSubmatch(line); m != nil {
			l.at, _ = time.Parse(time.RFC3339Nano, m[1])
		}
		switch {
		case strings.Contains(line, `msg="subprocess wrote a line to stdout that is not a JSON-RPC message; dropped"`):
			m := logLine.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("unreadable log line: %s", line)
			}
			l.kind, l.line = "full", m[1]
			if s, err := strconv.Unquote(m[1]); err == nil {
				l.line = s
			}
			l.total, _ = strconv.Atoi(m[2])
		case strings.Contains(line, `msg="subprocess keeps writing lines to stdout that are not JSON-RPC messages;`):
			l.kind = "summary"
		case strings.Contains(line, `msg="subprocess ended; it wrote lines to stdout that are not JSON-RPC messages`):
			l.kind = "exit"
		default:
			t.Fatalf("unexpected invalid_message log line: %s", line)
		}
		if l.kind != "full" {
			m := logDropped.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("unreadable log line: %s", line)
			}
			l.dropped, _ = strconv.Atoi(m[1])
			l.total, _ = strconv.Atoi(m[2])
		}
		out = append(out, l)
	}
	return out
}

func describeAll[T fmt.Stringer](ls []T) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.String()
	}
	return out
}

// TestInvalidStdoutLinesRateLimited: a server that writes 1000 lines that
// are not JSON-RPC before serving gets 5 of them logged in full and the
// other 995 counted in one line when it ends, and serves the session
// meanwhile.
func TestInvalidStdoutLinesRateLimited(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{Env: []string{garbageEnv + "=1000"}})
	e.summaryEvery = time.Hour // no summary while the test runs: only the one at the end
	s, out := startSession(t, e, 1, nil, logs)
	// The initialize response follows the 1000 lines on stdout: they have
	// all been read when it arrives.
	initialize(t, s, out)
	deliver(t, s, toolCall(t, 3, "whoami", map[string]any{}, nil))
	toolText(t, out.next(t).msg)

	var want []string
	for i := 1; i <= invalidInFull; i++ {
		want = append(want, fmt.Sprintf("full %d %q", i, fmt.Sprintf("this line is not JSON-RPC: %d of 1000", i)))
	}
	if got := describeAll(invalidLogs(t, logs.String())); !slices.Equal(got, want) {
		t.Errorf("invalid_message log lines while the server runs:\ngot  %q\nwant %q", got, want)
	}
	s.Close()
	want = append(want, "exit 995/1000")
	if got := describeAll(invalidLogs(t, logs.String())); !slices.Equal(got, want) {
		t.Errorf("invalid_message log lines after the server ended:\ngot  %q\nwant %q", got, want)
	}
}

// TestSpewEndsAtInitializeTimeout fronts a server that writes lines that
// are not JSON-RPC without end and never answers (`sh -c yes`): its
// initialize fails at the initialize timeout with reason
// initialize_timeout, the process group ends, and the log holds the first
// 5 lines in full, then summaries at least an interval apart whose counts
// add up, then one count at the end.
func TestSpewEndsAtInitializeTimeout(t *testing.T) {
	const timeout, every = time.Second, 100 * time.Millisecond
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{Env: []string{roleEnv + "=spew"}, InitializeTimeout: timeout})
	e.summaryEvery = every
	spawned := time.Now()
	s, out := startSession(t, e, 1, nil, logs)
	pgid := groupOf(t, e)
	// The timeout counts from the initialize's delivery; the spew has
	// started by then, however slowly the machine starts a process.
	waitLog(t, logs, `line="spew 1"`)
	start := time.Now()
	deliver(t, s, &jsonrpc.Request{ID: id(t, 1), Method: "initialize", Params: json.RawMessage(initParams)})
	m := out.next(t)
	elapsed := time.Since(start)
	r, ok := m.msg.(*jsonrpc.Response)
	var we *jsonrpc.Error
	if !ok || r.ID != id(t, 1) || m.related != id(t, 1) || !errors.As(r.Error, &we) {
		t.Fatalf("got %s related %s, want an error response to initialize (ID 1)", encode(t, m.msg), relatedTo(m.related))
	}
	want := `-32603 {"generation":1,"reason":"initialize_timeout"} the MCP server process of this session did not answer ` +
		`initialize within 1s and was stopped; the session did not begin: initialize a new one`
	if got := fmt.Sprintf("%d %s %s", we.Code, we.Data, we.Message); got != want {
		t.Errorf("initialize error:\ngot  %s\nwant %s", got, want)
	}
	if elapsed < timeout || elapsed > timeout+wait/2 {
		t.Errorf("initialize failed after %v, want at the timeout (%v)", elapsed, timeout)
	}
	<-s.Done() // closed before the calls are failed
	lifetime := time.Since(spawned)
	waitGroupGone(t, "after the initialize timeout", pgid)
	if n := e.Running(); n != 0 {
		t.Errorf("Running() = %d, want 0", n)
	}

	// The count at the end is logged by the stdout reader once it reads
	// EOF, which may come after the process group is gone.
	waitLog(t, logs, `msg="subprocess ended; it wrote lines to stdout that are not JSON-RPC messages`)
	ls := invalidLogs(t, logs.String())
	if len(ls) < invalidInFull+2 {
		t.Fatalf("invalid_message log lines %q, want %d in full, at least one summary and one at the end",
			describeAll(ls), invalidInFull)
	}
	var wantFull []string
	for i := 1; i <= invalidInFull; i++ {
		wantFull = append(wantFull, fmt.Sprintf("full %d %q", i, fmt.Sprintf("spew %d", i)))
	}
	if got := describeAll(ls[:invalidInFull]); !slices.Equal(got, wantFull) {
		t.Errorf("lines logged in full:\ngot  %q\nwant %q", got, wantFull)
	}
	counts := ls[invalidInFull:]
	summaries := counts[:len(counts)-1]
	if last := counts[len(counts)-1]; last.kind != "exit" {
		t.Errorf("last invalid_message line is %s, want the count at the end", last)
	}
	// At most one summary per interval over the subprocess's life.
	if most := int(lifetime/every) + 1; len(summaries) > most {
		t.Errorf("%d summaries in %v, want at most %d (one per %v)", len(summaries), lifetime, most, every)
	}
	total := invalidInFull
	for i, l := range counts {
		if i < len(summaries) && l.kind != "summary" {
			t.Errorf("count line %d is %s, want a summary", i, l)
		}
		if l.dropped <= 0 || l.total != total+l.dropped {
			t.Errorf("count line %d is %s, want a positive count adding up to the total after %d", i, l, total)
		}
		total = l.total
		if i > 0 && i < len(summaries) && l.at.Sub(counts[i-1].at) < every {
			t.Errorf("summaries %d and %d are %v apart, want at least %v", i-1, i, l.at.Sub(counts[i-1].at), every)
		}
	}

	text := logs.String()
	if n := strings.Count(text, `level=ERROR msg="subprocess did not answer initialize in time; killing its process group`); n != 1 {
		t.Errorf("%d initialize timeout lines, want 1:\n%s", n, text)
	}
	m2 := regexp.MustCompile(` reason=initialize_timeout timeout=1s invalid_lines_dropped=(\d+)\n`).FindStringSubmatch(text)
	if m2 == nil {
		t.Fatalf("the initialize timeout line lacks its fields:\n%s", text)
	}
	if n, _ := strconv.Atoi(m2[1]); n <= invalidInFull || n > total {
		t.Errorf("invalid_lines_dropped=%d at the timeout, want more than %d and at most the final %d", n, invalidInFull, total)
	}
	if n := strings.Count(text, `reason=initialize_timeout calls_failed=1`); n != 1 {
		t.Errorf("%d end lines with reason=initialize_timeout calls_failed=1, want 1:\n%s", n, text)
	}
	t.Logf("%d lines dropped in %v: %d summaries", total, lifetime, len(summaries))
}

// TestStderrRateLimited: a server that writes 5,000 stderr lines before
// serving gets at most 100 of them logged per second, every other one
// counted in a stderr_flood line, and serves the session meanwhile.
func TestStderrRateLimited(t *testing.T) {
	const n = 5000
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{Env: []string{stderrEnv + "=5000"}})
	start := time.Now()
	s, out := startSession(t, e, 1, nil, logs)
	initialize(t, s, out)
	deliver(t, s, toolCall(t, 3, "whoami", map[string]any{}, nil))
	toolText(t, out.next(t).msg)
	s.Close()
	elapsed := time.Since(start)

	full, counted, countLines := 0, 0, 0
	counts := regexp.MustCompile(` reason=stderr_flood suppressed=(\d+) lines_total=(\d+)`)
	for line := range strings.SplitSeq(logs.String(), "\n") {
		switch {
		case strings.Contains(line, `msg="subprocess stderr"`):
			full++
		case counts.MatchString(line):
			m := counts.FindStringSubmatch(line)
			c, _ := strconv.Atoi(m[1])
			counted += c
			countLines++
		}
	}
	// One window per second elapsed, plus the one in progress; the server
	// writes one more line first ("testserver ready").
	windows := int(elapsed/time.Second) + 2
	if full+counted != n+1 || full > 100*windows || full < 100 || countLines == 0 || countLines > windows {
		t.Fatalf("stderr lines: %d logged, %d counted in %d lines over %v; want %d in all, 100 to %d logged, 1 to %d count lines",
			full, counted, countLines, elapsed, n+1, 100*windows, windows)
	}
}
