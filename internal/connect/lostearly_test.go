package connect_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/connect"
)

// TestSessionLostBeforeInitialized: the server forgets the session between
// the host's initialize and its notifications/initialized (a restart; the
// 404 answers the notification, before the standalone stream opened). The
// bridge initializes a new session with the host's parameters, and the
// host's next call and ping go there, each POSTed once: the session is
// never left on the dead one (MCP 2025-11-25, "Session Management": a 404
// means the client starts a new session).
func TestSessionLostBeforeInitialized(t *testing.T) {
	rc := &recording{}
	first := newHandler()
	rc.h.Store(first)
	var (
		once     sync.Once
		mu       sync.Mutex
		handlers = []*tidemark.Handler{first}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && callMethod(r) == "notifications/initialized" {
			once.Do(func() { // the server restarts: it knows no session
				h := newHandler()
				mu.Lock()
				handlers = append(handlers, h)
				mu.Unlock()
				rc.h.Store(h)
			})
		}
		rc.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, h := range handlers {
			h.Close()
		}
	})
	h := startBridge(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful})
	h.initialize(`{}`)
	h.send(`{"jsonrpc":"2.0","id":"echo","method":"tools/call","params":{"name":"echo","arguments":{"text":"again"}}}`)
	r, _ := h.answer("echo")
	if got := toolText(t, r); got != "again" {
		t.Errorf("echo after the lost session: %q, want %q", got, "again")
	}
	h.send(`{"jsonrpc":"2.0","id":"ping","method":"ping"}`)
	if r, _ := h.answer("ping"); r.Error != nil || string(r.Result) != "{}" {
		t.Errorf("ping after the lost session: %v %s, want the result {}", r.Error, r.Result)
	}
	want := []string{"initialize", "notifications/initialized", "initialize", "notifications/initialized", "tools/call", "ping"}
	if got := rc.reset(); !slices.Equal(got, want) {
		t.Errorf("POSTs the server got: %v, want %v", got, want)
	}
}
