package upstream_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestUpstreamSessionDeleted: the upstream is Tidemark, and the gateway's
// session there is ended by a DELETE of someone else during a call. The
// upstream ends the call's stream with its error of a deleted session (an
// event with no id, reason deleted); the gateway takes it for the end of
// the stream, whose resume answers 404, so the call fails as on any loss
// of the upstream session: upstream_session_lost at generation 1, not an
// answer saying the gateway's client ended its session.
func TestUpstreamSessionDeleted(t *testing.T) {
	ctx := testContext(t)
	quiet := slog.New(slog.DiscardHandler)
	up := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Sessions: session.Options{Logger: quiet}, Transport: transport.Options{Logger: quiet},
	})
	var mu sync.Mutex
	var upSessions []string
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Both are in this process, whose Via the gateway adds: without
		// it the upstream does not take the gateway's requests for a loop.
		r.Header.Del("Via")
		up.ServeHTTP(w, r)
		if id := w.Header().Get("Mcp-Session-Id"); id != "" && r.Header.Get("Mcp-Session-Id") == "" {
			mu.Lock()
			upSessions = append(upSessions, id)
			mu.Unlock()
		}
	}))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		up.Shutdown(sctx)
		upSrv.CloseClientConnections()
		upSrv.Close()
		up.Close()
	})
	g := newGateway(t, upSrv.URL, upstream.Options{})
	s := g.initialize(t, ctx)
	st, err := s.Call(ctx, countdown(3, 1000, 20, "tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	untilProgress(t, st, 2)
	mu.Lock()
	ids := append([]string(nil), upSessions...)
	mu.Unlock()
	if len(ids) != 1 {
		t.Fatalf("upstream sessions %d, want 1", len(ids))
	}
	if err := (&mcptest.Client{URL: upSrv.URL, HTTP: upSrv.Client()}).SessionFor(ids[0], "2025-11-25").Delete(ctx); err != nil {
		t.Fatalf("DELETE of the upstream session: %v", err)
	}
	rest, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(mcptest.ID(3)) })
	if err != nil {
		t.Fatalf("countdown stream after the DELETE: %v", err)
	}
	reason, gen := errorData(t, response(t, rest))
	if reason != string(replay.ReasonUpstreamSessionLost) || gen != 1 {
		t.Errorf("countdown answered reason %q generation %v, want %q generation 1", reason, gen, replay.ReasonUpstreamSessionLost)
	}
}
