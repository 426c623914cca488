package probe

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// TestCleanupDeletesEverySession: cleanup ends every session the probe
// opened, also those whose first DELETE fails (a server still busy with
// a storm that timed out answers 503, or the connection fails): each is
// sent again until it succeeds or the cleanup deadline passes, and no
// more than cleanupWorkers DELETEs are in flight at once, so that a storm's
// thousands of sessions do not overwhelm the server at the end.
func TestCleanupDeletesEverySession(t *testing.T) {
	const n = 200
	var mu sync.Mutex
	attempts := map[string]int{}
	deleted := map[string]bool{}
	inFlight, most := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(wire.HeaderSession)
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		attempts[id]++
		first := attempts[id] == 1
		if !first {
			deleted[id] = true
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
		if r.Method != http.MethodDelete {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	p := &peer{url: srv.URL, http: srv.Client(), version: ProtocolVersion}
	for i := range n {
		p.sessions = append(p.sessions, &session{p: p, id: fmt.Sprintf("S%03d", i), version: ProtocolVersion})
	}
	p.cleanup()
	srv.Client().CloseIdleConnections()
	mu.Lock()
	defer mu.Unlock()
	if len(deleted) != n {
		t.Errorf("%d of %d sessions deleted, want every one", len(deleted), n)
	}
	if most > cleanupWorkers {
		t.Errorf("%d DELETEs in flight at once, want at most %d", most, cleanupWorkers)
	}
}
