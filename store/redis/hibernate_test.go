package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// TestWakeAfterAnotherReplica: a replica that hibernated a session, and
// wakes it again after another replica woke it, appended and hibernated
// it, numbers its next event after the other replica's, at the same
// generation. A replica that kept its own high-water mark of the session
// across the hibernation would number it after its own last event, and
// Redis would refuse the append (or its stream would open on another
// stream's sequence).
func TestWakeAfterAnotherReplica(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	a := open(t, srv, redis.Options{})
	b := open(t, srv, redis.Options{})
	ctx := context.Background()
	create(t, a, "tok-w")
	if _, err := a.Append(ctx, "tok-w", 1, msgs("a1", "a2")); err != nil {
		t.Fatal(err)
	}
	hibernate := func(s *redis.Store, owner string) {
		t.Helper()
		if err := s.Sync(ctx, "tok-w"); err != nil {
			t.Fatal(err)
		}
		if err := s.Hibernate(ctx, "tok-w", owner, 1, []byte(`{}`)); err != nil {
			t.Fatalf("Hibernate by %s: %v", owner, err)
		}
	}
	hibernate(a, "p1")
	if _, err := b.Wake(ctx, "tok-w", "p2", 1, time.Time{}); err != nil {
		t.Fatalf("Wake on b: %v", err)
	}
	if _, err := b.Append(ctx, "tok-w", 1, msgs("b3", "b4", "b5")); err != nil {
		t.Fatal(err)
	}
	hibernate(b, "p2")
	if _, err := a.Wake(ctx, "tok-w", "p1", 1, time.Time{}); err != nil {
		t.Fatalf("Wake on a again: %v", err)
	}
	bd, err := a.Append(ctx, "tok-w", 1, msgs("a6"))
	if err != nil {
		t.Fatalf("Append on a after b's events: %v", err)
	}
	if err := a.Sync(ctx, "tok-w"); err != nil {
		t.Fatalf("Sync on a after b's events: %v", err)
	}
	evs, _, err := a.Read(ctx, "tok-w", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Data))
		if e.Seq != uint64(len(got)) || e.Generation != 1 {
			t.Fatalf("event %q: seq %d generation %d, want seq %d generation 1", e.Data, e.Seq, e.Generation, len(got))
		}
	}
	if want := "a1 a2 b3 b4 b5 a6"; strings.Join(got, " ") != want || bd.HWM != 6 {
		t.Fatalf("events after a's second wake = %q (HWM %d), want %q (HWM 6)", strings.Join(got, " "), bd.HWM, want)
	}
}
