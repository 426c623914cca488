package tidemark_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
)

// hibernatingServer serves the demo server over real HTTP on loopback with
// sessions that hibernate after 50 ms idle, swept every 10 ms.
func hibernatingServer(t *testing.T, restorable bool) (*tidemark.Handler, *mcptest.Client) {
	t.Helper()
	return serveHibernating(t, &tidemark.Options{
		Restorable:    restorable,
		Sessions:      session.Options{HibernateAfter: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
		SweepInterval: 10 * time.Millisecond,
	})
}

// serveHibernating serves the demo server with opts over real HTTP on
// loopback.
func serveHibernating(t *testing.T, opts *tidemark.Options) (*tidemark.Handler, *mcptest.Client) {
	t.Helper()
	h := tidemark.NewHandler(demo.NewServer(), opts)
	srv := httptest.NewServer(h)
	hc := &http.Client{}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		srv.Close()
		h.Close()
	})
	return h, &mcptest.Client{URL: srv.URL, HTTP: hc}
}

// callHoldingCursor initializes a session, calls echo and returns the
// session, the id of the call stream's priming event (the cursor a client
// holds when its stream is cut at once) and the answer's event.
func callHoldingCursor(t *testing.T, ctx context.Context, c *mcptest.Client) (*mcptest.Session, string, mcptest.Event) {
	t.Helper()
	s, err := c.Initialize(ctx, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "before"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Collect()
	st.Close()
	if err != nil || len(evs) != 2 || !evs[0].IsPriming() || !evs[1].IsResponseTo(mcptest.ID(2)) {
		t.Fatalf("call stream: %v, %v; want the priming event and the answer", evs, err)
	}
	return s, evs[0].ID, evs[1]
}

// awaitHibernated waits until h's registry has hibernated n sessions.
func awaitHibernated(t *testing.T, h *tidemark.Handler, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); h.Registry().Hibernated() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions hibernated after 10 s, want %d", h.Registry().Hibernated(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHibernationResumesHeldCursor: over HTTP, a session of a restorable
// server hibernates while idle, and a resume with the cursor the client
// held answers 200 and replays exactly the events after it, at the same
// generation; the session then serves calls without a new initialize.
func TestHibernationResumesHeldCursor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, c := hibernatingServer(t, true)
	s, cursor, answer := callHoldingCursor(t, ctx, c)
	awaitHibernated(t, h, 1)
	if n := h.Registry().Len(); n != 0 {
		t.Fatalf("%d sessions live in the process after hibernation, want 0", n)
	}

	st, err := s.Resume(ctx, cursor)
	if err != nil {
		t.Fatalf("resume with %s after hibernation: %v", cursor, err)
	}
	evs, err := st.Collect()
	st.Close()
	if err != nil || len(evs) != 2 || !evs[0].ResumesFrom(cursor) || evs[1].ID != answer.ID || string(evs[1].Data) != string(answer.Data) {
		t.Fatalf("resumed stream: %v, %v; want a priming event resuming from %s, then the answer %s: %s", evs, err, cursor, answer.ID, answer.Data)
	}
	cur, _ := replay.Parse(cursor)
	if got, _ := replay.Parse(evs[1].ID); got.Generation != cur.Generation {
		t.Fatalf("answer replayed at generation %d, want %d", got.Generation, cur.Generation)
	}
	st, err = s.Call(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "after"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	evs, err = st.Collect()
	st.Close()
	if err != nil || len(evs) != 2 || !evs[1].IsResponseTo(mcptest.ID(3)) || !strings.Contains(string(evs[1].Data), "after") {
		t.Fatalf("call after the wake: %v, %v", evs, err)
	}
}

// TestHibernationNotRestorableRefusesOldCursor: a session of a server
// whose handlers may keep per-session state (Restorable false) wakes at
// generation+1, so the cursor held from before answers 409
// generation_mismatch (the resume is the request that wakes it), and new
// calls are served at the next generation.
func TestHibernationNotRestorableRefusesOldCursor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, c := hibernatingServer(t, false)
	s, cursor, _ := callHoldingCursor(t, ctx, c)
	awaitHibernated(t, h, 1)

	// The resume is the request that wakes the session.
	_, err := s.Resume(ctx, cursor)
	se, ok := mcptest.AsStatusError(err)
	if !ok || se.Status != http.StatusConflict || se.Reason() != string(replay.ReasonGenerationMismatch) {
		t.Fatalf("resume with %s after a wake at generation+1 = %v, want 409 generation_mismatch", cursor, err)
	}
	st, err := s.Call(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "after"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Collect()
	st.Close()
	if err != nil || len(evs) != 2 || !evs[1].IsResponseTo(mcptest.ID(3)) {
		t.Fatalf("call after the wake: %v, %v", evs, err)
	}
	cur, _ := replay.Parse(cursor)
	if got, _ := replay.Parse(evs[1].ID); got.Generation != cur.Generation+1 {
		t.Fatalf("answer after the wake at generation %d, want %d", got.Generation, cur.Generation+1)
	}
}

// TestHibernationMalformedCursorStaysHibernated: a resume whose
// Last-Event-ID does not parse, or names another session, is refused 400
// cursor_malformed from the session's record alone: a hibernated session
// stays hibernated (nothing wakes it), and the refusal is the one the
// same request gets while the session is awake, byte for byte.
func TestHibernationMalformedCursorStaysHibernated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, c := hibernatingServer(t, true)
	s, _, _ := callHoldingCursor(t, ctx, c)
	_, otherCursor, _ := callHoldingCursor(t, ctx, c) // another session's cursor
	cursors := []string{"garbage", otherCursor}

	awake := make([]*mcptest.StatusError, len(cursors))
	for i, cur := range cursors {
		_, err := s.Resume(ctx, cur)
		se, ok := mcptest.AsStatusError(err)
		if !ok || se.Status != http.StatusBadRequest || se.Reason() != string(replay.ReasonCursorMalformed) {
			t.Fatalf("awake: resume with %q = %v, want 400 cursor_malformed", cur, err)
		}
		awake[i] = se
	}
	awaitHibernated(t, h, 2)
	for i, cur := range cursors {
		_, err := s.Resume(ctx, cur)
		se, ok := mcptest.AsStatusError(err)
		if !ok {
			t.Fatalf("hibernated: resume with %q = %v, want 400 cursor_malformed", cur, err)
		}
		if se.Status != awake[i].Status || string(se.RawBody) != string(awake[i].RawBody) {
			t.Errorf("hibernated: resume with %q = %d %s, want what the awake session answered: %d %s",
				cur, se.Status, se.RawBody, awake[i].Status, awake[i].RawBody)
		}
		if n, hib := h.Registry().Len(), h.Registry().Hibernated(); n != 0 || hib != 2 {
			t.Fatalf("after the refused resume with %q: %d sessions live, %d hibernated; want 0 and 2 (nothing woken)", cur, n, hib)
		}
	}
}

// TestHibernationNeverRepeatsPrimingIDs: the priming events that open the
// streams resumed from one cursor carry resume parts 1, 2, 3 and on
// through the generation, across exact hibernations and the wakes at the
// same generation between them: no id is sent twice in a session
// (DESIGN.md, "Cursors"), although each wake starts new live state.
func TestHibernationNeverRepeatsPrimingIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, c := hibernatingServer(t, true)
	s, cursor, answer := callHoldingCursor(t, ctx, c)
	resume := func(want string) {
		t.Helper()
		st, err := s.Resume(ctx, cursor)
		if err != nil {
			t.Fatalf("resume with %s: %v", cursor, err)
		}
		evs, err := st.Collect()
		st.Close()
		if err != nil || len(evs) != 2 || evs[1].ID != answer.ID {
			t.Fatalf("resumed stream: %v, %v; want the priming event, then the answer %s", evs, err, answer.ID)
		}
		if evs[0].ID != want {
			t.Fatalf("priming event id %s, want %s", evs[0].ID, want)
		}
	}
	resume(cursor + "-1")
	resume(cursor + "-2")
	awaitHibernated(t, h, 1)
	resume(cursor + "-3") // the resume wakes the session at its generation
	awaitHibernated(t, h, 1)
	resume(cursor + "-4")
	resume(cursor + "-5")
}
