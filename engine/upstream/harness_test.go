package upstream_test

// The in-process harness: a go-sdk MCP server served over real HTTP on
// loopback as the upstream (it records what it receives, and can forget its
// sessions as a restarted server does), and Tidemark with the upstream
// engine in front of it, also on loopback.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every test's requests, so a stream that never ends
// fails the test instead of hanging it.
const testTimeout = 60 * time.Second

// testContext returns a context that ends with the test or after
// testTimeout.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// received is one HTTP request the test upstream received.
type received struct {
	method string     // HTTP method
	rpc    string     // the JSON-RPC method of a POST's message; "" for a response or no body
	id     jsonrpc.ID // the JSON-RPC ID of a POST's message
	params json.RawMessage
	header http.Header
}

// testUpstream is the demo server of the go-sdk (internal/demo) behind the
// go-sdk's own StreamableHTTPHandler with opts, on a loopback listener,
// with one more tool: hang, which returns only when the test ends,
// whatever the cancellation of its call.
type testUpstream struct {
	srv     *httptest.Server
	opts    mcp.StreamableHTTPOptions
	release chan struct{} // closed at the end of the test: hang returns
	hanging chan struct{} // receives when hang starts

	// refuseResumes, when set, answers every GET with Last-Event-ID 409
	// as the go-sdk does while it still counts the stream's cut
	// connection as its reader ("stream ID conflicts with ongoing
	// stream"), whatever the handler would answer.
	refuseResumes atomic.Bool
	// failPings is how many of the next pings are answered 503, as by
	// an upstream too busy to take them, whatever the handler would
	// answer.
	failPings atomic.Int32

	mu       sync.Mutex
	h        http.Handler
	server   *mcp.Server // the MCP server behind h
	sessions []string    // the session IDs h gave
	received []received
}

// newUpstream starts a test upstream; it stops with the test.
func newUpstream(t testing.TB, opts mcp.StreamableHTTPOptions) *testUpstream {
	t.Helper()
	u := &testUpstream{opts: opts, release: make(chan struct{}), hanging: make(chan struct{}, 16)}
	u.h = u.newHandler()
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(func() {
		close(u.release)
		u.stop()
		u.mu.Lock()
		h, sessions := u.h, u.sessions
		u.mu.Unlock()
		endSessions(h, sessions)
	})
	return u
}

// stop stops the upstream: no new connection is accepted, and those open
// are cut (a gateway's standalone stream reconnects at once, and an open
// request would hold httptest.Server.Close).
func (u *testUpstream) stop() {
	u.srv.Listener.Close()
	u.srv.CloseClientConnections()
	u.srv.Close()
}

// URL returns the upstream's endpoint.
func (u *testUpstream) URL() string { return u.srv.URL + "/mcp" }

// restart replaces the server with a new one, as a restarted process
// would be: every connection is cut, and every session ID the old one gave
// answers 404 from now on.
func (u *testUpstream) restart() {
	h := u.newHandler()
	u.mu.Lock()
	old, sessions := u.h, u.sessions
	u.h, u.sessions = h, nil
	u.mu.Unlock()
	u.srv.CloseClientConnections()
	endSessions(old, sessions)
}

// newHandler returns the demo server behind a new StreamableHTTPHandler.
func (u *testUpstream) newHandler() http.Handler {
	opts := u.opts
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if u.opts.EventStore != nil {
		opts.EventStore = mcp.NewMemoryEventStore(nil)
	}
	// Subscriptions are accepted and forgotten: the test reads what the
	// upstream received.
	server := demo.New(demo.Options{Server: &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	}})
	u.mu.Lock()
	u.server = server
	u.mu.Unlock()
	mcp.AddTool(server, &mcp.Tool{Name: "hang"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		u.hanging <- struct{}{}
		<-u.release
		return &mcp.CallToolResult{}, nil, nil
	})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &opts)
}

// endSessions ends sessions of h with DELETE, so that their goroutines
// end. A session with a tool running ends when the tool does: cut its
// connections first.
func endSessions(h http.Handler, sessions []string) {
	for _, id := range sessions {
		req := httptest.NewRequest(http.MethodDelete, "/mcp", nil)
		req.Header.Set("Mcp-Session-Id", id)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}

func (u *testUpstream) serve(w http.ResponseWriter, r *http.Request) {
	rec := received{method: r.Method, header: r.Header.Clone()}
	if r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if m, err := jsonrpc.DecodeMessage(body); err == nil {
			if req, ok := m.(*jsonrpc.Request); ok {
				rec.rpc, rec.id, rec.params = req.Method, req.ID, req.Params
			} else if resp, ok := m.(*jsonrpc.Response); ok {
				rec.id = resp.ID
			}
		}
	}
	u.mu.Lock()
	u.received = append(u.received, rec)
	h := u.h
	u.mu.Unlock()
	if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" && u.refuseResumes.Load() {
		http.Error(w, "stream ID conflicts with ongoing stream", http.StatusConflict)
		return
	}
	if rec.rpc == "ping" && u.takePingFailure() {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	if rec.rpc == "initialize" {
		// The session ID is recorded before the answer leaves, so a test
		// that reads u.sessions after the gateway saw the answer finds it.
		w = &sessionRecorder{ResponseWriter: w, record: func(id string) {
			u.mu.Lock()
			if u.h == h {
				u.sessions = append(u.sessions, id)
			}
			u.mu.Unlock()
		}}
	}
	h.ServeHTTP(w, r)
}

// takePingFailure reports whether the ping being served is one of those
// failPings asks to fail, and counts it.
func (u *testUpstream) takePingFailure() bool {
	for {
		n := u.failPings.Load()
		if n <= 0 {
			return false
		}
		if u.failPings.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// sessionRecorder calls record with the Mcp-Session-Id header the handler
// sets, once, before the status line is written.
type sessionRecorder struct {
	http.ResponseWriter
	record func(id string)
	done   bool
}

func (w *sessionRecorder) WriteHeader(code int) {
	if !w.done {
		w.done = true
		if id := w.Header().Get("Mcp-Session-Id"); id != "" {
			w.record(id)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *sessionRecorder) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's Flush.
func (w *sessionRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serverSession returns the upstream's only MCP session.
func (u *testUpstream) serverSession(t *testing.T) *mcp.ServerSession {
	t.Helper()
	u.mu.Lock()
	server := u.server
	u.mu.Unlock()
	var out []*mcp.ServerSession
	for ss := range server.Sessions() {
		out = append(out, ss)
	}
	if len(out) != 1 {
		t.Fatalf("the upstream has %d sessions, want 1", len(out))
	}
	return out[0]
}

// waitHanging waits until a call of the hang tool runs.
func (u *testUpstream) waitHanging(t *testing.T) {
	t.Helper()
	select {
	case <-u.hanging:
	case <-time.After(testTimeout):
		t.Fatal("the hang tool did not start")
	}
}

// requests returns the requests received so far whose JSON-RPC method is
// rpc ("" with method GET or DELETE: those HTTP requests).
func (u *testUpstream) requests(method, rpc string) []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []received
	for _, r := range u.received {
		if r.method == method && r.rpc == rpc {
			out = append(out, r)
		}
	}
	return out
}

// gateway is Tidemark with the upstream engine, on a loopback listener.
type gateway struct {
	h      *tidemark.Handler
	eng    *upstream.Engine
	srv    *httptest.Server
	client *mcptest.Client
	logs   *testenv.LogBuffer
}

// newGateway serves a gateway to upstreamURL with opts (its URL is set
// here); it stops with the test, after the upstream's cleanup is
// registered to run later.
func newGateway(t testing.TB, upstreamURL string, opts upstream.Options) *gateway {
	t.Helper()
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.URL = upstreamURL
	opts.Logger = logger
	eng, err := upstream.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := tidemark.NewEngineHandler(eng, &tidemark.Options{
		Sessions:  session.Options{Logger: logger},
		Transport: transport.Options{Sessionless: eng.Sessionless(), Logger: logger, Retry: 50 * time.Millisecond},
	})
	srv := serveGateway(t, h, eng, logs)
	return &gateway{h: h, eng: eng, srv: srv, logs: logs, client: &mcptest.Client{URL: srv.URL, HTTP: srv.Client()}}
}

// serveGateway serves h, Tidemark with eng, on a loopback listener that
// shuts down with the test; a failed test's log ends with logs.
func serveGateway(t testing.TB, h *tidemark.Handler, eng *upstream.Engine, logs *testenv.LogBuffer) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Shutdown(ctx)
		srv.CloseClientConnections()
		srv.Close()
		eng.Close()
		h.Close()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	return srv
}

// initialize starts a session through the gateway.
func (g *gateway) initialize(t *testing.T, ctx context.Context) *mcptest.Session {
	t.Helper()
	s, err := g.client.Initialize(ctx, "")
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return s
}

// call sends call on s and returns the events of its stream, up to and
// including the response.
func call(t *testing.T, ctx context.Context, s *mcptest.Session, req *jsonrpc.Request) []mcptest.Event {
	t.Helper()
	st, err := s.Call(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", req.Method, err)
	}
	defer st.Close()
	evs, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(req.ID) })
	if err != nil {
		t.Fatalf("%s: stream: %v (events %v)", req.Method, err, evs)
	}
	return evs
}

// response returns the response among evs, failing the test when there
// is none.
func response(t *testing.T, evs []mcptest.Event) *jsonrpc.Response {
	t.Helper()
	for _, e := range evs {
		if r, ok := e.Response(); ok {
			return r
		}
	}
	t.Fatalf("no response among %d events", len(evs))
	return nil
}

// toolText returns the text of a tool result's first content, failing the
// test on an error response.
func toolText(t *testing.T, r *jsonrpc.Response) string {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error response: %v", r.Error)
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil || len(res.Content) == 0 {
		t.Fatalf("result %s is not a tool result with content", r.Result)
	}
	if res.IsError {
		t.Fatalf("tool error: %s", res.Content[0].Text)
	}
	return res.Content[0].Text
}

// errorData returns the reason and generation of a JSON-RPC error
// response's data.
func errorData(t *testing.T, r *jsonrpc.Response) (reason string, gen float64) {
	t.Helper()
	var werr *jsonrpc.Error
	if !errors.As(r.Error, &werr) {
		t.Fatalf("response %s is not an error", r.Result)
	}
	var d struct {
		Reason     string  `json:"reason"`
		Generation float64 `json:"generation"`
	}
	if err := json.Unmarshal(werr.Data, &d); err != nil {
		t.Fatalf("error.data %s: %v", werr.Data, err)
	}
	return d.Reason, d.Generation
}
