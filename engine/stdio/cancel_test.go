package stdio

// Tests of the calls the client cancels (Options.CancelGrace).

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// cancel returns the client's notifications/cancelled of call callID.
func cancel(t *testing.T, callID any) *jsonrpc.Request {
	t.Helper()
	return &jsonrpc.Request{Method: "notifications/cancelled", Params: raw(t, map[string]any{"requestId": callID, "reason": "user"})}
}

// callStarted delivers tool call callID of name with args and a progress
// token, and waits for the progress that says its handler runs.
func callStarted(t *testing.T, s engine.Session, out *outbox, callID any, name string, args map[string]any) {
	t.Helper()
	deliver(t, s, toolCall(t, callID, name, args, fmt.Sprint("started-", callID)))
	if got, want := describe(t, out.next(t).msg), fmt.Sprintf("progress started-%v 1/0", callID); got != want {
		t.Fatalf("call %v: got %s, want %s", callID, got, want)
	}
}

// TestCancelledCallUnanswered: a call the subprocess never answers (the
// hang tool, as a server that follows MCP's "SHOULD NOT respond" to a
// cancelled request) is answered with reason cancelled at the end of the
// grace, not before; its ID then takes a new call, whose answer reaches
// the client.
func TestCancelledCallUnanswered(t *testing.T) {
	const grace = 300 * time.Millisecond
	e := testEngine(t, nil, Options{CancelGrace: grace})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)
	callStarted(t, s, out, 3, "hang", map[string]any{})
	start := time.Now()
	deliver(t, s, cancel(t, 3))
	got := errorOf(t, out.next(t))
	elapsed := time.Since(start)
	want := `3 → 3: -32603 {"generation":1,"reason":"cancelled"} the call was cancelled, and the MCP server process ` +
		`of this session did not answer it within 300ms`
	if got != want {
		t.Errorf("cancelled call:\ngot  %s\nwant %s", got, want)
	}
	if elapsed < grace {
		t.Errorf("answered %v after the cancel, want at the end of the %v grace", elapsed, grace)
	}
	deliver(t, s, toolCall(t, 3, "whoami", map[string]any{}, nil))
	m := out.next(t)
	if !isResult(m.msg, id(t, 3)) || m.related != id(t, 3) {
		t.Fatalf("call 3 again: got %s related %s, want its result", encode(t, m.msg), relatedTo(m.related))
	}
	out.none(t, 50*time.Millisecond)
}

// TestCancelledCallManyUnanswered: 200 cancelled calls of the hang tool
// each get exactly one answer (the cancelled one, or the go-sdk server's
// own for a call it had not started), and the session serves a call after
// them.
func TestCancelledCallManyUnanswered(t *testing.T) {
	e := testEngine(t, nil, Options{CancelGrace: 100 * time.Millisecond})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)
	const n = 200
	for i := range n {
		deliver(t, s, toolCall(t, 100+i, "hang", map[string]any{}, nil))
		deliver(t, s, cancel(t, 100+i))
	}
	answers := map[string]int{}
	for range n {
		m := out.next(t)
		r, ok := m.msg.(*jsonrpc.Response)
		if !ok || r.ID != m.related {
			t.Fatalf("got %s related %s, want a response related to its call", encode(t, m.msg), relatedTo(m.related))
		}
		answers[fmt.Sprint(r.ID.Raw())]++
	}
	for i := range n {
		if k := fmt.Sprint(100 + i); answers[k] != 1 {
			t.Errorf("call %s answered %d times, want once", k, answers[k])
		}
	}
	deliver(t, s, toolCall(t, 3, "whoami", map[string]any{}, nil))
	toolText(t, out.next(t).msg)
}

// TestCancelledCallLateAnswer: the late tool answers 600ms after its
// cancellation, after the 200ms grace: the client gets the cancelled
// answer at the end of the grace, and the late answer is dropped (logged
// at DEBUG), though the client sent a new call with the same ID meanwhile:
// that one reaches the subprocess under an ID of the engine's, and its
// answer reaches the client under the client's.
func TestCancelledCallLateAnswer(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{CancelGrace: 200 * time.Millisecond})
	s, out := startSession(t, e, 1, nil, logs)
	initialize(t, s, out)
	callStarted(t, s, out, 4, "late", map[string]any{"delay_ms": 600})
	deliver(t, s, cancel(t, 4))
	if got := errorOf(t, out.next(t)); !strings.Contains(got, `4 → 4: -32603 {"generation":1,"reason":"cancelled"}`) {
		t.Fatalf("got %s, want the cancelled answer to call 4", got)
	}
	deliver(t, s, toolCall(t, 4, "whoami", map[string]any{}, nil))
	m := out.next(t)
	if !isResult(m.msg, id(t, 4)) || m.related != id(t, 4) || !strings.Contains(toolText(t, m.msg), `"pid"`) {
		t.Fatalf("call 4 again: got %s related %s, want the whoami result", encode(t, m.msg), relatedTo(m.related))
	}
	out.none(t, time.Second) // the late answer comes 400ms after the grace
	deliver(t, s, toolCall(t, 5, "whoami", map[string]any{}, nil))
	toolText(t, out.next(t).msg)
}

// TestCancelledCallAnsweredInGrace: a server that answers a cancelled call
// at once (the go-sdk's, as the block tool) has its answer reach the
// client, and no cancelled answer follows.
func TestCancelledCallAnsweredInGrace(t *testing.T) {
	e := testEngine(t, nil, Options{CancelGrace: 200 * time.Millisecond})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)
	deliver(t, s, toolCall(t, 6, "block", map[string]any{}, nil))
	deliver(t, s, cancel(t, 6))
	m := out.next(t)
	r, ok := m.msg.(*jsonrpc.Response)
	if !ok || r.ID != id(t, 6) || strings.Contains(encode(t, r), `"reason":"cancelled"`) {
		t.Fatalf("got %s, want the server's own answer to call 6", encode(t, m.msg))
	}
	out.none(t, 500*time.Millisecond)
}

// TestCancelledCallServerExits: a subprocess that exits during the grace of
// a cancelled call answers it as cancelled, and the call still in flight
// as server_exited.
func TestCancelledCallServerExits(t *testing.T) {
	e := testEngine(t, nil, Options{CancelGrace: time.Minute})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)
	deliver(t, s, toolCall(t, 3, "whoami", map[string]any{}, nil))
	var who whoami
	json.Unmarshal([]byte(toolText(t, out.next(t).msg)), &who)
	callStarted(t, s, out, 7, "hang", map[string]any{})
	callStarted(t, s, out, 8, "hang", map[string]any{})
	deliver(t, s, cancel(t, 7))
	if err := syscall.Kill(who.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got := []string{errorOf(t, out.next(t)), errorOf(t, out.next(t))}
	want := []string{
		`7 → 7: -32603 {"generation":1,"reason":"cancelled"} the call was cancelled, and the MCP server process of this session exited (signal: killed) before answering it`,
		`8 → 8: -32603 {"generation":1,"reason":"server_exited"} the MCP server process of this session exited (signal: killed) before answering; the session's next request starts a new one at generation 2`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("answers:\ngot  %q\nwant %q", got, want)
	}
}
