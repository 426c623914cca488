package upstream_test

// What a client gets when the upstream takes its initialize and never
// answers it: the initialize is bounded by Options.Timeout, a call is not.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
)

// silentUpstream is a loopback listener that accepts connections and
// never writes a byte on them.
type silentUpstream struct {
	ln    net.Listener
	done  chan struct{} // closed when the accept loop has ended
	mu    sync.Mutex
	conns []net.Conn
}

// newSilentUpstream starts a silent upstream; it stops with the test.
func newSilentUpstream(t *testing.T) *silentUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &silentUpstream{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(u.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-u.done
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, c := range u.conns {
			c.Close()
		}
	})
	return u
}

// URL returns the upstream's endpoint.
func (u *silentUpstream) URL() string { return "http://" + u.ln.Addr().String() + "/mcp" }

// closedByGateway reports how many connections the upstream accepted,
// failing the test when one of them is still open: each is read to its
// end, which the gateway's close brings at once.
func (u *silentUpstream) closedByGateway(t *testing.T) int {
	t.Helper()
	u.mu.Lock()
	conns := slices.Clone(u.conns)
	u.mu.Unlock()
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(testTimeout))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("upstream connection %d: %v, want it closed by the gateway", i+1, err)
		}
	}
	return len(conns)
}

// streamingUpstream answers initialize with a session ID and an SSE
// stream that carries a priming event and never the response, until the
// gateway ends the request; it answers DELETE 204. It reports each
// DELETE's Mcp-Session-Id and each initialize the gateway ended.
func streamingUpstream(t *testing.T) (url string, deletes func() []string, ended chan struct{}) {
	t.Helper()
	var mu sync.Mutex
	var deleted []string
	ended = make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			mu.Lock()
			deleted = append(deleted, r.Header.Get("Mcp-Session-Id"))
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Mcp-Session-Id", "up-1")
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: e1\nretry: 50\ndata: \n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		ended <- struct{}{}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + "/mcp", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(deleted)
	}, ended
}

// initializeFails POSTs initialize through g, checks that it answers 200
// with a token and a stream that ends with exactly the error want (code,
// data and message), and returns the token.
func initializeFails(t *testing.T, g *gateway, want string) string {
	t.Helper()
	ctx := testContext(t)
	body, err := jsonrpc.EncodeMessage(mcptest.MustCall(1, "initialize", &mcp.InitializeParams{
		ProtocolVersion: "2025-11-25", ClientInfo: &mcp.Implementation{Name: "mcptest", Version: "1.0.0"},
		Capabilities: &mcp.ClientCapabilities{},
	}))
	if err != nil {
		t.Fatal(err)
	}
	req, err := g.client.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	token := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || token == "" {
		resp.Body.Close()
		t.Fatalf("initialize answered %d with Mcp-Session-Id %q, want 200 and a token", resp.StatusCode, token)
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil {
		t.Fatalf("initialize stream: %v", err)
	}
	var got []string
	for _, m := range msgs {
		r, ok := m.(*jsonrpc.Response)
		var we *jsonrpc.Error
		if !ok || !errors.As(r.Error, &we) {
			t.Fatalf("initialize stream holds %v, want only an error response", m)
		}
		got = append(got, fmt.Sprintf("%v: %d %s %s", r.ID.Raw(), we.Code, we.Data, we.Message))
	}
	if !slices.Equal(got, []string{want}) {
		t.Fatalf("initialize stream:\ngot  %q\nwant %q", got, []string{want})
	}
	return token
}

// sessionGone waits until the session token answers 404
// session_not_found, as every session whose initialize failed does once
// the answer is written.
func sessionGone(t *testing.T, g *gateway, token string) {
	t.Helper()
	ctx := testContext(t)
	s := g.client.SessionFor(token, "2025-11-25")
	waitFor(t, "the session of the failed initialize to answer 404 session_not_found", func() bool {
		_, err := s.Call(ctx, mcptest.MustCall(2, "ping", nil))
		var se *mcptest.StatusError
		return errors.As(err, &se) && se.Status == http.StatusNotFound && se.Reason() == replay.ReasonSessionNotFound.String()
	})
}

// TestInitializeUnanswered: an upstream that takes the client's initialize
// and never answers it, whether it accepts the connection and stays silent
// or opens an SSE stream with a session ID and sends no response on it,
// fails the initialize after Options.Timeout with a -32603 error whose
// reason is upstream_unreachable; the session did not begin (its token
// answers 404), the upstream request is ended (the connection closed,
// an upstream session it gave ended with DELETE), and no goroutine is
// left (goleak, TestMain).
func TestInitializeUnanswered(t *testing.T) {
	const timeout = 300 * time.Millisecond
	want := `1: -32603 {"generation":1,"reason":"upstream_unreachable"} the upstream MCP server did not answer ` +
		`initialize within 300ms (tidemark serve --upstream-timeout); the session did not begin: check that ` +
		`--upstream names the MCP endpoint of a running server, then initialize a new one`

	t.Run("silent", func(t *testing.T) {
		up := newSilentUpstream(t)
		g := newGateway(t, up.URL(), upstream.Options{Timeout: timeout})
		token := initializeFails(t, g, want)
		sessionGone(t, g, token)
		if n := up.closedByGateway(t); n != 1 {
			t.Errorf("the upstream accepted %d connections, want 1", n)
		}
	})

	t.Run("stream without answer", func(t *testing.T) {
		u, deletes, ended := streamingUpstream(t)
		g := newGateway(t, u, upstream.Options{Timeout: timeout})
		token := initializeFails(t, g, want)
		sessionGone(t, g, token)
		select {
		case <-ended:
		case <-time.After(testTimeout):
			t.Fatal("the upstream's initialize request was not ended")
		}
		waitFor(t, "the DELETE of the upstream session", func() bool { return slices.Equal(deletes(), []string{"up-1"}) })
	})
}

// TestCallOutlastsTimeout: Options.Timeout does not bound a call: a tool
// that runs longer than it answers.
func TestCallOutlastsTimeout(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{Timeout: 500 * time.Millisecond})
	s := g.initialize(t, ctx)
	evs := call(t, ctx, s, countdown(2, 3, 500, "tok"))
	if got := toolText(t, response(t, evs)); got != "countdown of 3 finished" {
		t.Errorf("result %q, want %q", got, "countdown of 3 finished")
	}
}

// TestInitializeAnsweredNeitherJSONNorSSE: an upstream that answers
// initialize with 200 text/plain fails the client's initialize with a
// message that says what came and what to check (regression: "the upstream
// answered initialize without its response (<nil>)").
func TestInitializeAnsweredNeitherJSONNorSSE(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello")
	}))
	t.Cleanup(srv.Close)
	g := newGateway(t, srv.URL+"/mcp", upstream.Options{})
	initializeFails(t, g, `1: -32603 {"generation":1,"reason":"upstream_error"} the upstream MCP server answered initialize `+
		`with HTTP 200 with Content-Type text/plain, 5 bytes, not JSON or SSE: an MCP server answers a request with `+
		`application/json or text/event-stream (MCP 2025-11-25, basic/transports); check that --upstream names the MCP `+
		`endpoint of a running server`)
}

// TestRestoreAnsweredNeitherJSONNorSSE: the gateway's own initialize (the
// restore of a session the upstream lost) answered 200 text/plain is
// logged with what came (regression: "the upstream answered initialize
// without its response (<nil>)").
func TestRestoreAnsweredNeitherJSONNorSSE(t *testing.T) {
	var inits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		m, _ := jsonrpc.DecodeMessage(body)
		req, ok := m.(*jsonrpc.Request)
		switch {
		case !ok || !req.IsCall():
			w.WriteHeader(http.StatusAccepted)
		case req.Method == "initialize" && inits.Add(1) == 1:
			w.Header().Set("Mcp-Session-Id", "up-1")
			w.Header().Set("Content-Type", "application/json")
			id, _ := json.Marshal(req.ID.Raw())
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`, id)
		case req.Method == "initialize":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "hello")
		default:
			http.Error(w, "session not found", http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	ctx := testContext(t)
	g := newGateway(t, srv.URL+"/mcp", upstream.Options{})
	s := g.initialize(t, ctx)
	// The first call finds the upstream session lost; the next request
	// re-creates the session, whose restore sends initialize.
	s.Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "x"}, nil))
	s.Call(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "x"}, nil))
	want := `the upstream MCP server answered initialize with HTTP 200 with Content-Type text/plain, 5 bytes, not JSON or SSE`
	waitFor(t, "the restore's failure in the log", func() bool { return strings.Contains(g.logs.String(), want) })
}
