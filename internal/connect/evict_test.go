package connect_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/connect"
)

// creations serves with h and counts the sessions it created: the POSTs
// of initialize it answered with a session.
type creations struct {
	h http.Handler

	mu sync.Mutex
	n  int
}

func (c *creations) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		c.h.ServeHTTP(w, r)
		return
	}
	req, ok := postedRequest(r)
	c.h.ServeHTTP(w, r)
	if ok && req.Method == "initialize" && w.Header().Get("Mcp-Session-Id") != "" {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
}

func (c *creations) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// settle waits until the server has created at least n sessions (within
// hostTimeout), then for window, and returns the count before and after
// the window.
func (c *creations) settle(t *testing.T, n int, window time.Duration) (before, after int) {
	t.Helper()
	deadline := time.Now().Add(hostTimeout)
	for c.count() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	before = c.count()
	time.Sleep(window)
	return before, c.count()
}

// TestIdleBridgesDoNotEvictEachOther: two idle bridges toward a server
// that holds one session and cannot hibernate it (--max-sessions 1
// --hibernate-after 0), so that making room ends the least recently used
// session with no call in flight, open standalone stream or not
// (session/room.go). The second host's initialize evicts the first
// bridge's session; that bridge opens a new one at once, which evicts the
// second's, which opens a new one at once too, which evicts the first's:
// that one the bridge opened on its own, and its host sent nothing on it,
// so the bridge waits for the host's next message. Four sessions in all,
// and no more over the next 3 s; each host's next call is then served on
// a new session, and the count stops again at 8.
func TestIdleBridgesDoNotEvictEachOther(t *testing.T) {
	// The SSE retry of 500 ms holds each bridge's resume of its ended
	// standalone stream, hence the session it opens, well after the
	// other's handshake: a session ended while its initialize's answer is
	// on the way loses that answer.
	h := oneSessionHandler(500 * time.Millisecond)
	c := &creations{h: h}
	srv := serveClosing(t, c, h)
	o := connect.Options{Protocol: connect.ProtocolStateful, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	a := startBridge(t, srv.URL, o)
	a.initialize(`{}`)
	b := startBridge(t, srv.URL, o)
	b.initialize(`{}`)
	if before, after := c.settle(t, 4, 3*time.Second); before != 4 || after != 4 {
		t.Fatalf("sessions created: %d, then %d 3s later; want 4 and 4 (the bridges stop evicting each other)", before, after)
	}
	for _, host := range []*hostSide{a, b} {
		host.send(`{"jsonrpc":"2.0","id":"echo","method":"tools/call","params":{"name":"echo","arguments":{"text":"back"}}}`)
		r, _ := host.answer("echo")
		if got := toolText(t, r); got != "back" {
			t.Errorf("echo after the wait: %q, want %q", got, "back")
		}
	}
	// B's call evicts A's session, which A's host used: A opens one at
	// once, evicting B's, which B's host used: B opens one at once,
	// evicting A's own, which waits.
	if before, after := c.settle(t, 8, 3*time.Second); before != 8 || after != 8 {
		t.Errorf("sessions created after the calls: %d, then %d 3s later; want 8 and 8", before, after)
	}
}

// TestRestartRenewsOnce: the server restarts (a fresh handler: 404 for
// every session) while the host is idle. The bridge opens a new session
// at once, as before any restart; that session, which the host has not
// used, is lost at a second restart, and the bridge then opens none
// until the host's next call, which is served on the session it opens.
func TestRestartRenewsOnce(t *testing.T) {
	rc := &recording{}
	rc.h.Store(newHandler())
	srv := httptest.NewServer(rc)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		rc.h.Load().Close()
	})
	restart := func() {
		old := rc.h.Swap(newHandler())
		old.Close() // ends the standalone stream; its resume gets 404
	}
	h := startBridge(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	h.initialize(`{}`)
	h.send(`{"jsonrpc":"2.0","id":"ping","method":"ping"}`)
	h.answer("ping")
	rc.reset()

	restart()
	want := []string{"initialize", "notifications/initialized"}
	deadline := time.Now().Add(hostTimeout)
	var got []string
	for len(got) < len(want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		rc.mu.Lock()
		got = slices.Clone(rc.methods)
		rc.mu.Unlock()
	}
	time.Sleep(200 * time.Millisecond) // the standalone stream opens
	if got := rc.reset(); !slices.Equal(got, want) {
		t.Fatalf("POSTs after the first restart, the host idle: %v, want %v", got, want)
	}

	restart()
	time.Sleep(2 * time.Second)
	if got := rc.reset(); len(got) != 0 {
		t.Fatalf("POSTs within 2s of the second restart, the host idle: %v, want none", got)
	}
	h.send(`{"jsonrpc":"2.0","id":"echo","method":"tools/call","params":{"name":"echo","arguments":{"text":"back"}}}`)
	r, _ := h.answer("echo")
	if got := toolText(t, r); got != "back" {
		t.Errorf("echo after the second restart: %q, want %q", got, "back")
	}
	want = []string{"initialize", "notifications/initialized", "tools/call"}
	if got := rc.reset(); !slices.Equal(got, want) {
		t.Errorf("POSTs for the host's call: %v, want %v", got, want)
	}
}
