package durable_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
)

// TestHibernatedParked: a hibernated session's record leaves memory
// (only an index entry stays) and is read back from Pebble exactly, by
// Get, Bounds, Read and Wake, in the same process and after a reopen;
// the wake is taken without a group commit of its own.
func TestHibernatedParked(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	if err := s.Create(ctx, rec("tok-h", "boot-1", t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "tok-h", 1, events(3, t0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "tok-h"); err != nil {
		t.Fatal(err)
	}
	if parked, held := s.Parked("tok-h"); parked || !held {
		t.Fatalf("held session: parked %v, in memory %v; want false, true", parked, held)
	}
	if err := s.Hibernate(ctx, "tok-h", "boot-1", 1, []byte(`{"v":7}`)); err != nil {
		t.Fatal(err)
	}
	if parked, held := s.Parked("tok-h"); !parked || held {
		t.Fatalf("hibernated session: parked %v, in memory %v; want true, false", parked, held)
	}
	check := func(when string) {
		t.Helper()
		r, err := s.Get(ctx, "tok-h")
		if err != nil || r.Generation != 1 || r.Owner != "" || !r.LeaseUntil.IsZero() || string(r.State) != `{"v":7}` || !r.Created.Equal(t0) {
			t.Fatalf("%s: Get = %+v, %v; want gen 1, no owner, state {\"v\":7}", when, r, err)
		}
		b, err := s.Bounds(ctx, "tok-h")
		if err != nil || b.Generation != 1 || b.Floor != 1 || b.HWM != 3 || b.Events != 3 || b.Bytes != 3*116 || !b.Oldest.Equal(t0) {
			t.Fatalf("%s: Bounds = %+v, %v; want gen 1, floor 1, HWM 3, 3 events of 348 bytes", when, b, err)
		}
		evs, _, err := s.Read(ctx, "tok-h", 1, 10)
		if err != nil || len(evs) != 2 || evs[0].Seq != 2 || string(evs[1].Data) != `{"jsonrpc":"2.0","method":"m","params":{"i":000002}}` {
			t.Fatalf("%s: Read after 1 = %+v, %v; want events 2 and 3", when, evs, err)
		}
		if u := s.Usage(); u.Sessions != 1 || u.RetainedBytes != 3*116 {
			t.Fatalf("%s: usage %+v; want 1 session, 348 bytes", when, u)
		}
	}
	if r, err := s.Get(ctx, "tok-h"); err != nil || string(r.State) != `{"v":7}` {
		t.Fatalf("Get of the parked session = %+v, %v", r, err)
	}
	if parked, held := s.Parked("tok-h"); !parked || held {
		t.Fatalf("after Get: parked %v, in memory %v; want true, false (a Get reads Pebble only)", parked, held)
	}
	check("hibernated")
	if err := s.Create(ctx, rec("tok-h", "boot-1", t0)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Create of a parked token = %v, want ErrExists", err)
	}
	// Bounds and Read loaded it back; a write that leaves it unowned parks
	// it again.
	if err := s.Touch(ctx, "tok-h", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if parked, held := s.Parked("tok-h"); !parked || held {
		t.Fatalf("after Get and Touch: parked %v, in memory %v; want true, false", parked, held)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	if parked, held := s.Parked("tok-h"); !parked || held {
		t.Fatalf("after reopen: parked %v, in memory %v; want true, false", parked, held)
	}
	check("reopened")
	groups := s.Groups()
	lease := t0.Add(time.Minute)
	r, err := s.Wake(ctx, "tok-h", "boot-2", 1, lease)
	if err != nil || r.Generation != 1 || r.Owner != "boot-2" || !r.LeaseUntil.Equal(lease) || string(r.State) != `{"v":7}` {
		t.Fatalf("Wake after reopen = %+v, %v; want gen 1, owner boot-2, state kept", r, err)
	}
	if n := s.Groups() - groups; n != 0 {
		t.Fatalf("Wake took %d group commits, want 0 (no fsync of its own)", n)
	}
	if parked, held := s.Parked("tok-h"); parked || !held {
		t.Fatalf("woken session: parked %v, in memory %v; want false, true", parked, held)
	}
	more := events(1, t0)
	if _, err := s.Append(ctx, "tok-h", 1, more); err != nil || more[0].Seq != 4 {
		t.Fatalf("Append after the wake: seq %d, %v; want 4", more[0].Seq, err)
	}
}

// TestParkedWaitWakes: a Wait on a session that is parked meanwhile
// follows it: it returns when the woken session's next event is stored.
func TestParkedWaitWakes(t *testing.T) {
	s := open(t, t.TempDir(), durable.Options{Logger: quiet()})
	defer s.Close()
	t0 := time.Now()
	s.Create(ctx, rec("tok-w", "boot-1", t0))
	if _, err := s.Append(ctx, "tok-w", 1, events(1, t0)); err != nil {
		t.Fatal(err)
	}
	s.Sync(ctx, "tok-w")
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx, "tok-w", 1) }()
	time.Sleep(20 * time.Millisecond)
	if err := s.Hibernate(ctx, "tok-w", "boot-1", 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wake(ctx, "tok-w", "boot-1", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "tok-w", 1, events(1, t0)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait = %v, want nil (event 2 stored)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still blocked 10 s after event 2 was stored")
	}
}

// TestParkedBoundAndSweep: the directory bound trims a parked session's
// oldest events and leaves it parked, and the sweeper ends a parked
// session idle beyond IdleTTL.
func TestParkedBoundAndSweep(t *testing.T) {
	now := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := open(t, t.TempDir(), durable.Options{MaxBytes: 100 * 1000, IdleTTL: 30 * time.Minute, Now: clock, Logger: quiet()})
	defer s.Close()
	s.Create(ctx, rec("old", "p", now))
	s.Create(ctx, rec("new", "p", now))
	if _, err := s.Append(ctx, "old", 1, events(500, now)); err != nil {
		t.Fatal(err)
	}
	s.Sync(ctx, "old")
	if err := s.Hibernate(ctx, "old", "p", 1, nil); err != nil {
		t.Fatal(err)
	}
	// As in TestMaxBytes: 116,000 bytes against 100,000 - 6,250: the
	// oldest 192 events go, all of "old".
	if _, err := s.Append(ctx, "new", 1, events(500, now.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	s.Sync(ctx, "new")
	if parked, held := s.Parked("old"); !parked || held {
		t.Fatalf("trimmed hibernated session: parked %v, in memory %v; want true, false", parked, held)
	}
	old, err := s.Bounds(ctx, "old")
	if err != nil || old.Floor != 193 || old.Events != 308 {
		t.Fatalf("hibernated session after the bound = %+v, %v; want floor 193, 308 events", old, err)
	}
	if u := s.Usage(); u.RetainedBytes != 808*116 {
		t.Fatalf("retained %d bytes, want %d", u.RetainedBytes, 808*116)
	}
	// Bounds loaded it; a Touch of the time it was last used parks it
	// again, and the sweep ends it once idle beyond IdleTTL.
	s.Touch(ctx, "old", now)
	if parked, _ := s.Parked("old"); !parked {
		t.Fatal("hibernated session not parked after Touch")
	}
	now = now.Add(31 * time.Minute)
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var ended *store.EndedError
	if _, err := s.Get(ctx, "old"); !errors.As(err, &ended) || ended.Reason != store.EndIdle {
		t.Fatalf("parked session idle 31 minutes after Sweep: %v, want ended (idle)", err)
	}
	if _, err := s.Get(ctx, "new"); err != nil {
		t.Fatalf("held session after Sweep: %v, want live", err)
	}
	if u := s.Usage(); u.Sessions != 1 || u.RetainedBytes != 500*116 {
		t.Fatalf("after Sweep: %+v; want 1 session, %d bytes", u, 500*116)
	}
}

// TestParkingGivesBackTheMap: once most sessions are parked, the map of
// the sessions held in memory is made anew at its size, so the room of
// the parked ones is given back (a Go map never shrinks by itself).
func TestParkingGivesBackTheMap(t *testing.T) {
	s := open(t, t.TempDir(), durable.Options{Logger: quiet()})
	defer s.Close()
	t0 := time.Now()
	for i := range 100 {
		if err := s.Create(ctx, rec(fmt.Sprintf("tok-%03d", i), "p", t0)); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.HeldRoom(); n != 100 {
		t.Fatalf("map room with 100 sessions held = %d, want 100", n)
	}
	for i := range 90 {
		if err := s.Hibernate(ctx, fmt.Sprintf("tok-%03d", i), "p", 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Made anew when 24 were held (under a quarter of 100); the next time
	// is under 6.
	if n := s.HeldRoom(); n != 24 {
		t.Fatalf("map room with 10 of 100 sessions held = %d, want 24", n)
	}
	if u := s.Usage(); u.Sessions != 100 {
		t.Fatalf("usage counts %d sessions, want 100", u.Sessions)
	}
}
