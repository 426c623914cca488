package tidemark_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/transport"
)

// durableHandler serves the demo server, restorable, on a durable store in
// dir, handing its sessions over at shutdown as tidemark serve does with
// --data-dir.
func durableHandler(t *testing.T, dir string) *tidemark.Handler {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	st, err := durable.Open(dir, durable.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Store:      st,
		Restorable: true,
		Sessions:   session.Options{HandOver: true, Logger: quiet},
		Transport:  transport.Options{Logger: quiet},
	})
}

// lateRequests gives every request it serves a context whose end is seen
// at once when the handler returns, while what context.AfterFunc arranged
// for it (a session's hold, Registry.Get) waits for release: net/http runs
// those in goroutines of their own, which may not have run when
// http.Server.Shutdown returns.
type lateRequests struct {
	mu   sync.Mutex
	ctxs []*testenv.LateRelease
}

func (lr *lateRequests) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := testenv.NewLateRelease(r.Context())
		lr.mu.Lock()
		lr.ctxs = append(lr.ctxs, ctx)
		lr.mu.Unlock()
		defer ctx.End()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// release lets what waits for the end of every request served so far run.
func (lr *lateRequests) release() {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	for _, ctx := range lr.ctxs {
		ctx.Release()
	}
}

// listenAndReconnect keeps sess's standalone GET stream open, as a desktop
// host or tidemark connect does: it opens the stream again the moment one
// ends, until a GET is refused or fails. It closes opened once the first
// stream's priming event is read, and returns what ended it.
func listenAndReconnect(ctx context.Context, sess *mcptest.Session, opened chan<- struct{}) error {
	first := true
	for {
		st, err := sess.Get(ctx)
		if err != nil {
			return err
		}
		ev, err := st.Next()
		if first && err == nil && ev.IsPriming() {
			close(opened)
			first = false
		}
		for err == nil {
			_, err = st.Next()
		}
		st.Close()
		if first {
			return errors.New("the first standalone stream ended before its priming event")
		}
	}
}

// TestShutdownHandsOverListeningSession: over real HTTP on a durable store,
// a session whose client keeps its standalone GET stream open, and opens
// it again the moment the shutdown ends it, is handed over at its
// generation by tidemark serve's shutdown (Drain, Shutdown,
// http.Server.Shutdown, Registry.HandOver), although every request's
// hold is released only after the handover (lateRequests). A Handler on
// the same directory afterwards resumes the cursor the client held of its
// earlier call: 200, the priming event resuming from that cursor, then
// the call's answer at its id of generation 1 (regression: the session
// was left for Close, the next process claimed generation 2, and the
// resume answered 409 generation_mismatch).
func TestShutdownHandsOverListeningSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()

	h := durableHandler(t, dir)
	var late lateRequests
	srv := &http.Server{Handler: late.wrap(h)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	sess, cursor, answer := callHoldingCursor(t, ctx, &mcptest.Client{URL: "http://" + ln.Addr().String() + "/mcp", HTTP: hc})

	opened := make(chan struct{})
	listened := make(chan error, 1)
	go func() { listened <- listenAndReconnect(ctx, sess, opened) }()
	select {
	case <-opened:
	case err := <-listened:
		t.Fatalf("standalone GET: %v", err)
	}

	dctx, cancelDrain := context.WithTimeout(ctx, 10*time.Second)
	defer cancelDrain()
	if err := h.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	sctx, cancelShutdown := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShutdown()
	h.Shutdown(sctx)
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatalf("http.Server.Shutdown: %v", err)
	}
	hctx, cancelHandOver := context.WithTimeout(ctx, 2*time.Second)
	defer cancelHandOver()
	handed, left := h.Registry().HandOver(hctx)
	late.release()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if handed != 1 || left != 0 {
		t.Fatalf("HandOver = %d handed over, %d left; want 1, 0", handed, left)
	}
	if err := <-listened; err == nil {
		t.Fatal("the listening client's reconnect after the shutdown succeeded")
	}

	h2 := durableHandler(t, dir)
	srv2 := httptest.NewServer(h2)
	defer func() {
		hc.CloseIdleConnections()
		srv2.Close()
		h2.Close()
	}()
	sess.Client = &mcptest.Client{URL: srv2.URL, HTTP: hc}
	st, err := sess.Resume(ctx, cursor)
	if err != nil {
		t.Fatalf("resume at %s after the restart: %v, want 200", cursor, err)
	}
	defer st.Close()
	evs, err := st.Until(func(ev mcptest.Event) bool { _, ok := ev.Response(); return ok })
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || !evs[0].ResumesFrom(cursor) || evs[1].ID != answer.ID || string(evs[1].Data) != string(answer.Data) {
		t.Fatalf("resumed stream: %+v; want a priming event resuming from %s, then the answer %s at id %s", evs, cursor, answer.Data, answer.ID)
	}
}
