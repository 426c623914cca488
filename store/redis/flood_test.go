package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/floodtest"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestRedisKilledMidFlood: redis-server (appendonly yes,
// appendfsync always) gets SIGKILL while a tool floods progress
// notifications. The client receives only stored events (after Redis
// restarts from its append-only file, its last cursor is at or below the
// stored high-water mark), none twice and none skipped; the stream ends;
// resuming answers 503 unavailable while Redis is down, and, once the
// outage has outlasted the resend of the unstored batch (the generation
// is lost), 409 generation_mismatch when Redis is back.
func TestRedisKilledMidFlood(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	ctx := context.Background()
	s := open(t, srv, redis.Options{Timeout: time.Second})
	quiet := slog.New(slog.DiscardHandler)
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{Store: nopClose{s}, Retention: eventlog.Options{Budget: -1}, Transport: transport.Options{Logger: quiet}})
	hs := httptest.NewServer(h)
	defer hs.Close()
	defer h.Close()
	sess, err := (&mcptest.Client{URL: hs.URL, HTTP: hs.Client()}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	got := floodtest.Flood(t, sess, 200, srv.Kill)
	last := got[len(got)-1]

	_, err = sess.Resume(ctx, last.String())
	var se *mcptest.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || se.Reason() != string(replay.ReasonUnavailable) {
		t.Fatalf("resume while Redis is down = %v, want 503 unavailable", err)
	}

	// A batch Redis never ran is sent again for up to a second
	// (pipeline.go, resendWindow): the generation is lost only once the
	// outage outlasts that.
	lost := time.Now().Add(5 * time.Second)
	for err := s.Sync(ctx, sess.Token); !errors.Is(err, store.ErrLost); err = s.Sync(ctx, sess.Token) {
		if time.Now().After(lost) {
			t.Fatalf("sync while Redis is down = %v after 5s, want the generation lost", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.Restart()
	recoverStore(t, s, sess.Token)
	b, err := s.Bounds(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	floodtest.Contiguous(t, got, b.HWM)
	t.Logf("%d events delivered before Redis died; last seq %d, stored HWM %d", len(got), last.Sequence, b.HWM)
	_, err = sess.Resume(ctx, last.String())
	if !errors.As(err, &se) || se.Status != http.StatusConflict || se.Reason() != string(replay.ReasonGenerationMismatch) {
		t.Fatalf("resume once Redis is back = %v, want 409 generation_mismatch", err)
	}
}

// nopClose keeps the handler from closing a store the test closes itself.
type nopClose struct{ *redis.Store }

func (nopClose) Close() error { return nil }
