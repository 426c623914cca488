package connect_test

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/connect"
)

// TestInitializeRefusedThenCall: the host's initialize is refused 503
// capacity (the server holds one session, busy with a call); the host
// then sends notifications/initialized and a call, as a host that does
// not check the answer does. The bridge treats the host as not
// initialized: the notification is dropped, the call answered -32600
// session_required, neither sent, so the server sees no request without
// a session but initialize. Once room frees, the host's next initialize
// is served, and its call after it.
func TestInitializeRefusedThenCall(t *testing.T) {
	h := oneSessionHandler(50 * time.Millisecond)
	var (
		mu          sync.Mutex
		sessionless []string
	)
	srv := serveClosing(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			if m := callMethod(r); m != "initialize" {
				mu.Lock()
				sessionless = append(sessionless, m)
				mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	}), h)
	busy := startBridge(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful})
	busy.initialize(`{}`)
	busy.send(`{"jsonrpc":"2.0","id":"long","method":"tools/call","params":{"name":"countdown","arguments":{"n":20,"delay_ms":100}}}`)
	time.Sleep(200 * time.Millisecond) // the call is in flight

	host := startBridge(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful, ResumeTimeout: 300 * time.Millisecond})
	host.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`)
	r, _ := host.answer("init")
	var we *jsonrpc.Error
	if !errors.As(r.Error, &we) || string(we.Data) != `{"reason":"server_refused","serverReason":"capacity","status":503}` {
		t.Fatalf("initialize while the server is full: %v %s, want server_refused 503 capacity", r.Error, r.Result)
	}
	uninitializedThenServed(t, host, func() {
		if r, _ := busy.answer("long"); r.Error != nil {
			t.Fatalf("countdown: %v", r.Error)
		}
		// The busy session gives its room once the answer is stored,
		// which its host may read a moment before.
		for deadline := time.Now().Add(10 * time.Second); h.Registry().CallsInFlight() != 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d calls in flight after the countdown's answer", h.Registry().CallsInFlight())
			}
		}
	}, &mu, &sessionless)
}

// TestInitializeAnsweredWithError: the server takes the host's first
// initialize and answers it with a JSON-RPC error (here -32602, as for a
// protocol version it refuses). The host gets that error; its call after
// it is answered -32600 session_required and never sent, and its next
// initialize is served.
func TestInitializeAnsweredWithError(t *testing.T) {
	h := newHandler()
	var (
		refused     atomic.Bool
		mu          sync.Mutex
		sessionless []string
	)
	srv := serveClosing(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			req, ok := postedRequest(r)
			switch {
			case ok && req.Method == "initialize" && refused.CompareAndSwap(false, true):
				data, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unsupported protocol version"}})
				w.Header().Set("Content-Type", "application/json")
				w.Write(data)
				return
			case ok && req.Method != "initialize":
				mu.Lock()
				sessionless = append(sessionless, req.Method)
				mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	}), h)
	host := startBridge(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful})
	host.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`)
	r, _ := host.answer("init")
	var we *jsonrpc.Error
	if !errors.As(r.Error, &we) || we.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("initialize: %v %s, want the server's -32602", r.Error, r.Result)
	}
	uninitializedThenServed(t, host, func() {}, &mu, &sessionless)
}

// uninitializedThenServed checks what a host whose initialize failed gets
// next: it sends notifications/initialized and a call anyway, and the
// call is answered -32600 session_required; once ready returns, its next
// initialize and a call after it are served. The server must have seen
// no POST without a session but initialize (sessionless, under mu).
func uninitializedThenServed(t *testing.T, host *hostSide, ready func(), mu *sync.Mutex, sessionless *[]string) {
	t.Helper()
	host.send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	host.send(`{"jsonrpc":"2.0","id":"echo","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
	r, _ := host.answer("echo")
	var we *jsonrpc.Error
	if !errors.As(r.Error, &we) || we.Code != jsonrpc.CodeInvalidRequest || string(we.Data) != `{"reason":"session_required"}` {
		t.Errorf("call after the failed initialize: %v %s, want -32600 reason session_required", r.Error, r.Result)
	}
	ready()
	host.initialize(`{}`)
	host.send(`{"jsonrpc":"2.0","id":"echo2","method":"tools/call","params":{"name":"echo","arguments":{"text":"y"}}}`)
	r, _ = host.answer("echo2")
	if got := toolText(t, r); got != "y" {
		t.Errorf("echo after the second initialize: %q, want %q", got, "y")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(*sessionless) != 0 {
		t.Errorf("POSTs without a session the server got: %v, want none", *sessionless)
	}
}
