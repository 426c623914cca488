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
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// TestHibernationFailsDuringRedisOutage: an idle session whose hibernation
// sweeps run while redis-server is down (killed with SIGKILL) stays awake
// in the process at its generation; once Redis is back (restarted on its
// append-only file) a resume with the cursor the client held answers 200
// and replays exactly the answer after it, at generation 1, and a later
// sweep hibernates the session after all.
func TestHibernationFailsDuringRedisOutage(t *testing.T) {
	testenv.NeedRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	st, err := redis.New(ctx, redis.Options{URL: srv.URL(), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Store:      st,
		Restorable: true,
		// Long enough that Redis is down before the first sweep finds
		// the session idle, even on a loaded machine.
		Sessions:      session.Options{HibernateAfter: 1500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		SweepInterval: 20 * time.Millisecond,
	})
	hs := httptest.NewServer(h)
	hc := &http.Client{}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		hs.Close()
		h.Close()
	})
	c := &mcptest.Client{URL: hs.URL, HTTP: hc}
	s, cursor, answer := callHoldingCursor(t, ctx, c)
	srv.Kill()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "hibernation failed"); {
		if time.Now().After(deadline) {
			t.Fatalf("no hibernation failed within 10 s of Redis going down; log:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // more sweeps meet the outage
	if n, hib := h.Registry().Len(), h.Registry().Hibernated(); n != 1 || hib != 0 {
		t.Fatalf("during the outage %d sessions live, %d hibernated; want the session awake (1, 0)", n, hib)
	}
	srv.Restart()

	stream, err := s.Resume(ctx, cursor)
	if err != nil {
		t.Fatalf("resume with %s after the outage: %v; log:\n%s", cursor, err, logs)
	}
	evs, err := stream.Collect()
	stream.Close()
	if err != nil || len(evs) != 2 || !evs[0].ResumesFrom(cursor) || evs[1].ID != answer.ID || string(evs[1].Data) != string(answer.Data) {
		t.Fatalf("resumed stream: %v, %v; want a priming event resuming from %s, then the answer %s", evs, err, cursor, answer.ID)
	}
	if got, _ := replay.Parse(evs[1].ID); got.Generation != 1 {
		t.Fatalf("answer replayed at generation %d, want 1", got.Generation)
	}
	if strings.Contains(logs.String(), "generation ends here") || strings.Contains(logs.String(), "re-created") {
		t.Fatalf("the outage ended a generation; log:\n%s", logs)
	}
	// Idle again with the store back: a later sweep hibernates it, and
	// it wakes at generation 1.
	awaitHibernated(t, h, 1)
	stream, err = s.Resume(ctx, cursor)
	if err != nil {
		t.Fatalf("resume after the later hibernation: %v", err)
	}
	evs, err = stream.Collect()
	stream.Close()
	if err != nil || len(evs) != 2 || evs[1].ID != answer.ID {
		t.Fatalf("resumed stream after the later hibernation: %v, %v; want the answer %s", evs, err, answer.ID)
	}
}
