package stdio

// Tests of the bound on how long a subprocess may take to answer
// initialize.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestInitializeTimeout fronts a command that never answers (the sleeper,
// as `sleep 100`): at the initialize timeout its process group is killed,
// the initialize and the ping sent after it fail with reason
// initialize_timeout, the session is over and the log says why once.
func TestInitializeTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{Env: []string{roleEnv + "=sleeper"}, InitializeTimeout: timeout})
	s, out := startSession(t, e, 1, nil, logs)
	pgid := groupOf(t, e)
	start := time.Now()
	deliver(t, s, &jsonrpc.Request{ID: id(t, 1), Method: "initialize", Params: json.RawMessage(initParams)})
	deliver(t, s, &jsonrpc.Request{ID: id(t, 2), Method: "ping"})
	var got []string
	for range 2 {
		m := out.next(t)
		r, ok := m.msg.(*jsonrpc.Response)
		var we *jsonrpc.Error
		if !ok || !errors.As(r.Error, &we) {
			t.Fatalf("got %s, want an error response", encode(t, m.msg))
		}
		got = append(got, fmt.Sprintf("%v → %s: %d %s %s", r.ID.Raw(), relatedTo(m.related), we.Code, we.Data, we.Message))
	}
	elapsed := time.Since(start)
	const msg = "the MCP server process of this session did not answer initialize within 300ms and was stopped; " +
		"the session did not begin: initialize a new one"
	want := []string{
		`1 → 1: -32603 {"generation":1,"reason":"initialize_timeout"} ` + msg,
		`2 → 2: -32603 {"generation":1,"reason":"initialize_timeout"} ` + msg,
	}
	if !slices.Equal(got, want) {
		t.Errorf("responses:\ngot  %q\nwant %q", got, want)
	}
	if elapsed < timeout || elapsed > timeout+wait/2 {
		t.Errorf("the calls failed after %v, want at the timeout (%v)", elapsed, timeout)
	}
	out.none(t, 50*time.Millisecond)

	select {
	case <-s.Done():
	default:
		t.Error("Done not closed when the calls failed")
	}
	err := s.Deliver(t.Context(), toolCall(t, 3, "whoami", map[string]any{}, nil), engine.Request{})
	if !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Deliver after the timeout: %v, want engine.ErrClosed", err)
	}
	if n := e.Running(); n != 0 {
		t.Errorf("Running() = %d, want 0", n)
	}
	waitGroupGone(t, "after the initialize timeout", pgid)

	text := logs.String()
	for _, c := range []struct {
		substr string
		n      int
	}{
		{`level=ERROR msg="subprocess did not answer initialize in time; killing its process group and failing the initialize. ` +
			`Check that the command is an MCP server speaking stdio`, 1},
		{`raise the initialize timeout (tidemark serve --stdio-init-timeout, Options.InitializeTimeout)" session=TESTTOKE… generation=1 pid=`, 1},
		{` reason=initialize_timeout timeout=300ms invalid_lines_dropped=0` + "\n", 1},
		{`level=WARN msg="subprocess ended; the calls it left in flight, its initialize among them, fail" session=TESTTOKE… generation=1 pid=`, 1},
		{` status="signal: killed" reason=initialize_timeout calls_failed=2` + "\n", 1},
		{`reason=initialize_timeout`, 2},
		{`server_exited`, 0},
		{`invalid_message`, 0},
	} {
		if n := strings.Count(text, c.substr); n != c.n {
			t.Errorf("log holds %q %d times, want %d:\n%s", c.substr, n, c.n, text)
		}
	}
}

// TestInitializeAnsweredInTime: a server that answers initialize within
// the timeout keeps running past it.
func TestInitializeAnsweredInTime(t *testing.T) {
	const timeout = 2 * time.Second
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{InitializeTimeout: timeout})
	s, out := startSession(t, e, 1, nil, logs)
	start := time.Now()
	initialize(t, s, out)
	time.Sleep(time.Until(start.Add(timeout + 300*time.Millisecond)))
	deliver(t, s, toolCall(t, 3, "whoami", map[string]any{}, nil))
	toolText(t, out.next(t).msg)
	if n := e.Running(); n != 1 {
		t.Errorf("Running() = %d past the initialize timeout, want 1", n)
	}
	if strings.Contains(logs.String(), "initialize_timeout") {
		t.Errorf("log mentions initialize_timeout though initialize was answered:\n%s", logs.String())
	}
}

// TestInitializeTimeoutDefault: New fills in 30 s for zero and keeps a
// negative timeout (no limit).
func TestInitializeTimeoutDefault(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, 30 * time.Second},
		{-1, -1},
		{time.Minute, time.Minute},
	} {
		e, err := New(Options{Command: "true", InitializeTimeout: tc.in})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.opts.InitializeTimeout; got != tc.want {
			t.Errorf("InitializeTimeout %v became %v, want %v", tc.in, got, tc.want)
		}
	}
}
