package stdio

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestGatewayHibernation: with Options.Hibernate a session idle past
// HibernateAfter ends its subprocess (process group included); the next
// call starts a new subprocess at generation+1 with the session's state
// restored, and a cursor of the old generation answers 409
// generation_mismatch. Without it the engine never hibernates.
func TestGatewayHibernation(t *testing.T) {
	if got := hibernationOf(t, Options{}); got != engine.HibernateNever {
		t.Fatalf("hibernation without Options.Hibernate = %v, want never", got)
	}
	e := testEngine(t, nil, Options{Hibernate: true})
	if got := engine.HibernationOf(e); got != engine.HibernateLossy {
		t.Fatalf("hibernation with Options.Hibernate = %v, want lossy", got)
	}
	h := tidemark.NewEngineHandler(e, &tidemark.Options{
		Sessions:      session.Options{HibernateAfter: 200 * time.Millisecond},
		Transport:     transport.Options{Logger: slog.New(slog.DiscardHandler)},
		SweepInterval: 50 * time.Millisecond,
	})
	srv := httptest.NewServer(h)
	defer func() {
		srv.Close()
		h.Close()
	}()
	c := &mcptest.Client{URL: srv.URL, HTTP: httpClient(t)}
	s := initSession(t, c)
	before, cursor := callWhoami(t, s, 3)
	for deadline := time.Now().Add(5 * time.Second); h.Registry().Hibernated() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions hibernated 5 s after the session went idle, want 1", h.Registry().Hibernated())
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitGroupGone(t, "after hibernation", before.Pgid)
	for deadline := time.Now().Add(5 * time.Second); e.Running() > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // reaped just after its group is gone
	}
	if n := e.Running(); n != 0 {
		t.Fatalf("%d subprocesses running 5 s after hibernation, want 0", n)
	}
	after, next := callWhoami(t, s, 4)
	if after.Pid == before.Pid || next.Generation != cursor.Generation+1 {
		t.Fatalf("after the wake: pid %d (before %d), generation %d (before %d); want a new subprocess at generation+1",
			after.Pid, before.Pid, next.Generation, cursor.Generation)
	}
	_, err := s.Resume(t.Context(), cursor.String())
	se, ok := mcptest.AsStatusError(err)
	if !ok || se.Status != http.StatusConflict || se.Reason() != replay.ReasonGenerationMismatch.String() {
		t.Fatalf("resume of %s after the wake = %v, want 409 generation_mismatch", cursor, err)
	}
}

// hibernationOf returns what an engine made with opts says of
// hibernation, without starting anything.
func hibernationOf(t *testing.T, opts Options) engine.Hibernation {
	return (&Engine{opts: opts}).Hibernation()
}
