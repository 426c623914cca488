package client_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// cutOnce wraps next: the first POST whose body holds what is read whole
// and its connection closed, after writing partial (nothing, or the start
// of a response) and before any complete answer.
type cutOnce struct {
	next    http.Handler
	what    string
	partial string

	mu   sync.Mutex
	cut  bool
	seen int // POSTs whose body held what
}

func (h *cutOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(string(body), h.what) {
			h.mu.Lock()
			h.seen++
			first := !h.cut
			h.cut = true
			h.mu.Unlock()
			if first {
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					panic(err)
				}
				buf.WriteString(h.partial)
				buf.Flush()
				conn.Close()
				return
			}
		}
	}
	h.next.ServeHTTP(w, r)
}

func (h *cutOnce) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen
}

// TestConnectSurvivesCutHandshake: the connection is cut once during the
// handshake, in the answer to initialize (inside its header block), while
// notifications/initialized is sent on the reused connection, or inside
// the header block of its answer. Both
// are safe to send twice, so Connect sends them again and succeeds; a
// call then works. Regression: Connect failed ("malformed MIME header",
// "unexpected EOF"), leaving the application without a session.
func TestConnectSurvivesCutHandshake(t *testing.T) {
	for _, tc := range []struct{ name, what, partial string }{
		{"initialize answer", `"method":"initialize"`, "HTTP/1.1 200 OK\r\nContent-Ty"},
		{"notifications/initialized", `"method":"notifications/initialized"`, ""},
		{"notifications/initialized answer", `"method":"notifications/initialized"`, "HTTP/1.1 202 Acc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cl := &scripted{t: t}, newCalls()
			script(s, cl, func(name string, w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
				write(w, resultFrame("r1", req, "done"))
			})
			h := &cutOnce{next: s, what: tc.what, partial: tc.partial}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			cs := connect(t, srv.URL, newRecorder(), nil)
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "x", Arguments: map[string]any{}})
			if err != nil || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "done" {
				t.Fatalf("call after the cut handshake: %v, %v; want done", res, err)
			}
			if n := h.count(); n != 2 {
				t.Errorf("%s sent %d times, want 2 (the cut one and once again)", tc.what, n)
			}
		})
	}
}
