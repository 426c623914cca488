package probe

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// retention is the per-session event retention of the Tidemark under
// test, told to the probe.
const retention = 60

func startTidemark(t *testing.T) string {
	t.Helper()
	return startTidemarkRetaining(t, retention)
}

// startTidemarkRetaining serves the demo tools with Tidemark retaining n
// events per session.
func startTidemarkRetaining(t *testing.T, n int) string {
	t.Helper()
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Retention: eventlog.Options{MaxEvents: n},
		Transport: transport.Options{Logger: slog.New(slog.DiscardHandler)},
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	})
	return srv.URL + "/mcp"
}

// startMemstore serves the demo tools with the go-sdk's own handler and
// mcp.NewMemoryEventStore, as interop/go-sdk-memstore does.
func startMemstore(t *testing.T) string {
	t.Helper()
	server := demo.NewServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		EventStore: mcp.NewMemoryEventStore(nil),
		Logger:     slog.New(slog.DiscardHandler),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

func verdicts(rep *Report) map[string]Verdict {
	m := map[string]Verdict{}
	for _, r := range rep.Results {
		m[r.ID] = r.Verdict
	}
	return m
}

func logReport(t *testing.T, rep *Report) {
	t.Helper()
	var b bytes.Buffer
	rep.WriteTable(&b)
	t.Log("\n" + b.String())
}

// TestTidemarkPassesEveryCheck: against Tidemark, told its retention, every
// check passes.
func TestTidemarkPassesEveryCheck(t *testing.T) {
	url := startTidemark(t)
	rep, err := Run(t.Context(), Config{URL: url, RetentionEvents: retention, Storm: 8})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	logReport(t, rep)
	for _, r := range rep.Results {
		if r.Verdict != Pass {
			t.Errorf("%s = %s (%v): %s", r.ID, r.Verdict, r.Statuses, r.Observed)
		}
	}
	if got, want := len(rep.Results), len(CheckIDs()); got != want || rep.Pass != want || rep.Failed() {
		t.Errorf("report has %d results, %d PASS, failed %v; want %d PASS", got, rep.Pass, rep.Failed(), want)
	}
	want := map[string][]int{
		"priming":           {200},
		"resume-exact":      {200, 200},
		"cursor-ahead":      {400},
		"cursor-malformed":  {400},
		"foreign-cursor":    {400},
		"unknown-session":   {404, 404},
		"deleted-session":   {204, 404, 404},
		"stream-isolation":  {200, 200, 200},
		"compacted-cursor":  {409},
		"takeover":          {200, 200},
		"concurrent-resume": {200, 200, 200},
		"storm":             {200},
	}
	for _, r := range rep.Results {
		if !slices.Equal(r.Statuses, want[r.ID]) {
			t.Errorf("%s statuses = %v, want %v", r.ID, r.Statuses, want[r.ID])
		}
	}
}

// TestUnjudgeableChecksAreNotApplicable: checks that the tool's arguments
// or the retention told make impossible to judge are N/A with the reason,
// not FAIL against a correct server. A countdown without delay would make
// takeover and concurrent-resume count replayed events as sent twice; a
// retention below what two calls make would make stream-isolation meet 409
// cursor_compacted, and compacted-cursor's calls at once outrun the
// retention.
func TestUnjudgeableChecksAreNotApplicable(t *testing.T) {
	// 200 messages without delay: even on a loaded machine the baseline's
	// average gap stays far below 2 ms (about 0.1 ms here). The retention,
	// 202 events, holds one call (priming, 200 progress, the result) but
	// not the two of stream-isolation.
	url := startTidemarkRetaining(t, 202)
	rep, err := Run(t.Context(), Config{URL: url, Args: json.RawMessage(`{"n":200}`), RetentionEvents: 202, Storm: -1})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	logReport(t, rep)
	want := map[string]string{
		"takeover":          "give the tool a delay between messages",
		"concurrent-resume": "give the tool a delay between messages",
		"stream-isolation":  "two calls make about 404 events, more than --retention-events 202: raise it or use a shorter call",
		"storm":             "",
	}
	for _, r := range rep.Results {
		text, na := want[r.ID]
		switch {
		case na && (r.Verdict != NA || !strings.Contains(r.Observed, text)):
			t.Errorf("%s = %s: %s; want N/A saying %q", r.ID, r.Verdict, r.Observed, text)
		case !na && r.Verdict != Pass:
			t.Errorf("%s = %s (%v): %s; want PASS", r.ID, r.Verdict, r.Statuses, r.Observed)
		}
	}
	if rep.Failed() {
		t.Error("the report fails; want no FAIL")
	}
}

// TestTidemarkWithoutFlags: without --retention-events and with the storm
// off, exactly those two checks are N/A.
func TestTidemarkWithoutFlags(t *testing.T) {
	url := startTidemark(t)
	rep, err := Run(t.Context(), Config{URL: url, Storm: -1})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for id, v := range verdicts(rep) {
		want := Pass
		if id == "compacted-cursor" || id == "storm" {
			want = NA
		}
		if v != want {
			t.Errorf("%s = %s, want %s", id, v, want)
		}
	}
}

// TestMemoryEventStoreFails: the go-sdk's own handler with its
// MemoryEventStore clamps a cursor beyond the newest event (200, empty)
// and refuses a resume while the stream's old connection is open (409), so
// the probe reports exactly cursor-ahead and takeover as FAIL.
func TestMemoryEventStoreFails(t *testing.T) {
	url := startMemstore(t)
	rep, err := Run(t.Context(), Config{URL: url, Storm: 8})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	logReport(t, rep)
	want := map[string]Verdict{
		"priming": Pass, "resume-exact": Pass, "cursor-ahead": Fail, "cursor-malformed": Pass,
		"foreign-cursor": Pass, "unknown-session": Pass, "deleted-session": Pass, "stream-isolation": Pass,
		"compacted-cursor": NA, "takeover": Fail, "concurrent-resume": Pass, "storm": Pass,
	}
	got := verdicts(rep)
	for id, v := range want {
		if got[id] != v {
			t.Errorf("%s = %s, want %s", id, got[id], v)
		}
	}
	for _, r := range rep.Results {
		switch r.ID {
		case "cursor-ahead":
			if !slices.Equal(r.Statuses, []int{200}) {
				t.Errorf("cursor-ahead statuses = %v, want [200]", r.Statuses)
			}
		case "takeover":
			if !slices.Equal(r.Statuses, []int{200, 409}) {
				t.Errorf("takeover statuses = %v, want [200 409]", r.Statuses)
			}
		}
	}
	if !rep.Failed() || rep.Fail != 2 {
		t.Errorf("Fail = %d, want 2", rep.Fail)
	}
}

// TestUnreachable: a probe that cannot initialize returns an error, not a
// report of FAILs.
func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	rep, err := Run(t.Context(), Config{URL: url})
	if err == nil {
		t.Fatalf("Run = %+v, nil error; want an error", rep)
	}
	if !strings.Contains(err.Error(), "baseline") {
		t.Errorf("err = %v, want it to name the baseline call", err)
	}
}

// TestUnusableBaseline: a tool that does not exist, arguments the tool
// refuses, or a tool that streams nothing stop the probe with an error
// naming the cause, instead of judging the server by a failed call and
// reporting FAILs that are the tool's.
func TestUnusableBaseline(t *testing.T) {
	url := startTidemark(t)
	for _, tc := range []struct {
		tool, args, want string
	}{
		{"nope", `{}`, "answered with an error"},
		{"countdown", `{"n":-1}`, "isError true"},
		{"echo", `{"text":"hi"}`, "sent 0 messages before its result"},
	} {
		rep, err := Run(t.Context(), Config{URL: url, Tool: tc.tool, Args: json.RawMessage(tc.args)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--tool %s --args %s: err = %v, want it to say %q", tc.tool, tc.args, err, tc.want)
		}
		if rep != nil && len(rep.Results) != 0 {
			t.Errorf("--tool %s: %d checks ran; want none", tc.tool, len(rep.Results))
		}
	}
}

func TestAdvance(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"4c2f6e53-1-0-4", "4c2f6e53-1-0-1000004", true},
		{"B2DRK36OIFCRDNGPN32SU5XHUZ_0", "B2DRK36OIFCRDNGPN32SU5XHUZ_1000000", true},
		{"event-99999999999999999999", "event-100000000000000999999", true},
		{"abc", "", false},
	} {
		got, ok := advance(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("advance(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCompare(t *testing.T) {
	want := []string{"progress 1", "progress 2", "response"}
	for _, tc := range []struct {
		got  []string
		diff string
	}{
		{[]string{"progress 1", "progress 2", "response"}, ""},
		{[]string{"progress 1", "response"}, `message 2 is "response", want "progress 2"`},
		{[]string{"progress 1", "progress 2"}, `2 messages, want 3 (missing "response")`},
		{[]string{"progress 1", "progress 2", "response", "response"}, `4 messages, want 3 (extra "response")`},
	} {
		if d := compare(tc.got, want); d != tc.diff {
			t.Errorf("compare(%v) = %q, want %q", tc.got, d, tc.diff)
		}
	}
}

// TestOutput: the table has one row per check and the summary; the JSON
// has the documented field names.
func TestOutput(t *testing.T) {
	rep := &Report{URL: "http://x/mcp", Server: "s 1", ProtocolVersion: "2025-11-25", Tool: "countdown",
		Results: []Result{
			{ID: "priming", Verdict: Pass, Statuses: []int{200}, Observed: "ok", Rule: "r", Millis: 3},
			{ID: "storm", Verdict: NA, Statuses: []int{}, Observed: "--storm 0", Rule: "r"},
		}, Pass: 1, NA: 1}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	wantTable := "tidemark probe http://x/mcp\nserver s 1, protocol 2025-11-25, tool countdown\n\n" +
		"CHECK    RESULT  STATUSES  OBSERVED\n" +
		"priming  PASS    200       ok\n" +
		"storm    N/A     -         --storm 0\n" +
		"\n2 checks: 1 PASS, 0 FAIL, 1 N/A\n"
	if b.String() != wantTable {
		t.Errorf("table =\n%s\nwant\n%s", b.String(), wantTable)
	}
	b.Reset()
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	checks := got["checks"].([]any)
	first := checks[0].(map[string]any)
	if first["check"] != "priming" || first["result"] != "PASS" || first["observed"] != "ok" || first["rule"] != "r" || first["ms"] != 3.0 {
		t.Errorf("first check JSON = %v", first)
	}
	if got["pass"] != 1.0 || got["fail"] != 0.0 || got["na"] != 1.0 || got["protocolVersion"] != "2025-11-25" {
		t.Errorf("report JSON = %v", got)
	}
}

// TestSilentServer: against a listener that accepts connections and never
// answers, the probe's error names the --timeout it waited and what to
// check, not only "context deadline exceeded".
func TestSilentServer(t *testing.T) {
	url := testenv.SilentServer(t, "/mcp")
	_, err := Run(t.Context(), Config{URL: url, Timeout: 300 * time.Millisecond})
	want := "probe: the baseline call got no complete answer within --timeout 300ms, so nothing can be checked: check that a server answers at " + url
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Run against a silent listener: %v, want %q...", err, want)
	}
}

// TestNoEventIDs: against a server whose events carry no IDs (the go-sdk's
// handler without an event store), the storm check fails at once saying
// so, instead of waiting out its --timeout for replays that cannot come.
func TestNoEventIDs(t *testing.T) {
	server := demo.NewServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Logger: slog.New(slog.DiscardHandler),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	rep, err := Run(t.Context(), Config{URL: srv.URL, Storm: 4, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	logReport(t, rep)
	for _, r := range rep.Results {
		if r.ID != "storm" {
			continue
		}
		want := "the baseline call's events carried no ID: the stream cannot be resumed, so no storm was run"
		if r.Verdict != Fail || r.Observed != want || r.Millis > 1000 {
			t.Errorf("storm: %s %q after %d ms; want FAIL %q at once", r.Verdict, r.Observed, r.Millis, want)
		}
		return
	}
	t.Fatal("no storm result")
}
