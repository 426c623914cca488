// sessionless_test.go tests what the handler answers itself to requests of
// the sessionless era (MCP-Protocol-Version 2026-07-28): the methods it has
// not, and the headers of the stateful era it ignores.

package transport_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/transport"
)

// sessionlessEcho is a tools/call of echo as a 2026-07-28 client sends it:
// the request's protocol version, client info and capabilities in _meta.
var sessionlessEcho = mcptest.SessionlessBody(1, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}}, nil)

// sessionlessRequest returns a request of the sessionless era to st, with
// the headers 2026-07-28 asks for (MCP-Protocol-Version, Mcp-Method,
// Mcp-Name) on a POST of sessionlessEcho.
func sessionlessRequest(t *testing.T, st *stack, method string) *http.Request {
	t.Helper()
	var body []byte
	if method == http.MethodPost {
		body = sessionlessEcho
	}
	req, err := st.client.NewRequest(testContext(t), method, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	if method == http.MethodPost {
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "echo")
	}
	return req
}

// TestSessionlessMethods: under 2026-07-28 the endpoint serves POST alone
// (MCP 2026-07-28, basic/transports, "Earlier Streamable HTTP Revisions":
// GET or DELETE answers 405). GET, DELETE and any other method are refused
// 405 method_not_allowed with Allow: POST and a JSON-RPC error body, with
// or without a session's token, and that session is unharmed.
func TestSessionlessMethods(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	live := st.initialize(t, ctx, "")
	cursor := countdown(t, ctx, live, 2, 1, "l")[1].ID
	for _, method := range []string{http.MethodGet, http.MethodDelete, http.MethodPut} {
		for _, token := range []string{"", live.Token} {
			req := sessionlessRequest(t, st, method)
			if token != "" {
				req.Header.Set("Mcp-Session-Id", token)
				req.Header.Set("Last-Event-ID", cursor)
			}
			resp, err := st.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			se := refusalOf(t, resp, http.StatusMethodNotAllowed, "method_not_allowed")
			want := "method " + method + " is not allowed under protocol version 2026-07-28, which has no standalone stream and no sessions: send each request with POST"
			if se.Body.Code != -32600 || se.Body.Message != want || se.Header.Get("Allow") != "POST" {
				t.Errorf("%s (token %v): code %d, message %q, Allow %q; want -32600, %q, POST",
					method, token != "", se.Body.Code, se.Body.Message, se.Header.Get("Allow"), want)
			}
		}
	}
	// The session the refused DELETE named lives on.
	countdown(t, ctx, live, 3, 1, "after")
}

// TestSessionlessIgnoresSessionHeaders: a 2026-07-28 POST that carries
// Mcp-Session-Id (a live session's token, or any value) or Last-Event-ID is
// served as if it did not: the headers are ignored, no session ID is
// echoed or minted, and the session named is untouched (MCP 2026-07-28,
// basic/transports, "Earlier Streamable HTTP Revisions").
func TestSessionlessIgnoresSessionHeaders(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	live := st.initialize(t, ctx, "")
	cursor := countdown(t, ctx, live, 2, 1, "l")[1].ID
	before := st.bounds(t, live.Token)
	for _, tc := range []struct {
		name   string
		header map[string]string
	}{
		{"a live token", map[string]string{"Mcp-Session-Id": live.Token}},
		{"an unknown token", map[string]string{"Mcp-Session-Id": "NEVERISSUED"}},
		{"a malformed token", map[string]string{"Mcp-Session-Id": "a b"}},
		{"Last-Event-ID", map[string]string{"Last-Event-ID": cursor}},
	} {
		req := sessionlessRequest(t, st, http.MethodPost)
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := st.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			se := mcptest.ReadStatusError(resp)
			t.Errorf("%s: HTTP %d %s, want 200", tc.name, se.Status, se.RawBody)
			continue
		}
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			t.Errorf("%s: the answer carries Mcp-Session-Id %q, want none", tc.name, sid)
		}
		msgs, err := mcptest.ReadAnswer(resp)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("%s: %v, %d messages, want the response", tc.name, err, len(msgs))
		}
		r, ok := msgs[0].(*jsonrpc.Response)
		if !ok {
			t.Fatalf("%s: answered %+v, want a response", tc.name, msgs[0])
		}
		if got := toolText(t, r); got != "hi" {
			t.Errorf("%s: echo answered %q, want %q", tc.name, got, "hi")
		}
	}
	// The live session is untouched: no event was added to its log, and it
	// serves on at the same generation.
	if after := st.bounds(t, live.Token); after != before {
		t.Fatalf("the live session's bounds went from %+v to %+v", before, after)
	}
	if c := parseCursor(t, countdown(t, ctx, live, 3, 1, "after")[0].ID); c.Generation != 1 {
		t.Fatalf("generation %d after the sessionless requests, want 1", c.Generation)
	}
}

// TestSessionlessCallsRefusedWhileDraining: while the server drains, a
// 2026-07-28 call, plain or task-augmented, is refused 503 unavailable
// with Retry-After, as a stateful call is, and reaches neither
// the Tasks extension nor the tool. The failing input (a tester's): during
// a SIGTERM drain a sessionless countdown was accepted, ran part of its
// steps, and was cut with no answer when the process stopped; a
// task-augmented one ran inline, no task created.
func TestSessionlessCallsRefusedWhileDraining(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	var marks atomic.Int32
	mcp.AddTool(server, &mcp.Tool{Name: "mark"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		marks.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "marked"}}}, nil, nil
	})
	st := newStack(t, server, &tidemark.Options{
		Tasks: &tidemark.TaskOptions{Tools: map[string]taskrun.Tool{"mark": {Support: tasks.Optional}}},
	}, nil)
	s := st.initialize(t, ctx, "")
	call := startGated(t, ctx, s, 3, "drain", 1)
	drained := make(chan error, 1)
	go func() { drained <- st.h.Drain(ctx) }()
	waitDraining(t, ctx, s)

	for _, tc := range []struct {
		name string
		caps map[string]any
	}{
		{"plain", nil},
		{"task-augmented", map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}},
	} {
		resp, err := st.client.Do(sessionlessCall(t, ctx, st, 7, "mark", nil, tc.caps))
		if err != nil {
			t.Fatal(err)
		}
		se := refusalOf(t, resp, http.StatusServiceUnavailable, "unavailable")
		if got := se.Header.Get("Retry-After"); got != "1" || se.Body.Code != -32000 {
			t.Errorf("%s call while draining: Retry-After %q, code %d; want 1, -32000", tc.name, got, se.Body.Code)
		}
	}
	if n := marks.Load(); n != 0 {
		t.Errorf("the tool ran %d times while the server drained, want 0", n)
	}
	working := 0
	if err := st.store.(store.Tasks).WorkingTasks(ctx, func(tasks.Record, uint64) bool { working++; return true }); err != nil {
		t.Fatal(err)
	}
	if working != 0 {
		t.Errorf("%d tasks created while the server drained, want 0", working)
	}

	g.release("drain", 1)
	if _, err := call.Collect(); err != nil {
		t.Fatal(err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// waitDraining waits until a stateful call on s is refused 503: Drain,
// started in another goroutine, refuses new calls.
func waitDraining(t *testing.T, ctx context.Context, s *mcptest.Session) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := s.Post(ctx, mcptest.ToolCall(99, "echo", map[string]any{"text": "x"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		se := mcptest.ReadStatusError(resp)
		if se.Status == http.StatusServiceUnavailable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new call while draining: HTTP %d, want 503", se.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// addHold adds to server the tool hold, whose call closes started and
// answers "held" once let is called (let may be called more than once).
// A test registers t.Cleanup(let) after the stack's cleanups, so that it
// runs before the server's close, which waits for the call.
func addHold(server *mcp.Server) (started <-chan struct{}, let func()) {
	start, release := make(chan struct{}), make(chan struct{})
	mcp.AddTool(server, &mcp.Tool{Name: "hold"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		close(start)
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "held"}}}, nil, nil
	})
	var once sync.Once
	return start, func() { once.Do(func() { close(release) }) }
}

// sessionlessCall returns the 2026-07-28 POST to st of a tools/call of
// the tool name with the arguments args (nil: none) and the JSON-RPC id
// id, declaring the client capabilities caps (nil: none), with the
// headers that name the call.
func sessionlessCall(t *testing.T, ctx context.Context, st *stack, id int64, name string, args, caps map[string]any) *http.Request {
	t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	body := mcptest.SessionlessBody(id, "tools/call", map[string]any{"name": name, "arguments": args}, caps)
	req, err := st.client.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", name)
	return req
}

// TestDrainWaitsForSessionlessCalls: Drain waits for the 2026-07-28 calls
// in flight as it does for a session's, so that within the shutdown grace
// they answer. The failing input (a tester's): a sessionless countdown of
// 7 s started just before SIGTERM was cut with no answer 5 s later (when
// the streams' close time ended), under a grace of 10 s, since Drain
// returned at once.
func TestDrainWaitsForSessionlessCalls(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	started, let := addHold(server)
	st := newStack(t, server, nil, nil)
	t.Cleanup(let) // before the server's close, which waits for the call
	req := sessionlessCall(t, ctx, st, 3, "hold", nil, nil)
	answered := make(chan *mcptest.StatusError, 1)
	go func() {
		resp, err := st.client.Do(req)
		if err != nil {
			answered <- &mcptest.StatusError{Detail: err.Error()}
			return
		}
		answered <- mcptest.ReadStatusError(resp)
	}()
	<-started
	drained := make(chan error, 1)
	go func() { drained <- st.h.Drain(ctx) }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) with a sessionless call in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	let()
	if se := <-answered; se.Status != http.StatusOK || !strings.Contains(string(se.RawBody), `"text":"held"`) {
		t.Fatalf("the sessionless call in flight answered %+v, want 200 with its result", se)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// TestSessionlessInflightBytes: the body of a 2026-07-28 call counts
// against MaxInflightBytes until it is answered, as a stateful POST's
// does. With a bound of one held call's body, a second call gets 503
// inflight_bytes with Retry-After 1 and does not run; once the held call
// is answered the bound is free again, and the same call is served.
func TestSessionlessInflightBytes(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	started, let := addHold(server)
	heldBody := mcptest.SessionlessBody(3, "tools/call", map[string]any{"name": "hold", "arguments": map[string]any{}}, nil)
	st := newStack(t, server, &tidemark.Options{Transport: transport.Options{MaxInflightBytes: transport.InflightBytes(heldBody)}}, nil)
	t.Cleanup(let) // before the server's close, which waits for the call
	answered := make(chan *mcptest.StatusError, 1)
	go func() {
		resp, err := st.client.Do(sessionlessCall(t, ctx, st, 3, "hold", nil, nil))
		if err != nil {
			answered <- &mcptest.StatusError{Detail: err.Error()}
			return
		}
		answered <- mcptest.ReadStatusError(resp)
	}()
	<-started
	echo := func() (*http.Response, error) {
		return st.client.Do(sessionlessCall(t, ctx, st, 4, "echo", map[string]any{"text": "after"}, nil))
	}
	resp, err := echo()
	if err != nil {
		t.Fatal(err)
	}
	se := refusalOf(t, resp, http.StatusServiceUnavailable, "inflight_bytes")
	if ra := se.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q, want 1", ra)
	}
	let()
	if se := <-answered; se.Status != http.StatusOK || !strings.Contains(string(se.RawBody), `"text":"held"`) {
		t.Fatalf("the held call answered %+v, want 200 with its result", se)
	}
	resp, err = echo()
	if err != nil {
		t.Fatal(err)
	}
	if se := mcptest.ReadStatusError(resp); se.Status != http.StatusOK || !strings.Contains(string(se.RawBody), `"text":"after"`) {
		t.Fatalf("the call after the held one answered: %d %s, want 200 with its result", se.Status, se.RawBody)
	}
}

// TestSessionlessOnly: with Options.SessionlessOnly every request of the
// stateful era is refused 400 protocol_version with the JSON-RPC error
// -32022 (UnsupportedProtocolVersionError, MCP 2026-07-28,
// basic/versioning) naming 2026-07-28 as the one version served and the
// version requested: an initialize's own (the error carries its id, and
// no session is created), else the MCP-Protocol-Version header's, else
// 2025-03-26. A 2026-07-28 request is served, and server/discover lists
// 2026-07-28 alone.
func TestSessionlessOnly(t *testing.T) {
	ctx := testContext(t)
	server := demo.New(demo.Options{Server: &mcp.ServerOptions{SupportedProtocolVersions: []string{"2026-07-28"}}})
	st := newStack(t, server, &tidemark.Options{Transport: transport.Options{SessionlessOnly: true}}, nil)
	message := func(v string) string {
		return `protocol version \"` + v + `\" is not served here: this server serves 2026-07-28 alone, which has no initialize and no sessions; send each request with its version in params._meta and in MCP-Protocol-Version`
	}
	want := func(id, v string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32022,"message":"` + message(v) +
			`","data":{"reason":"protocol_version","requested":"` + v + `","supported":["2026-07-28"]}}}`
	}
	initialize := `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, c := range []struct {
		name, method, version, body, want string
	}{
		{"initialize", http.MethodPost, "", initialize, want("7", "2025-06-18")},
		{"initialize with a header", http.MethodPost, "2025-11-25", initialize, want("7", "2025-06-18")},
		{"a call with a header", http.MethodPost, "2025-11-25", `{"jsonrpc":"2.0","id":"a","method":"tools/list"}`, want(`"a"`, "2025-11-25")},
		{"a notification", http.MethodPost, "", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, want("null", "2025-03-26")},
		{"GET", http.MethodGet, "2025-11-25", "", want("null", "2025-11-25")},
		{"DELETE", http.MethodDelete, "", "", want("null", "2025-03-26")},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		req, err := st.client.NewRequest(ctx, c.method, body)
		if err != nil {
			t.Fatal(err)
		}
		if c.version != "" {
			req.Header.Set("MCP-Protocol-Version", c.version)
		}
		req.Header.Set("Mcp-Session-Id", "SOMESESSION")
		resp, err := st.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || string(b) != c.want || resp.Header.Get("Mcp-Session-Id") != "" {
			t.Errorf("%s: %d %s (Mcp-Session-Id %q)\nwant 400 %s", c.name, resp.StatusCode, b, resp.Header.Get("Mcp-Session-Id"), c.want)
		}
	}
	if n := st.h.Registry().Len(); n != 0 {
		t.Errorf("%d sessions after the refused initializes, want 0", n)
	}

	resp, err := st.client.Do(sessionlessRequest(t, st, http.MethodPost))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if r, ok := firstResponse(msgs); err != nil || !ok || r.Error != nil || toolText(t, r) != "hi" {
		t.Fatalf("a 2026-07-28 echo: %v, %v; want its text hi", msgs, err)
	}
	req, err := st.client.NewRequest(ctx, http.MethodPost, mcptest.SessionlessBody(2, "server/discover", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "server/discover")
	resp, err = st.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err = mcptest.ReadAnswer(resp)
	r, ok := firstResponse(msgs)
	if err != nil || !ok || r.Error != nil || !strings.Contains(string(r.Result), `"supportedVersions":["2026-07-28"]`) {
		t.Fatalf("server/discover: %v, %v; want supportedVersions [2026-07-28]", msgs, err)
	}
}

// firstResponse returns the first JSON-RPC response of msgs.
func firstResponse(msgs []jsonrpc.Message) (*jsonrpc.Response, bool) {
	for _, m := range msgs {
		if r, ok := m.(*jsonrpc.Response); ok {
			return r, true
		}
	}
	return nil, false
}

// TestSessionlessNotServed: a handler without Options.Sessionless serves
// no version of the sessionless era, and says which it serves instead: a
// 2026-07-28 request gets 400 protocol_version with the error of an
// unsupported version (MCP 2026-07-28, basic/versioning: -32022, data
// supported and requested), whose supported lists the stateful era's.
func TestSessionlessNotServed(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	h := tidemark.NewEngineHandler(gosdk.New(demo.NewServer()), &tidemark.Options{
		Transport: transport.Options{Logger: quiet}, Sessions: session.Options{Logger: quiet}, Metrics: refusals,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	st := &stack{srv: srv, client: &mcptest.Client{URL: srv.URL, HTTP: srv.Client()}}
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		resp, err := st.client.HTTP.Do(sessionlessRequest(t, st, method))
		if err != nil {
			t.Fatal(err)
		}
		// A POST holding one request is answered under its id; a GET
		// has none.
		id := "null"
		if method == http.MethodPost {
			id = "1"
		}
		se := mcptest.ReadStatusError(resp)
		checkRefusalID(t, se, http.StatusBadRequest, "protocol_version", id)
		if se.Body.Code != -32022 {
			t.Fatalf("%s: code %d, want -32022", method, se.Body.Code)
		}
		wantUnsupported(`unsupported MCP-Protocol-Version "2026-07-28": this server serves 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05`,
			"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")(t, se)
	}
}

// opRecorder records each Operation as "method error_type", and counts
// the streams open by kind.
type opRecorder struct {
	metrics.Recorder
	mu      sync.Mutex
	ops     []string
	streams map[metrics.StreamKind]int
}

func (r *opRecorder) StreamOpened(kind metrics.StreamKind) { r.addStream(kind, 1) }

func (r *opRecorder) StreamClosed(kind metrics.StreamKind) { r.addStream(kind, -1) }

func (r *opRecorder) addStream(kind metrics.StreamKind, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streams == nil {
		r.streams = make(map[metrics.StreamKind]int)
	}
	r.streams[kind] += n
}

// open returns how many streams of kind are open.
func (r *opRecorder) open(kind metrics.StreamKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.streams[kind]
}

func (r *opRecorder) Operation(method, errorType string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, method+" "+errorType)
}

// TestSessionlessOperations: each request of the sessionless revision,
// which the go-sdk's handler answers, is recorded as an operation
// (mcp.server.operation.duration) under its method, with the error type
// of the response that ends its answer: none for a result, tool_error
// for a tool's error result, the JSON-RPC code of an error.
func TestSessionlessOperations(t *testing.T) {
	ctx := testContext(t)
	rec := &opRecorder{Recorder: metrics.Discard}
	st := newStack(t, nil, &tidemark.Options{Metrics: rec}, nil)
	post := func(id int64, name string, args map[string]any) {
		t.Helper()
		resp, err := st.client.HTTP.Do(sessionlessCall(t, ctx, st, id, name, args, nil))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	post(1, "echo", map[string]any{"text": "x"})
	post(2, "countdown", map[string]any{"n": 0})
	post(3, "nope", map[string]any{})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if want := []string{"tools/call ", "tools/call tool_error", "tools/call -32602"}; !slices.Equal(rec.ops, want) {
		t.Errorf("operations recorded %q, want %q", rec.ops, want)
	}
}
