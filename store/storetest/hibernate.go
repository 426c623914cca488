package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
)

// testHibernate checks Hibernate and Wake (DESIGN.md, "Hibernation"): the
// owner lets go of its generation with the state saved, the generation and
// the events stay, exactly one waker takes it back at the same generation,
// and every write of the wrong generation or owner is fenced.
func testHibernate(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "tok-h")
	if _, err := s.Append(ctx, "tok-h", 1, msgs("a", "b")); err != nil {
		t.Fatal(err)
	}
	settle(t, s, "tok-h")
	before, _, err := s.Read(ctx, "tok-h", 0, 10)
	if err != nil || len(before) != 2 {
		t.Fatalf("Read before Hibernate = %+v, %v; want 2 events", before, err)
	}
	var fe *store.FencedError
	if err := s.Hibernate(ctx, "tok-h", "p9", 1, []byte(`{"v":2}`)); !errors.As(err, &fe) || fe.Op != "hibernate" {
		t.Fatalf("Hibernate by a non-owner = %v, want FencedError op hibernate", err)
	}
	if err := s.Hibernate(ctx, "tok-h", "p1", 2, []byte(`{"v":2}`)); !errors.As(err, &fe) || fe.Want != 1 {
		t.Fatalf("Hibernate of a generation not current = %v, want FencedError want 1", err)
	}
	if _, err := s.Wake(ctx, "tok-h", "p2", 1, time.Time{}); !errors.As(err, &fe) || fe.Op != "wake" || fe.Want != 1 {
		t.Fatalf("Wake of a held record = %v, want FencedError op wake want 1", err)
	}
	if err := s.Hibernate(ctx, "tok-h", "p1", 1, []byte(`{"v":2}`)); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	rec, err := s.Get(ctx, "tok-h")
	if err != nil || rec.Generation != 1 || rec.Owner != "" || !rec.LeaseUntil.IsZero() || string(rec.State) != `{"v":2}` {
		t.Fatalf("Get after Hibernate = %+v, %v; want gen 1, no owner, no lease, state {\"v\":2}", rec, err)
	}
	if err := s.Renew(ctx, "tok-h", "p1", 1, time.Now()); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Renew by the owner that let go = %v, want ErrFenced", err)
	}
	if _, err := s.Wake(ctx, "tok-h", "p2", 2, time.Time{}); !errors.As(err, &fe) || fe.Want != 1 {
		t.Fatalf("Wake of a generation not current = %v, want FencedError want 1", err)
	}
	// Concurrent wakers: exactly one takes the generation back.
	lease := epoch.Add(time.Minute).UTC()
	var wins, fenced int
	var winner string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			owner := fmt.Sprintf("r%d", i)
			rec, err := s.Wake(ctx, "tok-h", owner, 1, lease)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
				winner = owner
				if rec.Generation != 1 || rec.Owner != owner || !rec.LeaseUntil.Equal(lease) || string(rec.State) != `{"v":2}` {
					t.Errorf("Wake = %+v, want gen 1 owner %s lease %v state kept", rec, owner, lease)
				}
			case errors.Is(err, store.ErrFenced):
				fenced++
			default:
				t.Errorf("Wake: %v", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 || fenced != 7 {
		t.Fatalf("8 concurrent wakes: %d won, %d fenced; want 1 and 7", wins, fenced)
	}
	b, err := s.Bounds(ctx, "tok-h")
	if err != nil || b.Generation != 1 || b.Floor != 1 || b.HWM != 2 || b.Events != 2 {
		t.Fatalf("Bounds after Wake = %+v, %v; want gen 1, floor 1, HWM 2, 2 events (the log stays)", b, err)
	}
	woken, _, err := s.Read(ctx, "tok-h", 0, 10)
	if err != nil || len(woken) != 2 || !sameEvent(woken[0], before[0]) || !sameEvent(woken[1], before[1]) {
		t.Fatalf("Read after Wake = %+v, %v; want the events as read before Hibernate, %+v", woken, err, before)
	}
	evs := msgs("c")
	if _, err := s.Append(ctx, "tok-h", 1, evs); err != nil || evs[0].Seq != 3 {
		t.Fatalf("Append after Wake: seq %d, %v; want 3", evs[0].Seq, err)
	}
	settle(t, s, "tok-h")
	got, _, err := s.Read(ctx, "tok-h", 0, 10)
	if err != nil || len(got) != 3 || string(got[0].Data) != "a" || got[2].Seq != 3 {
		t.Fatalf("Read after Wake = %+v, %v; want a, b, c at 1, 2, 3", got, err)
	}
	if err := s.Renew(ctx, "tok-h", winner, 1, lease); err != nil {
		t.Fatalf("Renew by the waker: %v", err)
	}
	// A record nobody holds is claimed at the next generation as ever.
	if err := s.Hibernate(ctx, "tok-h", winner, 1, []byte(`{"v":3}`)); err != nil {
		t.Fatal(err)
	}
	rec, err = s.Claim(ctx, "tok-h", "p3", 1, time.Time{})
	if err != nil || rec.Generation != 2 || rec.Owner != "p3" {
		t.Fatalf("Claim of a hibernated record = %+v, %v; want gen 2 owner p3", rec, err)
	}
	if _, err := s.Wake(ctx, "tok-h", "p4", 1, time.Time{}); !errors.As(err, &fe) || fe.Want != 2 {
		t.Fatalf("Wake after a Claim = %v, want FencedError want 2", err)
	}
	if err := s.End(ctx, "tok-h", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wake(ctx, "tok-h", "p4", 2, time.Time{}); !errors.Is(err, store.ErrEnded) {
		t.Fatalf("Wake of an ended session = %v, want ErrEnded", err)
	}
	if err := s.Hibernate(ctx, "tok-h", "p3", 2, nil); !errors.Is(err, store.ErrEnded) {
		t.Fatalf("Hibernate of an ended session = %v, want ErrEnded", err)
	}
}

// sameEvent reports whether a and b are the same stored event: every
// field equal, Time the same instant.
func sameEvent(a, b store.Event) bool {
	return a.Seq == b.Seq && a.Generation == b.Generation && a.Stream == b.Stream && a.Kind == b.Kind &&
		a.End == b.End && a.Retry == b.Retry && a.Time.Equal(b.Time) && string(a.Data) == string(b.Data)
}
