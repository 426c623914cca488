package main

// The memory bound of tidemark serve under sessions that each echo an
// answer of megabytes, measured on the real binary.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// TestMemoryBoundUnderLargeAnswers is an operator's attack:
// 150 sessions each echo 4 MiB, against the default 512 MiB retention
// budget with the memory store, and with --data-dir. The process's peak
// RSS (VmHWM, read from /proc) stays under 1 GiB at the default flags: the
// soft memory limit its "serving" line states counts the budget, the
// in-flight bound and the sessions once, the bound docs/operating.md
// documents ("Retention and memory"). With the memory store the answers do not all fit in
// the budget: the least recent sessions are evicted and answer 404
// session_not_found; every other session, and with --data-dir every
// session, resumes with its newest cursor (200).
func TestMemoryBoundUnderLargeAnswers(t *testing.T) {
	bin := testenv.BuildNoRace(t, "./cmd/tidemark")
	for _, tc := range []struct {
		name  string
		args  []string
		evict bool
	}{
		{"store=memory", nil, true},
		{"store=durable", []string{"--data-dir", t.TempDir()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testenv.StartProcess(t, bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
			url := testenv.ServeURL(t, p)
			limit, err := strconv.ParseInt(p.WaitFor(t, `msg=serving .*memory_limit=(\d+)`, 5*time.Second)[1], 10, 64)
			if err != nil || limit <= 0 {
				t.Fatalf("serving line states memory_limit %d (%v), want a positive limit", limit, err)
			}
			if limit >= maxPeakRSS {
				t.Fatalf("serving line states memory_limit %d MiB, want under %d MiB at the default flags", limit>>20, maxPeakRSS>>20)
			}
			sessions := echoLarge(t, url, 150, 4)
			peak := peakRSS(t, p.Pid())
			if peak >= maxPeakRSS {
				t.Errorf("peak RSS %d MiB after 150 echoes of 4 MiB, want under %d MiB (memory limit %d MiB)", peak>>20, maxPeakRSS>>20, limit>>20)
			}
			statuses := resumeNewest(t, url, sessions)
			evicted, resumed := statuses[http.StatusNotFound], statuses[http.StatusOK]
			if evicted+resumed != len(sessions) {
				t.Fatalf("resumes with the newest cursor: %v, want only 200 and 404", statuses)
			}
			// 150 answers of 4 MiB against 512 MiB: at most 128 fit.
			if tc.evict && (evicted < 150-128 || resumed == 0) {
				t.Fatalf("resumes with the newest cursor: %d answered 404, %d 200; want at least 22 sessions evicted and the rest resumed", evicted, resumed)
			}
			if !tc.evict && evicted != 0 {
				t.Fatalf("resumes with the newest cursor: %d answered 404, want none (the data directory keeps every session)", evicted)
			}
			t.Logf("peak RSS %d MiB (limit %d MiB); %d sessions evicted, %d resumed", peak>>20, limit>>20, evicted, resumed)
		})
	}
}

// maxPeakRSS is the most RSS (bytes) TestMemoryBoundUnderLargeAnswers
// accepts at the default flags: the limit is soft, and the collector
// overshoots it by a few tens of MiB while large answers are decoded.
const maxPeakRSS = 1 << 30

// largeSession is a session that echoed a large text: its token and the
// newest event id it received.
type largeSession struct {
	token, newest string
}

// echoLarge starts n sessions at url, conc at a time, each of which calls
// echo with a text of nearly 4 MiB (the largest body the server takes).
func echoLarge(t *testing.T, url string, n, conc int) []largeSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// One encoding serves every session: the race detector makes encoding
	// 4 MiB cost about half a second of the test's CPU.
	echo, err := mcptest.Encode(mcptest.ToolCall(2, "echo", map[string]any{"text": strings.Repeat("x", 4<<20-256)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]largeSession, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for i := range work {
				s, err := echoOnce(ctx, url, echo)
				if err != nil {
					t.Errorf("session %d: %v", i, err)
					continue
				}
				out[i] = s
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// echoOnce initializes a session and sends it echo, an encoded call of
// the echo tool.
func echoOnce(ctx context.Context, url string, echo []byte) (largeSession, error) {
	c := &mcptest.Client{URL: url}
	init := mcptest.MustCall(1, "initialize", map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "memory-test", "version": "1"},
	})
	initBody, err := mcptest.Encode(init)
	if err != nil {
		return largeSession{}, err
	}
	resp, _, err := postRaw(ctx, c, "", initBody)
	if err != nil {
		return largeSession{}, fmt.Errorf("initialize: %w", err)
	}
	s := largeSession{token: resp.Header.Get("Mcp-Session-Id")}
	ss := c.SessionFor(s.token, "2025-11-25")
	r, err := ss.Post(ctx, mcptest.MustNotify("notifications/initialized", nil))
	if err != nil {
		return largeSession{}, err
	}
	r.Body.Close()
	if _, s.newest, err = postRaw(ctx, c, s.token, echo); err != nil {
		return largeSession{}, fmt.Errorf("echo: %w", err)
	}
	return s, nil
}

// postRaw POSTs body, one encoded message (on the session token, unless
// empty), and reads the SSE answer to its end without decoding it or
// keeping it, as a large answer is cheapest read: it returns the id of
// the answer's last event, or an error when it has none.
func postRaw(ctx context.Context, c *mcptest.Client, token string, body []byte) (*http.Response, string, error) {
	req, err := c.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		return nil, "", err
	}
	if token != "" {
		req.Header.Set("Mcp-Session-Id", token)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", mcptest.ReadStatusError(resp)
	}
	id, n, err := lastEventID(resp.Body)
	if err == nil && id == "" {
		err = fmt.Errorf("answer of %d bytes has no event id", n)
	}
	return resp, id, err
}

// lastEventID reads an SSE body to its end and returns the id of its last
// event and how many bytes it read. It holds at most one buffer of the
// body: a line longer than the buffer (a large answer's data) passes
// through it in pieces.
func lastEventID(r io.Reader) (id string, n int64, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	lineStart := true
	for {
		line, err := br.ReadSlice('\n')
		n += int64(len(line))
		switch {
		case err == nil:
			if rest, ok := bytes.CutPrefix(line, []byte("id: ")); ok && lineStart {
				id = string(bytes.TrimSuffix(rest, []byte("\n")))
			}
			lineStart = true
		case errors.Is(err, bufio.ErrBufferFull):
			lineStart = false
		case errors.Is(err, io.EOF):
			return id, n, nil
		default:
			return "", n, err
		}
	}
}

// resumeNewest resumes every session's stream with its newest cursor and
// counts the answers by status; a 404 must say session_not_found.
func resumeNewest(t *testing.T, url string, sessions []largeSession) map[int]int {
	t.Helper()
	c := &mcptest.Client{URL: url}
	statuses := map[int]int{}
	for _, s := range sessions {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := c.SessionFor(s.token, "2025-11-25").Resume(ctx, s.newest)
		switch se, ok := mcptest.AsStatusError(err); {
		case err == nil:
			st.Close()
			statuses[http.StatusOK]++
		case ok && se.Status == http.StatusNotFound && se.Reason() == string(replay.ReasonSessionNotFound):
			statuses[http.StatusNotFound]++
		case ok:
			statuses[se.Status]++
		default:
			t.Fatalf("resume session %s: %v", s.token[:8], err)
		}
		cancel()
	}
	return statuses
}

// peakRSS returns the peak resident set size (bytes) of process pid, its
// VmHWM.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read the server's memory: %v", err)
	}
	m := regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmHWM in /proc/%d/status:\n%s", pid, b)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// TestMemoryLimit: the soft memory limit counts the retention budget, the
// in-flight bound and each session once, plus the runtime's room; a store
// outside the heap gets storeMemory and sessionMemory per session, and a memory store without a budget no
// limit.
func TestMemoryLimit(t *testing.T) {
	const MiB = 1 << 20
	for _, tc := range []struct {
		name             string
		budget, inflight int64
		sessions         int
		inHeap           bool
		want             int64
	}{
		{"defaults", 512 * MiB, 128 * MiB, 10000, true, 512*MiB + 128*MiB + 10000*8192 + 64*MiB},
		{"no in-flight bound counts the default", 512 * MiB, -1, 10000, true, 512*MiB + 128*MiB + 10000*8192 + 64*MiB},
		{"small", 1 * MiB, 8 * MiB, 1, true, 1*MiB + 8*MiB + 8192 + 64*MiB},
		{"no budget", -1, 128 * MiB, 10000, true, 0},
		{"events outside the heap", -1, 128 * MiB, 10000, false, 688*MiB + 10000*8192},
		{"events outside the heap, 200,000 sessions", -1, 128 * MiB, 200000, false, 688*MiB + 200000*8192},
	} {
		if got := memoryLimit(tc.budget, tc.inflight, tc.sessions, tc.inHeap); got != tc.want {
			t.Errorf("%s: memoryLimit(%d, %d, %d, %v) = %d, want %d", tc.name, tc.budget, tc.inflight, tc.sessions, tc.inHeap, got, tc.want)
		}
	}
}
