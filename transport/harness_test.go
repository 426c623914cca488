// harness_test.go holds what the package's tests share: the real stack on
// a loopback listener, the gated tool, and checks of events and refusals.

package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every test's requests, so a stream that never ends
// fails the test instead of hanging it.
const testTimeout = 30 * time.Second

// stack is the real Tidemark stack on a loopback HTTP listener.
type stack struct {
	h      *tidemark.Handler
	srv    *httptest.Server
	client *mcptest.Client
	server *mcp.Server
	store  store.Store
}

// newStack serves server (the demo server when nil) with opts behind
// httptest.NewServer; wrap, when non-nil, wraps the handler (auth
// middleware). Everything is shut down when the test ends.
func newStack(t testing.TB, server *mcp.Server, opts *tidemark.Options, wrap func(http.Handler) http.Handler) *stack {
	t.Helper()
	return newStackOn(t, server, opts, wrap, nil)
}

// newStackOn is newStack with the listener's connections passed through
// conn, when non-nil, as they are accepted.
func newStackOn(t testing.TB, server *mcp.Server, opts *tidemark.Options, wrap func(http.Handler) http.Handler, conn func(net.Conn)) *stack {
	t.Helper()
	if server == nil {
		server = demo.NewServer()
	}
	var o tidemark.Options
	if opts != nil {
		o = *opts
	}
	quiet := slog.New(slog.DiscardHandler)
	if o.Transport.Logger == nil {
		o.Transport.Logger = quiet
	}
	if o.Sessions.Logger == nil {
		o.Sessions.Logger = quiet
	}
	if o.Store == nil {
		o.Store = memory.New(memory.Options{})
	}
	if o.Metrics == nil && o.Registerer == nil {
		o.Metrics = refusals
	}
	h := tidemark.NewHandler(server, &o)
	var handler http.Handler = h
	if wrap != nil {
		handler = wrap(h)
	}
	srv := httptest.NewUnstartedServer(handler)
	if conn != nil {
		srv.Listener = connHook{srv.Listener, conn}
	}
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Shutdown(ctx)
		srv.CloseClientConnections()
		srv.Close()
		if err := h.Close(); err != nil {
			t.Errorf("Handler.Close: %v", err)
		}
	})
	return &stack{h: h, srv: srv, server: server, store: o.Store, client: &mcptest.Client{URL: srv.URL, HTTP: srv.Client()}}
}

// connHook is a net.Listener that passes each accepted connection to hook.
type connHook struct {
	net.Listener
	hook func(net.Conn)
}

func (l connHook) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.hook(c)
	}
	return c, err
}

// clientWith returns a client of the stack that adds header to every
// request.
func (st *stack) clientWith(header http.Header) *mcptest.Client {
	return &mcptest.Client{URL: st.srv.URL, HTTP: st.srv.Client(), Header: header}
}

// initialize starts a session at version.
func (st *stack) initialize(t *testing.T, ctx context.Context, version string) *mcptest.Session {
	t.Helper()
	s, err := st.client.Initialize(ctx, version)
	if err != nil {
		t.Fatalf("initialize %s: %v", version, err)
	}
	return s
}

// supersede sends initialize again with s's token, which supersedes s's
// session, and returns the token of the session that replaces it.
func supersede(t *testing.T, ctx context.Context, s *mcptest.Session) string {
	t.Helper()
	resp, err := s.Post(ctx, mcptest.MustCall(9, "initialize", &mcp.InitializeParams{
		ProtocolVersion: "2025-11-25", ClientInfo: &mcp.Implementation{Name: "again", Version: "1"}, Capabilities: &mcp.ClientCapabilities{},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mcptest.ReadAnswer(resp); err != nil {
		t.Fatal(err)
	}
	return resp.Header.Get("Mcp-Session-Id")
}

// bounds returns the session's event log bounds.
func (st *stack) bounds(t *testing.T, token string) store.Bounds {
	t.Helper()
	b, err := st.h.Registry().Log().Bounds(context.Background(), token)
	if err != nil {
		t.Fatalf("bounds of %s: %v", store.Prefix(token), err)
	}
	return b
}

// testContext returns a context that ends with the test or after
// testTimeout.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// cursorOf returns the cursor a session's event would carry.
func cursorOf(s *mcptest.Session, gen, stream, seq uint64) string {
	return replay.Cursor{Tag: replay.Tag(s.Token), Generation: gen, Stream: stream, Sequence: seq}.String()
}

// parseCursor parses an event id, failing the test if it is not a cursor.
func parseCursor(t *testing.T, id string) replay.Cursor {
	t.Helper()
	c, err := replay.Parse(id)
	if err != nil {
		t.Fatalf("event id %q: %v", id, err)
	}
	return c
}

// wantRefusal checks that err is a refusal with status and reason, a
// JSON-RPC error body with a null id, and returns it.
func wantRefusal(t *testing.T, err error, status int, reason string) *mcptest.StatusError {
	t.Helper()
	se, ok := mcptest.AsStatusError(err)
	if !ok {
		t.Fatalf("got %v, want HTTP %d %s", err, status, reason)
	}
	checkRefusal(t, se, status, reason)
	return se
}

// checkRefusal checks a refusal's status, reason, media type and null id.
func checkRefusal(t *testing.T, se *mcptest.StatusError, status int, reason string) {
	t.Helper()
	checkRefusalID(t, se, status, reason, "null")
}

// checkRefusalID is checkRefusal for a refusal whose id is id, the JSON
// of the request's id: a refusal of a POST holding one request that names
// it once the body is read.
func checkRefusalID(t *testing.T, se *mcptest.StatusError, status int, reason, id string) {
	t.Helper()
	if se.Status != status || se.Reason() != reason {
		t.Fatalf("got HTTP %d reason %q (body %q), want HTTP %d reason %q", se.Status, se.Reason(), se.RawBody, status, reason)
	}
	if ct := se.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("refusal Content-Type = %q, want application/json", ct)
	}
	if string(se.Body.ID) != id {
		t.Fatalf("refusal id = %s, want %s", se.Body.ID, id)
	}
}

// refusalOf reads resp as a refusal and checks it.
func refusalOf(t *testing.T, resp *http.Response, status int, reason string) *mcptest.StatusError {
	t.Helper()
	se := mcptest.ReadStatusError(resp)
	checkRefusal(t, se, status, reason)
	return se
}

// toolText returns the text of a tools/call result made of one text block,
// failing the test if the response is an error or shaped otherwise.
func toolText(t *testing.T, r *jsonrpc.Response) string {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("response %v is an error: %v", r.ID.Raw(), r.Error)
	}
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatalf("result %s: %v", r.Result, err)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].Type != "text" {
		t.Fatalf("result %s: want one text block and no isError", r.Result)
	}
	return res.Content[0].Text
}

// progress is a decoded notifications/progress.
type progress struct {
	Token    any
	Progress float64
	Total    float64
}

// progressOf decodes e as notifications/progress, failing the test if it
// is anything else.
func progressOf(t *testing.T, e mcptest.Event) progress {
	t.Helper()
	r, ok := e.Request()
	if !ok || r.Method != "notifications/progress" || r.IsCall() {
		t.Fatalf("event %v: want notifications/progress", e.Event)
	}
	var p mcp.ProgressNotificationParams
	if err := json.Unmarshal(r.Params, &p); err != nil {
		t.Fatalf("progress params %s: %v", r.Params, err)
	}
	return progress{Token: p.ProgressToken, Progress: p.Progress, Total: p.Total}
}

// wantPriming checks that e is a priming event with id and retry.
func wantPriming(t *testing.T, e mcptest.Event, id string, retry time.Duration) {
	t.Helper()
	if !e.IsPriming() || e.Message != nil || (id != "" && e.ID != id) || e.Retry != retry {
		t.Fatalf("event %v: want a priming event id %q retry %v", e.Event, id, retry)
	}
}

// wantResumePriming checks that e is the priming event of a stream resumed
// from cursor, with retry: its id names cursor's position with a resume
// part, so it is an id the session never sent before (replay.Cursor).
func wantResumePriming(t *testing.T, e mcptest.Event, cursor string, retry time.Duration) {
	t.Helper()
	wantPriming(t, e, "", retry)
	if !e.ResumesFrom(cursor) {
		t.Fatalf("resumed stream's priming id %q, want the position of %q with a new resume part", e.ID, cursor)
	}
}

// wantEOF checks that the stream ends cleanly with no further event.
func wantEOF(t *testing.T, s *mcptest.Stream) {
	t.Helper()
	ev, err := s.Next()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("after the last event: got %v, %v; want the stream to end (io.EOF)", ev.Event, err)
	}
}

// countdown calls the demo's countdown tool with n steps and progress
// token tok and checks the whole stream of a 2025-11-25 session: priming,
// n progress events in order, the result, the end. It returns the events.
func countdown(t *testing.T, ctx context.Context, s *mcptest.Session, id int64, n int, tok any) []mcptest.Event {
	t.Helper()
	st, err := s.Call(ctx, mcptest.ToolCall(id, "countdown", map[string]any{"n": n}, tok))
	if err != nil {
		t.Fatalf("countdown %d: %v", id, err)
	}
	defer st.Close()
	evs, err := st.Collect()
	if err != nil {
		t.Fatalf("countdown %d: %v after %d events", id, err, len(evs))
	}
	checkCountdown(t, evs, id, n, tok)
	return evs
}

// checkCountdown checks a countdown POST stream's events (2025-11-25:
// primed).
func checkCountdown(t *testing.T, evs []mcptest.Event, id int64, n int, tok any) {
	t.Helper()
	if len(evs) != n+2 {
		t.Fatalf("countdown %d: %d events, want %d: %v", id, len(evs), n+2, evs)
	}
	wantPriming(t, evs[0], "", time.Second)
	first := parseCursor(t, evs[0].ID)
	for i, e := range evs[1 : n+1] {
		p := progressOf(t, e)
		want := progress{Token: tok, Progress: float64(i + 1), Total: float64(n)}
		if fmt.Sprint(p) != fmt.Sprint(want) || reflect.TypeOf(p.Token) != reflect.TypeOf(want.Token) {
			t.Fatalf("countdown %d event %d: progress %+v, want %+v", id, i+1, p, want)
		}
		if c := parseCursor(t, e.ID); c.Stream != first.Stream || c.Generation != first.Generation {
			t.Fatalf("countdown %d event %d: cursor %s is not of stream %d gen %d", id, i+1, e.ID, first.Stream, first.Generation)
		}
	}
	last := evs[n+1]
	r, ok := last.Response()
	if !ok || r.ID != mcptest.ID(id) {
		t.Fatalf("countdown %d: last event %v, want the response", id, last.Event)
	}
	if got, want := toolText(t, r), fmt.Sprintf("countdown of %d finished", n); got != want {
		t.Fatalf("countdown %d: result %q, want %q", id, got, want)
	}
}

// ids returns the event ids of evs.
func ids(evs []mcptest.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// gates backs the test-local tool "gated": a call {gate, n} sends one
// progress notification each time the test releases a step of its gate,
// then returns the text "<gate> done". It lets a test decide exactly when
// each event is emitted. With pad, each notification carries a message of
// pad bytes.
type gates struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

// GatedArgs are the arguments of the gated tool.
type GatedArgs struct {
	Gate string `json:"gate"`
	N    int    `json:"n"`
	Pad  int    `json:"pad,omitempty"`
}

// addGated adds the gated tool to server.
func addGated(server *mcp.Server) *gates {
	g := &gates{ch: make(map[string]chan struct{})}
	mcp.AddTool(server, &mcp.Tool{Name: "gated"}, func(ctx context.Context, req *mcp.CallToolRequest, args GatedArgs) (*mcp.CallToolResult, any, error) {
		steps := g.gate(args.Gate)
		for i := 1; i <= args.N; i++ {
			select {
			case <-steps:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: float64(args.N),
				Message: strings.Repeat("x", args.Pad),
			})
			if err != nil {
				return nil, nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: args.Gate + " done"}}}, nil, nil
	})
	return g
}

func (g *gates) gate(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch[name] == nil {
		g.ch[name] = make(chan struct{}, 1000)
	}
	return g.ch[name]
}

// release lets n more steps of gate run.
func (g *gates) release(name string, n int) {
	for range n {
		g.gate(name) <- struct{}{}
	}
}

// gatedCall returns a tools/call of the gated tool.
func gatedCall(id int64, gate string, n int) *jsonrpc.Request {
	return mcptest.ToolCall(id, "gated", GatedArgs{Gate: gate, N: n}, gate)
}

// startGated calls the gated tool on s (id, gate, n steps) and reads its
// priming event: when it returns, the call is in flight. The stream is
// closed when the test ends.
func startGated(t *testing.T, ctx context.Context, s *mcptest.Session, id int64, gate string, n int) *mcptest.Stream {
	t.Helper()
	str, err := s.Call(ctx, gatedCall(id, gate, n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { str.Close() })
	next(t, str)
	return str
}

// next reads one event, failing the test if the stream ends.
func next(t *testing.T, s *mcptest.Stream) mcptest.Event {
	t.Helper()
	e, err := s.Next()
	if err != nil {
		t.Fatalf("reading the next event: %v", err)
	}
	return e
}

// stallWatch wraps every response of a server and reports, once, that a
// write has been under way for stalled: the client is not reading and the
// connection's buffers are full, so the write cannot complete until it
// does.
type stallWatch struct {
	stalled  time.Duration
	once     sync.Once
	detected chan struct{}
}

func (sw *stallWatch) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&watchedWriter{ResponseWriter: w, sw: sw}, r)
	})
}

type watchedWriter struct {
	http.ResponseWriter
	sw *stallWatch
}

// Unwrap lets http.ResponseController reach the connection (flushes and
// write deadlines).
func (w *watchedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *watchedWriter) Write(p []byte) (int, error) {
	t := time.AfterFunc(w.sw.stalled, func() { w.sw.once.Do(func() { close(w.sw.detected) }) })
	defer t.Stop()
	return w.ResponseWriter.Write(p)
}

// smallSendBuffer gives an accepted connection a 16 KiB send buffer (no
// autotuning), so that a server's writes stall soon when its client stops
// reading.
func smallSendBuffer(c net.Conn) { c.(*net.TCPConn).SetWriteBuffer(16 << 10) }

// refusals counts the refusals of every stack that is given no other
// recorder, by reason.
var refusals = &refusalCounter{Recorder: metrics.Discard, counts: map[replay.Reason]int{}}

// refusalCounter is a metrics.Recorder that counts refusals alone.
type refusalCounter struct {
	metrics.Recorder
	mu     sync.Mutex
	counts map[replay.Reason]int
}

func (c *refusalCounter) Refused(reason replay.Reason) {
	c.mu.Lock()
	c.counts[reason]++
	c.mu.Unlock()
}

// snapshot returns the counts so far.
func (c *refusalCounter) snapshot() map[replay.Reason]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}
