package connect_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recording serves with the current handler and records the method of
// every POSTed message, in order.
type recording struct {
	h atomic.Pointer[tidemark.Handler]

	mu      sync.Mutex
	methods []string
}

func (rc *recording) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if m, err := jsonrpc.DecodeMessage(body); err == nil {
			method := "response"
			if req, ok := m.(*jsonrpc.Request); ok {
				method = req.Method
			}
			rc.mu.Lock()
			rc.methods = append(rc.methods, method)
			rc.mu.Unlock()
		}
	}
	rc.h.Load().ServeHTTP(w, r)
}

// reset forgets the methods recorded so far.
func (rc *recording) reset() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := rc.methods
	rc.methods = nil
	return m
}

func newHandler() *tidemark.Handler {
	return tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Transport: transport.Options{Retry: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
	})
}

// oneSessionHandler returns a handler of the demo server that holds one
// session and never hibernates it (MaxSessions 1, HibernateAfter -1), so
// that a new session takes the room of the one held: it ends that session
// when it is idle and is refused 503 capacity while it is busy
// (session/room.go). retry is the SSE retry its streams ask for; it logs
// nothing.
func oneSessionHandler(retry time.Duration) *tidemark.Handler {
	return tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Sessions:  session.Options{MaxSessions: 1, HibernateAfter: -1},
		Transport: transport.Options{Retry: retry, Logger: slog.New(slog.DiscardHandler)},
	})
}

// postedRequest returns the JSON-RPC request that r's body holds, and
// false when the body holds anything else (a response, a batch, no
// JSON-RPC message). It restores r's body for the handler after it.
func postedRequest(r *http.Request) (*jsonrpc.Request, bool) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	m, _ := jsonrpc.DecodeMessage(body)
	req, ok := m.(*jsonrpc.Request)
	return req, ok
}

// TestRestoreAfterSessionLost: in process, a host initializes through the
// bridge, subscribes to a resource and sets its log level; the server then
// forgets the session (a fresh handler: 404). The host's next call
// succeeds on a new session, which the bridge has initialized with the
// host's parameters and given the log level and the subscription again,
// before the call; the host gets list_changed for the server's lists, one
// initialize answer, and Run returns nil when the host closes its end, with
// no goroutine left behind (goleak).
func TestRestoreAfterSessionLost(t *testing.T) {
	rc := &recording{}
	first := newHandler()
	rc.h.Store(first)
	srv := httptest.NewServer(rc)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
		first.Close()
		rc.h.Load().Close()
	}()

	toBridge, hostOut := io.Pipe()
	fromBridge, bridgeOut := io.Pipe()
	host := &mcp.IOTransport{Reader: toBridge, Writer: bridgeOut}
	conn, err := host.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- connect.Run(context.Background(), conn, connect.Options{URL: srv.URL, Logger: slog.New(slog.DiscardHandler)})
		conn.Close()
	}()

	in := make(chan jsonrpc.Message, 256)
	go func() {
		sc := bufio.NewScanner(fromBridge)
		for sc.Scan() {
			if m, err := jsonrpc.DecodeMessage(sc.Bytes()); err == nil {
				in <- m
			}
		}
		close(in)
	}()
	send := func(id any, method string, params string) {
		t.Helper()
		m := &jsonrpc.Request{Method: method, Params: json.RawMessage(params)}
		if id != nil {
			m.ID, _ = jsonrpc.MakeID(id)
		}
		data, _ := jsonrpc.EncodeMessage(m)
		if _, err := hostOut.Write(append(data, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	var seen []jsonrpc.Message
	answer := func(id string) *jsonrpc.Response {
		t.Helper()
		want, _ := jsonrpc.MakeID(id)
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m := <-in:
				seen = append(seen, m)
				if r, ok := m.(*jsonrpc.Response); ok && r.ID == want {
					if r.Error != nil {
						t.Fatalf("call %s: %v", id, r.Error)
					}
					return r
				}
			case <-timeout:
				t.Fatalf("no answer to %s within 10s", id)
			}
		}
	}

	send("init", "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}`)
	answer("init")
	send(nil, "notifications/initialized", `{}`)
	send("sub", "resources/subscribe", `{"uri":"demo://readme"}`)
	answer("sub")
	send("level", "logging/setLevel", `{"level":"debug"}`)
	answer("level")
	rc.reset()

	rc.h.Store(newHandler()) // the server forgets the session
	send("echo", "tools/call", `{"name":"echo","arguments":{"text":"again"}}`)
	if r := answer("echo"); !strings.Contains(string(r.Result), `"again"`) {
		t.Errorf("echo on the new session: %s", r.Result)
	}
	got := rc.reset()
	want := []string{"tools/call", "initialize", "notifications/initialized", "logging/setLevel", "resources/subscribe", "tools/call"}
	if !slices.Equal(got, want) {
		t.Errorf("POSTs from the 404 on: %v, want %v", got, want)
	}
	// The list changes follow the call's answer (docs/connect.md): the
	// host reads them before it goes away, or the bridge, rightly, sends
	// them to no one.
	listChanges := func() int {
		n := 0
		for _, m := range seen {
			if r, ok := m.(*jsonrpc.Request); ok && strings.HasSuffix(r.Method, "/list_changed") {
				n++
			}
		}
		return n
	}
	for deadline := time.After(10 * time.Second); listChanges() < 2; {
		select {
		case m := <-in:
			seen = append(seen, m)
		case <-deadline:
			t.Fatalf("the host received %d list_changed within 10s of the call's answer, want 2", listChanges())
		}
	}

	hostOut.Close() // the host goes away
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil when the host closes its end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still runs 10s after the host closed its end")
	}
	bridgeOut.Close()
	for m := range in {
		seen = append(seen, m)
	}
	var notes []string
	inits := 0
	initID, _ := jsonrpc.MakeID("init")
	for _, m := range seen {
		switch m := m.(type) {
		case *jsonrpc.Request:
			if strings.HasSuffix(m.Method, "/list_changed") {
				notes = append(notes, m.Method)
			}
		case *jsonrpc.Response:
			if m.ID == initID {
				inits++
			}
		}
	}
	slices.Sort(notes)
	// The demo offers tools and resources, no prompts.
	if w := []string{"notifications/resources/list_changed", "notifications/tools/list_changed"}; !slices.Equal(notes, w) {
		t.Errorf("list_changed the host received: %v, want %v", notes, w)
	}
	if inits != 1 {
		t.Errorf("the host received %d initialize answers, want 1", inits)
	}
}
