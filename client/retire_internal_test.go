package client

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
)

// TestCloseDeletesRetiringSessions: Close ends with DELETE the current
// session and a retired session that still carries a call, once each, and
// not a lost one.
func TestCloseDeletesRetiringSessions(t *testing.T) {
	var (
		mu      sync.Mutex
		deleted []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			mu.Lock()
			deleted = append(deleted, r.Header.Get("Mcp-Session-Id"))
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	mc, err := (&Transport{Endpoint: srv.URL, HTTPClient: srv.Client(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Connect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := mc.(*conn)
	retired, current, lost := newSession("retired"), newSession("current"), newSession("lost")
	retired.retired, retired.calls = true, 1
	lost.retired, lost.calls = true, 1
	close(lost.lost)
	c.mu.Lock()
	c.sess = current
	c.retiring = []*session{retired, lost}
	c.mu.Unlock()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(deleted)
	if !slices.Equal(deleted, []string{"current", "retired"}) {
		t.Errorf("DELETEd %v, want [current retired]", deleted)
	}
}
