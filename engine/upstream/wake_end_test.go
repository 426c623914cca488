package upstream_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestWokenSessionEndReleasesUpstream: a session woken from hibernation
// that ends before its generation has reattached to the kept upstream
// session ends that upstream session with exactly one DELETE, as the end
// of any session does (DESIGN.md, "Hibernation"). A woken generation has
// not reattached when the request that woke it delivered no message (a
// GET of the standalone stream) and Options.Forward defers the reattach
// to the first client message, or when its reattach's ping failed (the
// upstream answered 503). Each such session ends by the client's DELETE,
// by its idle TTL, or at the shutdown (the handler's Shutdown, then the
// engine's Close), or it hibernates again, keeping the upstream session,
// and the client's DELETE then ends it.
func TestWokenSessionEndReleasesUpstream(t *testing.T) {
	wakes := []struct {
		name      string
		opts      upstream.Options
		failPings int32  // pings the upstream answers 503
		failed    string // the gateway's log line that says the reattach failed; "" when none runs
	}{
		{name: "reattach deferred", opts: upstream.Options{Forward: []string{"Authorization"}}},
		{name: "reattach failed", failPings: 1, failed: "restoring the session into a new upstream session failed"},
	}
	ends := []struct {
		name     string
		end      func(t *testing.T, ctx context.Context, g *gateway, clk *testenv.Clock, s *mcptest.Session)
		shutdown bool // the end closes the engine
	}{
		{name: "client DELETE", end: func(t *testing.T, ctx context.Context, _ *gateway, _ *testenv.Clock, s *mcptest.Session) {
			if err := s.Delete(ctx); err != nil {
				t.Fatalf("DELETE: %v", err)
			}
		}},
		{name: "idle TTL", end: func(t *testing.T, ctx context.Context, g *gateway, clk *testenv.Clock, _ *mcptest.Session) {
			// The GET's handler may hold the session a moment longer:
			// sweep until it is gone. Each pass is past the idle TTL, so
			// the sweep ends the session rather than hibernate it.
			waitFor(t, "the end of the session by its idle TTL", func() bool {
				clk.Advance(25 * time.Hour)
				g.h.Registry().Sweep(ctx)
				return g.h.Registry().Len() == 0
			})
			if n := g.h.Registry().Hibernated(); n != 0 {
				t.Fatalf("%d sessions hibernated after the idle TTL, want 0", n)
			}
		}},
		{name: "shutdown", shutdown: true, end: func(t *testing.T, ctx context.Context, g *gateway, _ *testenv.Clock, _ *mcptest.Session) {
			g.h.Shutdown(ctx)
			g.eng.Close()
		}},
		{name: "hibernated again, then client DELETE", end: func(t *testing.T, ctx context.Context, g *gateway, clk *testenv.Clock, s *mcptest.Session) {
			g.hibernate(t, clk, 1)
			if err := s.Delete(ctx); err != nil {
				t.Fatalf("DELETE: %v", err)
			}
		}},
	}
	for _, w := range wakes {
		for _, e := range ends {
			t.Run(w.name+"/"+e.name, func(t *testing.T) {
				up := newUpstream(t, mcp.StreamableHTTPOptions{})
				g, clk := hibernatingGateway(t, up.URL(), w.opts)
				ctx := testContext(t)
				s := g.initialize(t, ctx)
				echoAt(t, s, 2, 1)
				g.hibernate(t, clk, 1)
				up.mu.Lock()
				kept := up.sessions[0]
				up.mu.Unlock()

				up.failPings.Store(w.failPings)
				st, err := s.Get(ctx)
				if err != nil {
					t.Fatalf("GET after the hibernation: %v", err)
				}
				if w.failed != "" {
					waitFor(t, "the line \""+w.failed+"\"", func() bool { return strings.Contains(g.logs.String(), w.failed) })
				}
				st.Close()
				if h, n := g.h.Registry().Hibernated(), g.eng.Running(); h != 0 || n != 1 {
					t.Fatalf("after the GET: %d sessions hibernated, %d generations running; want 0 and 1", h, n)
				}
				if n := len(up.requests(http.MethodPost, "ping")); n != int(w.failPings) {
					t.Fatalf("the upstream received %d ping after the wake, want %d", n, w.failPings)
				}

				e.end(t, ctx, g, clk, s)
				if n := g.eng.Running(); !e.shutdown && n != 0 {
					t.Fatalf("%d generations running after the end, want 0", n)
				}
				g.eng.Close() // waits for the DELETEs under way
				dels := up.requests(http.MethodDelete, "")
				if len(dels) != 1 || dels[0].header.Get("Mcp-Session-Id") != kept {
					var got []string
					for _, d := range dels {
						got = append(got, d.header.Get("Mcp-Session-Id"))
					}
					t.Errorf("the upstream received DELETE for sessions %q, want one for the kept session %q", got, kept)
				}
			})
		}
	}
}
