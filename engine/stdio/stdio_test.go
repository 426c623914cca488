package stdio

// Tests of the engine with this test binary as its stdio server and a
// recording outbox, and the helpers the other tests of the package share.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// wait bounds every wait for a message in these tests.
const wait = 10 * time.Second

// noRaceExitSleep stops a race-enabled subprocess from sleeping a second
// before it exits (the race runtime's atexit_sleep_ms).
const noRaceExitSleep = "GORACE=atexit_sleep_ms=0"

// sent is one message the engine gave the outbox.
type sent struct {
	msg     jsonrpc.Message
	related jsonrpc.ID
}

// outbox records what the engine sends, in order. refuse, when set, is
// returned by every Send from then on.
type outbox struct {
	ch chan sent

	mu     sync.Mutex
	refuse error
}

func newOutbox() *outbox { return &outbox{ch: make(chan sent, 1024)} }

func (o *outbox) Send(_ context.Context, msg jsonrpc.Message, related jsonrpc.ID) error {
	o.mu.Lock()
	err := o.refuse
	o.mu.Unlock()
	if err != nil {
		return err
	}
	o.ch <- sent{msg, related}
	return nil
}

// next returns the next message sent, failing the test after wait.
func (o *outbox) next(t *testing.T) sent {
	t.Helper()
	select {
	case s := <-o.ch:
		return s
	case <-time.After(wait):
		t.Fatalf("no message from the engine within %v", wait)
		return sent{}
	}
}

// none checks that nothing more was sent within d.
func (o *outbox) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case s := <-o.ch:
		t.Errorf("unexpected message %s (related %v)", encode(t, s.msg), s.related.Raw())
	case <-time.After(d):
	}
}

// testEngine returns an Engine running this test binary as the test server
// (role "server" unless env sets another), logging to logs.
func testEngine(t *testing.T, logs *testenv.LogBuffer, opts Options) *Engine {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts.Command = exe
	if !slices.ContainsFunc(opts.Env, func(kv string) bool { return strings.HasPrefix(kv, roleEnv+"=") }) {
		opts.Env = append([]string{roleEnv + "=server"}, opts.Env...)
	}
	// A binary built with -race sleeps a second before exiting, by default.
	opts.Env = append(opts.Env, noRaceExitSleep)
	if logs == nil {
		logs = &testenv.LogBuffer{}
	}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// startSession starts generation gen of a session with st (nil: fresh).
func startSession(t *testing.T, e *Engine, gen uint64, st *engine.State, logs *testenv.LogBuffer) (engine.Session, *outbox) {
	t.Helper()
	out := newOutbox()
	info := engine.Info{Token: "TESTTOKENABCDEFGHIJKLMNOPQ", Generation: gen, State: st}
	if logs != nil {
		info.Logger = slog.New(slog.NewTextHandler(logs, nil)).With("session", redact.Token(info.Token), "generation", gen)
	}
	s, err := e.Start(t.Context(), info, out)
	if err != nil {
		t.Fatalf("Start gen %d: %v", gen, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, out
}

func id(t *testing.T, v any) jsonrpc.ID {
	t.Helper()
	if n, ok := v.(int); ok {
		v = float64(n)
	}
	i, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func raw(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func encode(t *testing.T, m jsonrpc.Message) string {
	t.Helper()
	b, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func deliver(t *testing.T, s engine.Session, m jsonrpc.Message) {
	t.Helper()
	if err := s.Deliver(t.Context(), m, engine.Request{}); err != nil {
		t.Fatalf("Deliver %s: %v", encode(t, m), err)
	}
}

// toolCall returns a tools/call request; token, when non-nil, is its
// progressToken.
func toolCall(t *testing.T, callID any, name string, args any, token any) *jsonrpc.Request {
	t.Helper()
	p := map[string]any{"name": name, "arguments": args}
	if token != nil {
		p["_meta"] = map[string]any{"progressToken": token}
	}
	return &jsonrpc.Request{ID: id(t, callID), Method: "tools/call", Params: raw(t, p)}
}

const initParams = `{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"unit-client","version":"1.0.0"}}`

// initialize runs the client side of initialization (call ID 1) and sets
// the log level to info (call ID 2), checking both responses.
func initialize(t *testing.T, s engine.Session, out *outbox) {
	t.Helper()
	deliver(t, s, &jsonrpc.Request{ID: id(t, 1), Method: "initialize", Params: json.RawMessage(initParams)})
	got := out.next(t)
	resp, ok := got.msg.(*jsonrpc.Response)
	if !ok || resp.ID != id(t, 1) || resp.Error != nil || got.related != id(t, 1) {
		t.Fatalf("initialize: got %s related %v, want a result for ID 1 related to 1", encode(t, got.msg), got.related.Raw())
	}
	deliver(t, s, &jsonrpc.Request{Method: "notifications/initialized"})
	deliver(t, s, &jsonrpc.Request{ID: id(t, 2), Method: "logging/setLevel", Params: json.RawMessage(`{"level":"info"}`)})
	if got := out.next(t); !isResult(got.msg, id(t, 2)) {
		t.Fatalf("logging/setLevel: got %s, want a result for ID 2", encode(t, got.msg))
	}
}

func isResult(m jsonrpc.Message, want jsonrpc.ID) bool {
	r, ok := m.(*jsonrpc.Response)
	return ok && r.ID == want && r.Error == nil
}

// toolText returns the text of a tools/call result with one text block.
func toolText(t *testing.T, m jsonrpc.Message) string {
	t.Helper()
	r, ok := m.(*jsonrpc.Response)
	if !ok || r.Error != nil {
		t.Fatalf("got %s, want a tools/call result", encode(t, m))
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil || len(res.Content) != 1 || res.IsError {
		t.Fatalf("result %s: want one text block, no error", r.Result)
	}
	return res.Content[0].Text
}

// describe renders a message as the tests compare it: "progress p 1/2",
// "log <data>", "result <id>", "error <id>", or the method and ID of a
// request.
func describe(t *testing.T, m jsonrpc.Message) string {
	t.Helper()
	switch m := m.(type) {
	case *jsonrpc.Response:
		if m.Error != nil {
			return fmt.Sprintf("error %v", m.ID.Raw())
		}
		return fmt.Sprintf("result %v", m.ID.Raw())
	case *jsonrpc.Request:
		switch m.Method {
		case "notifications/progress":
			var p struct {
				ProgressToken any     `json:"progressToken"`
				Progress      float64 `json:"progress"`
				Total         float64 `json:"total"`
			}
			json.Unmarshal(m.Params, &p)
			return fmt.Sprintf("progress %v %v/%v", p.ProgressToken, p.Progress, p.Total)
		case "notifications/message":
			var p struct {
				Data any `json:"data"`
			}
			json.Unmarshal(m.Params, &p)
			return fmt.Sprintf("log %v", p.Data)
		}
		if m.IsCall() {
			return fmt.Sprintf("request %s %v", m.Method, m.ID.Raw())
		}
		return "notification " + m.Method
	}
	return "?"
}

// relatedTo renders a related ID ("none" for the standalone stream).
func relatedTo(i jsonrpc.ID) string {
	if !i.IsValid() {
		return "none"
	}
	return fmt.Sprint(i.Raw())
}

func TestBuildEnv(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"PATH": "/bin", "HOME": "/home/u", "SECRET": "s"}[k]
	}
	got, err := buildEnv(getenv, []string{"A=1", "PATH=/opt/bin", "B=x=y", "A=2", "EMPTY="})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/opt/bin", "HOME=/home/u", "A=2", "B=x=y", "EMPTY="}
	if !slices.Equal(got, want) {
		t.Errorf("env = %q, want %q", got, want)
	}
	for _, bad := range []string{"NOEQUALS", "=value"} {
		if _, err := buildEnv(getenv, []string{bad}); err == nil || !strings.Contains(err.Error(), "is not KEY=VALUE") {
			t.Errorf("entry %q: error %v, want one saying it is not KEY=VALUE", bad, err)
		}
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Options{}); err == nil || err.Error() != "stdio: no command given" {
		t.Errorf("no command: error %v", err)
	}
	_, err := New(Options{Command: "tidemark-no-such-command"})
	if err == nil || !strings.Contains(err.Error(), `stdio: command "tidemark-no-such-command"`) {
		t.Errorf("missing command: error %v", err)
	}
}

// TestEnvironmentIsExplicit checks that the subprocess sees PATH, HOME and
// the configured pairs, and nothing else of Tidemark's environment.
func TestEnvironmentIsExplicit(t *testing.T) {
	t.Setenv("TIDEMARK_STDIO_SECRET", "must-not-leak")
	t.Setenv("HOME", "/home/tester")
	e := testEngine(t, nil, Options{Env: []string{"GREETING=hello world"}})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)
	deliver(t, s, toolCall(t, 3, "whoami", map[string]any{}, nil))
	var who whoami
	if err := json.Unmarshal([]byte(toolText(t, out.next(t).msg)), &who); err != nil {
		t.Fatal(err)
	}
	want := []string{noRaceExitSleep, "GREETING=hello world", "HOME=/home/tester", "PATH=" + os.Getenv("PATH"), roleEnv + "=server"}
	if !slices.Equal(who.Env, want) {
		t.Errorf("subprocess environment = %q, want %q", who.Env, want)
	}
	if who.Pgid != who.Pid {
		t.Errorf("subprocess pgid %d, pid %d: want it to lead its own process group", who.Pgid, who.Pid)
	}
}

// TestRelatesMessages checks the relation rules: with one call in flight,
// its progress and logging relate to it; with two, progress relates by
// progressToken and logging goes to the standalone stream; once one call is
// answered, logging relates to the other again.
func TestRelatesMessages(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{})
	s, out := startSession(t, e, 1, nil, logs)
	initialize(t, s, out)

	deliver(t, s, toolCall(t, 3, "countdown", map[string]any{"n": 2, "delay_ms": 10, "label": "solo"}, "p"))
	var got []string
	for range 5 {
		m := out.next(t)
		got = append(got, describe(t, m.msg)+" → "+relatedTo(m.related))
	}
	want := []string{
		"progress p 1/2 → 3", "log solo tick 1 → 3",
		"progress p 2/2 → 3", "log solo tick 2 → 3",
		"result 3 → 3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("one call in flight:\ngot  %q\nwant %q", got, want)
	}

	// A: ticks at 300 and 600 ms, answered at 600 ms; B: ticks at 450,
	// 900 and 1350 ms (150 ms apart from any of A's). Until A is answered
	// two calls are in flight.
	deliver(t, s, toolCall(t, "A", "countdown", map[string]any{"n": 2, "delay_ms": 300, "label": "A"}, "ta"))
	deliver(t, s, toolCall(t, "B", "countdown", map[string]any{"n": 3, "delay_ms": 450, "label": "B"}, 7))
	got = got[:0]
	for range 11 {
		m := out.next(t)
		got = append(got, describe(t, m.msg)+" → "+relatedTo(m.related))
	}
	want = []string{
		"progress ta 1/2 → A", "log A tick 1 → none",
		"progress 7 1/3 → B", "log B tick 1 → none",
		"progress ta 2/2 → A", "log A tick 2 → none",
		"result A → A",
		"progress 7 2/3 → B", "log B tick 2 → B",
		"progress 7 3/3 → B", "log B tick 3 → B",
	}
	if !slices.Equal(got, want) {
		t.Errorf("two calls in flight:\ngot  %q\nwant %q", got, want)
	}
	if m := out.next(t); describe(t, m.msg) != "result B" || m.related != id(t, "B") {
		t.Errorf("last message %s related %s, want result B related to B", describe(t, m.msg), relatedTo(m.related))
	}

	// stderr lines reach the session's log with its token prefix.
	if !strings.Contains(logs.String(), `msg="subprocess stderr" session=TESTTOKE… generation=1 pid=`) ||
		!strings.Contains(logs.String(), `line="testserver ready pid=`) {
		t.Errorf("log lacks the subprocess's stderr line with the session prefix:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `msg="subprocess initialized" session=TESTTOKE… generation=1`) {
		t.Errorf("log lacks the start latency line:\n%s", logs.String())
	}
}

// TestServerRequests checks server-to-client requests: they get IDs
// unique in the session across generations, relate to the call in flight,
// and the client's responses reach the subprocess under its own IDs; a
// response to another generation's request is dropped; a cancelled call's
// server request is cancelled under the ID the client knows.
func TestServerRequests(t *testing.T) {
	e := testEngine(t, nil, Options{})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)

	ask := func(s engine.Session, out *outbox, callID any, wantID string, answer string) {
		t.Helper()
		deliver(t, s, toolCall(t, callID, "ask", map[string]any{"question": "colour?"}, nil))
		m := out.next(t)
		req, ok := m.msg.(*jsonrpc.Request)
		if !ok || req.Method != "elicitation/create" || req.ID != id(t, wantID) || m.related != id(t, callID) {
			t.Fatalf("got %s related %s, want elicitation/create with ID %q related to %v",
				encode(t, m.msg), relatedTo(m.related), wantID, callID)
		}
		deliver(t, s, &jsonrpc.Response{ID: req.ID, Result: raw(t, map[string]any{"action": "accept", "content": map[string]any{"answer": answer}})})
		m = out.next(t)
		if got := toolText(t, m.msg); got != "accept: "+answer || m.related != id(t, callID) {
			t.Fatalf("ask result %q related %s, want %q related to %v", got, relatedTo(m.related), "accept: "+answer, callID)
		}
	}
	ask(s, out, 3, "tidemark-1-1", "blue")
	ask(s, out, 4, "tidemark-1-2", "red")

	// Cancel a call while its server request waits: the subprocess cancels
	// its elicitation, and the client hears of it under the ID it knows.
	deliver(t, s, toolCall(t, 5, "ask", map[string]any{"question": "never answered"}, nil))
	if m := out.next(t); describe(t, m.msg) != "request elicitation/create tidemark-1-3" {
		t.Fatalf("got %s, want elicitation/create tidemark-1-3", describe(t, m.msg))
	}
	deliver(t, s, &jsonrpc.Request{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":5,"reason":"user"}`)})
	for {
		m := out.next(t)
		if r, ok := m.msg.(*jsonrpc.Request); ok && r.Method == "notifications/cancelled" {
			var p struct {
				RequestID any `json:"requestId"`
			}
			json.Unmarshal(r.Params, &p)
			if p.RequestID != "tidemark-1-3" || m.related != id(t, 5) {
				t.Errorf("cancellation names request %v related %s, want tidemark-1-3 related to 5", p.RequestID, relatedTo(m.related))
			}
			break
		}
		// The SDK answers the cancelled call too (a tool error result).
		if d := describe(t, m.msg); d != "result 5" && d != "error 5" {
			t.Fatalf("got %s while waiting for the cancellation", describe(t, m.msg))
		}
	}

	// Generation 2 is a new subprocess that numbers its requests from the
	// start again; the session-unique IDs do not repeat.
	s.Close()
	st := &engine.State{ProtocolVersion: "2025-11-25", InitializeParams: json.RawMessage(initParams), Initialized: true, LogLevel: "info"}
	s2, out2 := startSession(t, e, 2, st, nil)
	deliver(t, s2, toolCall(t, 6, "ask", map[string]any{"question": "colour?"}, nil))
	m := out2.next(t)
	if describe(t, m.msg) != "request elicitation/create tidemark-2-1" {
		t.Fatalf("gen 2: got %s, want elicitation/create tidemark-2-1", describe(t, m.msg))
	}
	// A late answer to generation 1's request is not delivered.
	deliver(t, s2, &jsonrpc.Response{ID: id(t, "tidemark-1-2"), Result: raw(t, map[string]any{"action": "accept", "content": map[string]any{"answer": "stale"}})})
	deliver(t, s2, &jsonrpc.Response{ID: id(t, "tidemark-2-1"), Result: raw(t, map[string]any{"action": "accept", "content": map[string]any{"answer": "green"}})})
	if got := toolText(t, out2.next(t).msg); got != "accept: green" {
		t.Errorf("gen 2 ask = %q, want %q", got, "accept: green")
	}
}

// TestRestore checks what a re-created session's subprocess is told: the
// stored initialize params, notifications/initialized, the log level and
// the subscriptions, with no response reaching the client.
func TestRestore(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{})
	st := &engine.State{
		ProtocolVersion:  "2025-11-25",
		InitializeParams: json.RawMessage(initParams),
		Initialized:      true,
		LogLevel:         "warning",
		Subscriptions:    []string{"test://watched", "test://other"},
	}
	s, out := startSession(t, e, 4, st, logs)
	deliver(t, s, toolCall(t, 1, "state", map[string]any{}, nil))
	m := out.next(t)
	if m.related != id(t, 1) {
		t.Errorf("state result related %s, want 1", relatedTo(m.related))
	}
	want := `{"clientName":"unit-client","initialized":true,"level":"warning","subscriptions":["test://watched","test://other"]}`
	if got := toolText(t, m.msg); got != want {
		t.Errorf("re-created subprocess saw %s, want %s", got, want)
	}
	// The restored level is in force: info lines are below warning.
	deliver(t, s, toolCall(t, 2, "countdown", map[string]any{"n": 1, "delay_ms": 1, "label": "x"}, nil))
	if got := describe(t, out.next(t).msg); got != "result 2" {
		t.Errorf("got %s, want result 2 with no info log line before it", got)
	}
	out.none(t, 100*time.Millisecond)
	if !strings.Contains(logs.String(), `msg="subprocess restored" session=TESTTOKE… generation=4`) {
		t.Errorf("log lacks the restore line:\n%s", logs.String())
	}
}

// TestRestoreWithoutInitialized checks that a session whose client never
// sent notifications/initialized is not told it did.
func TestRestoreWithoutInitialized(t *testing.T) {
	e := testEngine(t, nil, Options{})
	st := &engine.State{ProtocolVersion: "2025-11-25", InitializeParams: json.RawMessage(initParams)}
	s, out := startSession(t, e, 2, st, nil)
	deliver(t, s, &jsonrpc.Request{Method: "notifications/initialized"})
	deliver(t, s, toolCall(t, 1, "state", map[string]any{}, nil))
	want := `{"clientName":"unit-client","initialized":true,"level":"","subscriptions":null}`
	if got := toolText(t, out.next(t).msg); got != want {
		t.Errorf("state = %s, want %s", got, want)
	}
}

// TestRestoreFailure checks that Start fails, and leaves no subprocess,
// when the replayed initialize is refused.
func TestRestoreFailure(t *testing.T) {
	e := testEngine(t, nil, Options{})
	st := &engine.State{ProtocolVersion: "2025-11-25", InitializeParams: json.RawMessage(`{"protocolVersion":17}`)}
	_, err := e.Start(t.Context(), engine.Info{Token: "TESTTOKENABCDEFGHIJKLMNOPQ", Generation: 3, State: st}, newOutbox())
	if err == nil || !strings.HasPrefix(err.Error(), "stdio: restore session TESTTOKE… gen 3: initialize: the server answered: ") {
		t.Fatalf("Start error %v, want a restore failure naming initialize", err)
	}
	if n := e.Running(); n != 0 {
		t.Errorf("Running() = %d after a failed Start, want 0", n)
	}
}

// TestExitBeforeInitializeAnswered kills a subprocess that has not
// answered initialize yet: the initialize fails with server_exited and a
// message saying the session did not begin (the transport ends it), not
// that a next request starts generation 2.
func TestExitBeforeInitializeAnswered(t *testing.T) {
	e := testEngine(t, nil, Options{Env: []string{roleEnv + "=sleeper"}})
	s, out := startSession(t, e, 1, nil, nil)
	pgid := groupOf(t, e)
	deliver(t, s, &jsonrpc.Request{ID: id(t, 1), Method: "initialize", Params: json.RawMessage(initParams)})
	if err := syscall.Kill(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m := out.next(t)
	r, ok := m.msg.(*jsonrpc.Response)
	var we *jsonrpc.Error
	if !ok || r.ID != id(t, 1) || !errors.As(r.Error, &we) {
		t.Fatalf("got %s, want an error response to initialize (ID 1)", encode(t, m.msg))
	}
	want := `-32603 {"generation":1,"reason":"server_exited"} the MCP server process of this session exited (signal: killed) ` +
		`before answering initialize; the session did not begin: initialize a new one`
	if got := fmt.Sprintf("%d %s %s", we.Code, we.Data, we.Message); got != want {
		t.Fatalf("initialize error:\ngot  %s\nwant %s", got, want)
	}
}

// TestCrashFailsCallsInFlight kills the subprocess with SIGKILL during a
// call: the call gets a JSON-RPC error, Done closes, Deliver refuses.
func TestCrashFailsCallsInFlight(t *testing.T) {
	e := testEngine(t, nil, Options{})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)
	deliver(t, s, toolCall(t, 3, "whoami", map[string]any{}, nil))
	var who whoami
	json.Unmarshal([]byte(toolText(t, out.next(t).msg)), &who)

	deliver(t, s, toolCall(t, 4, "countdown", map[string]any{"n": 100, "delay_ms": 50, "label": "c"}, "tok"))
	deliver(t, s, toolCall(t, "other", "block", map[string]any{}, nil))
	for describe(t, out.next(t).msg) != "progress tok 2/100" {
	}
	if err := syscall.Kill(who.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	errs := map[string]string{}
	for len(errs) < 2 {
		m := out.next(t)
		r, ok := m.msg.(*jsonrpc.Response)
		if !ok {
			continue // progress and logging sent before the kill
		}
		var we *jsonrpc.Error
		if !errors.As(r.Error, &we) || r.ID != m.related {
			t.Fatalf("got %s related %s, want an error response related to its call", encode(t, r), relatedTo(m.related))
		}
		errs[fmt.Sprint(r.ID.Raw())] = fmt.Sprintf("%d %s %s", we.Code, we.Data, we.Message)
	}
	for _, callID := range []string{"4", "other"} {
		want := `-32603 {"generation":1,"reason":"server_exited"} the MCP server process of this session exited (signal: killed) before answering; the session's next request starts a new one at generation 2`
		if errs[callID] != want {
			t.Errorf("call %s: error %q, want %q", callID, errs[callID], want)
		}
	}
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("Done not closed after the subprocess died")
	}
	err := s.Deliver(t.Context(), toolCall(t, 5, "whoami", map[string]any{}, nil), engine.Request{})
	if !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Deliver after the crash: %v, want engine.ErrClosed", err)
	}
	if n := e.Running(); n != 0 {
		t.Errorf("Running() = %d, want 0", n)
	}
}

// TestExitEndsSession checks that a subprocess that exits on its own ends
// the session with nothing in flight: Done closes, no message is sent.
func TestExitEndsSession(t *testing.T) {
	e := testEngine(t, nil, Options{Env: []string{roleEnv + "=sleeper"}})
	s, out := startSession(t, e, 1, nil, nil)
	who := groupOf(t, e)
	syscall.Kill(who, syscall.SIGTERM) // the sleeper does not handle it: it dies
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("Done not closed after the subprocess exited")
	}
	out.none(t, 50*time.Millisecond)
}

// groupOf returns the process group of the one running subprocess.
func groupOf(t *testing.T, e *Engine) int {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.sessions) != 1 {
		t.Fatalf("%d subprocesses running, want 1", len(e.sessions))
	}
	for s := range e.sessions {
		return s.pid
	}
	return 0
}

// groupMembers returns the processes of process group pgid (from /proc),
// zombies excluded: they have exited and only await their parent's wait.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// Fields after the command name, which is in parentheses and may
		// hold spaces: state, ppid, pgrp, ...
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestCloseEndsProcessGroup checks that Close leaves no process of the
// session's group behind, grandchildren included.
func TestCloseEndsProcessGroup(t *testing.T) {
	e := testEngine(t, nil, Options{})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)
	deliver(t, s, toolCall(t, 3, "spawn", map[string]any{}, nil))
	grandchild, _ := strconv.Atoi(toolText(t, out.next(t).msg))
	pgid := groupOf(t, e)
	if got := groupMembers(t, pgid); !slices.Contains(got, grandchild) || !slices.Contains(got, pgid) {
		t.Fatalf("group %d has %v, want the server %d and its grandchild %d", pgid, got, pgid, grandchild)
	}
	s.Close()
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed when Close returned")
	}
	if got := groupMembers(t, pgid); slices.Contains(got, pgid) {
		t.Errorf("after Close, the server %d is still running", pgid)
	}
	waitGroupGone(t, "after Close", pgid)
	out.none(t, 10*time.Millisecond) // Close fails no call
}

// TestCloseEscalates checks SIGTERM then SIGKILL for a server that ignores
// both the end of its stdin and SIGTERM.
func TestCloseEscalates(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{Env: []string{roleEnv + "=stubborn"}, StopGrace: 100 * time.Millisecond})
	s, out := startSession(t, e, 1, nil, logs)
	initialize(t, s, out)
	pgid := groupOf(t, e)
	start := time.Now()
	s.Close()
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("Close returned after %v, want at least two grace periods (200ms)", d)
	}
	waitGroupGone(t, "after Close", pgid)
	for _, want := range []string{"sending SIGTERM to its process group", "sending SIGKILL to its process group"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// TestKilledGatewayEndsSubprocess: when the process running the engine
// is killed with SIGKILL, so that it ends nothing itself, its subprocess,
// a server that ignores the end of its stdin, SIGTERM and SIGPIPE (as
// Python does), dies too instead of running on under PID 1.
func TestKilledGatewayEndsSubprocess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"=gateway", noRaceExitSleep)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Fscan(stdout, &pid); err != nil {
		cmd.Process.Kill()
		t.Fatalf("the gateway wrote no subprocess pid: %v", err)
	}
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) })
	if len(groupMembers(t, pid)) != 1 {
		t.Fatalf("subprocess %d is not running", pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitGroupGone(t, "after the gateway's SIGKILL", pid)
}

// TestCapacity checks MaxProcesses: one more Start fails with
// engine.ErrCapacity until a subprocess has ended.
func TestCapacity(t *testing.T) {
	e := testEngine(t, nil, Options{MaxProcesses: 2})
	s1, _ := startSession(t, e, 1, nil, nil)
	startSession(t, e, 1, nil, nil)
	_, err := e.Start(t.Context(), engine.Info{Token: "THIRDTOKENABCDEFGHIJKLMNOP", Generation: 1}, newOutbox())
	if !errors.Is(err, engine.ErrCapacity) ||
		err.Error() != "stdio: start session THIRDTOK… gen 1: engine: at capacity: 2 subprocesses running (limit 2)" {
		t.Fatalf("third Start: %v, want engine.ErrCapacity with the counts", err)
	}
	s1.Close()
	s3, _ := startSession(t, e, 1, nil, nil)
	s3.Close()
}

// TestEngineClose ends every subprocess and refuses later Starts.
func TestEngineClose(t *testing.T) {
	e := testEngine(t, nil, Options{})
	a, _ := startSession(t, e, 1, nil, nil)
	b, _ := startSession(t, e, 1, nil, nil)
	e.Close()
	for _, s := range []engine.Session{a, b} {
		select {
		case <-s.Done():
		default:
			t.Error("a session is still live after Engine.Close")
		}
	}
	if n := e.Running(); n != 0 {
		t.Errorf("Running() = %d after Close, want 0", n)
	}
	_, err := e.Start(t.Context(), engine.Info{Token: "LATETOKENABCDEFGHIJKLMNOPQ", Generation: 1}, newOutbox())
	if !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
}

// TestFencedOutboxEndsSession checks that a refusal for good (fenced)
// ends the subprocess without failing calls into the refusing outbox.
func TestFencedOutboxEndsSession(t *testing.T) {
	e := testEngine(t, nil, Options{})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)
	out.mu.Lock()
	out.refuse = fmt.Errorf("append session TESTTOKE… gen 1: %w (gen 2)", engine.ErrFenced)
	out.mu.Unlock()
	deliver(t, s, toolCall(t, 3, "whoami", map[string]any{}, nil))
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("Done not closed after the outbox refused a message as fenced")
	}
	if n := e.Running(); n != 0 {
		t.Errorf("Running() = %d, want 0", n)
	}
}

// TestInvalidStdoutLineSkipped checks that a line that is not JSON-RPC is
// logged and skipped, and the session keeps working.
func TestInvalidStdoutLineSkipped(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e := testEngine(t, nil, Options{Env: []string{garbageEnv + "=1"}})
	s, out := startSession(t, e, 1, nil, logs)
	initialize(t, s, out)
	if !strings.Contains(logs.String(), `reason=invalid_message`) || !strings.Contains(logs.String(), `line="this line is not JSON-RPC: 1 of 1"`) {
		t.Errorf("log lacks the dropped line:\n%s", logs.String())
	}
}

// errorOf describes m, which must be an error response, as
// "ID → related: code data message".
func errorOf(t *testing.T, m sent) string {
	t.Helper()
	r, ok := m.msg.(*jsonrpc.Response)
	var we *jsonrpc.Error
	if !ok || !errors.As(r.Error, &we) {
		t.Fatalf("got %s, want an error response", encode(t, m.msg))
	}
	return fmt.Sprintf("%v → %s: %d %s %s", r.ID.Raw(), relatedTo(m.related), we.Code, we.Data, we.Message)
}

// TestMessageTooLarge: a line over MaxMessageBytes stops the subprocess,
// and the call in flight fails with reason message_too_large, its message
// naming the limit.
func TestMessageTooLarge(t *testing.T) {
	e := testEngine(t, nil, Options{MaxMessageBytes: 64 << 10})
	s, out := startSession(t, e, 1, nil, nil)
	initialize(t, s, out)
	deliver(t, s, toolCall(t, 3, "big", map[string]any{"bytes": 1000}, nil))
	if got := toolText(t, out.next(t).msg); len(got) != 1000 {
		t.Fatalf("big 1000: %d bytes, want 1000", len(got))
	}
	deliver(t, s, toolCall(t, 4, "big", map[string]any{"bytes": 100 << 10}, nil))
	got := errorOf(t, out.next(t))
	want := `4 → 4: -32603 {"generation":1,"reason":"message_too_large"} the MCP server process of this session wrote a message ` +
		`over the 65536-byte limit to stdout and was stopped; the session's next request starts a new one at generation 2`
	if got != want {
		t.Errorf("call 4:\ngot  %s\nwant %s", got, want)
	}
}

// TestInitializeAfterExit: an initialize that reaches a subprocess that
// has exited already (`true`) is answered with server_exited, as one the
// subprocess left in flight, never refused: a retry would meet the same
// command. The race between the exit and the delivery is run 30 times,
// and its one side is forced by waiting for the exit first.
func TestInitializeAfterExit(t *testing.T) {
	e, err := New(Options{Command: "true", Logger: slog.New(slog.NewTextHandler(&testenv.LogBuffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	want := `1 → 1: -32603 {"generation":1,"reason":"server_exited"} the MCP server process of this session exited ` +
		`(exit status 0) before answering initialize; the session did not begin: initialize a new one`
	for i := range 31 {
		out := newOutbox()
		s, err := e.Start(t.Context(), engine.Info{Token: "TESTTOKENABCDEFGHIJKLMNOPQ", Generation: 1}, out)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			<-s.Done()
		}
		err = s.Deliver(t.Context(), &jsonrpc.Request{ID: id(t, 1), Method: "initialize", Params: json.RawMessage(initParams)}, engine.Request{})
		if err != nil {
			t.Fatalf("start %d: Deliver(initialize): %v, want nil and a server_exited answer", i, err)
		}
		if got := errorOf(t, out.next(t)); got != want {
			t.Fatalf("start %d: initialize:\ngot  %s\nwant %s", i, got, want)
		}
		out.none(t, 0)
		s.Close()
	}
}
