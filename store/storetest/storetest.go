// Package storetest checks a store.Store backend against the contract of
// package store: records, tombstones, sequence assignment, fencing, reads,
// trimming and waiting. Every backend's tests call Run.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
)

// Run runs the contract tests. newStore returns a fresh, empty store for one
// subtest; Run closes it at the end of the subtest.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		f    func(t *testing.T, s store.Store)
	}{
		{"CreateGet", testCreateGet},
		{"End", testEnd},
		{"EndUser", testEndUser},
		{"AppendRead", testAppendRead},
		{"Fencing", testFencing},
		{"Claim", testClaim},
		{"Trim", testTrim},
		{"Openings", testOpenings},
		{"Wait", testWait},
		{"ConcurrentAppends", testConcurrentAppends},
		{"Sync", testSync},
		{"Hibernate", testHibernate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			defer s.Close()
			tt.f(t, s)
		})
	}
}

var epoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func create(t *testing.T, s store.Store, token string) store.Record {
	t.Helper()
	rec := store.Record{Token: token, Generation: 1, Owner: "p1", State: []byte(`{"v":1}`), Created: epoch, LastSeen: epoch}
	if err := s.Create(context.Background(), rec); err != nil {
		t.Fatalf("Create(%s): %v", token, err)
	}
	return rec
}

// settle waits until what was appended to token is stored (store.Log.Sync):
// a pipelined store makes it visible to Read only then.
func settle(t *testing.T, s store.Store, token string) {
	t.Helper()
	if err := s.Sync(context.Background(), token); err != nil {
		t.Fatalf("Sync(%s): %v", token, err)
	}
}

func msgs(datas ...string) []store.Event {
	evs := make([]store.Event, len(datas))
	for i, d := range datas {
		evs[i] = store.Event{Stream: 1, Kind: store.KindMessage, Data: []byte(d), Time: epoch.Add(time.Duration(i) * time.Second)}
	}
	return evs
}

func testCreateGet(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrNotFound", err)
	}
	rec := create(t, s, "tok-a")
	got, err := s.Get(ctx, "tok-a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Token != rec.Token || got.Generation != 1 || got.Owner != "p1" || string(got.State) != `{"v":1}` || !got.Created.Equal(epoch) {
		t.Fatalf("Get = %+v, want %+v", got, rec)
	}
	if err := s.Create(ctx, rec); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second Create = %v, want ErrExists", err)
	}
	if err := s.SaveState(ctx, "tok-a", 1, []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch(ctx, "tok-a", epoch.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch(ctx, "tok-a", epoch.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Get(ctx, "tok-a")
	if string(got.State) != `{"v":2}` || !got.LastSeen.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("after SaveState and Touch: State %s LastSeen %v, want {\"v\":2} and %v", got.State, got.LastSeen, epoch.Add(time.Minute))
	}
	b, err := s.Bounds(ctx, "tok-a")
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Bounds{Generation: 1, Floor: 1, HWM: 0}); b != want {
		t.Fatalf("Bounds of a new session = %+v, want %+v", b, want)
	}
}

func testEnd(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "tok-e")
	if _, err := s.Append(ctx, "tok-e", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.End(ctx, "tok-e", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var ended *store.EndedError
	if _, err := s.Get(ctx, "tok-e"); !errors.As(err, &ended) || ended.Reason != store.EndDeleted || !errors.Is(err, store.ErrEnded) {
		t.Fatalf("Get after End = %v, want EndedError(deleted)", err)
	}
	if _, _, err := s.Read(ctx, "tok-e", 0, 10); !errors.Is(err, store.ErrEnded) {
		t.Fatalf("Read after End = %v, want ErrEnded", err)
	}
	if _, err := s.Append(ctx, "tok-e", 1, msgs("b")); !errors.Is(err, store.ErrEnded) {
		t.Fatalf("Append after End = %v, want ErrEnded", err)
	}
	if err := s.Create(ctx, store.Record{Token: "tok-e", Generation: 1}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Create over a tombstone = %v, want ErrExists", err)
	}
	if err := s.End(ctx, "tok-e", store.EndIdle, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("second End = %v, want nil", err)
	}
	if _, err := s.Get(ctx, "tok-e"); !errors.As(err, &ended) || ended.Reason != store.EndDeleted {
		t.Fatalf("second End changed the reason: %v", err)
	}
	if err := s.End(ctx, "never", store.EndDeleted, time.Now().Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("End(unknown) = %v, want ErrNotFound", err)
	}
	// An expired tombstone makes the token unknown again.
	create(t, s, "tok-short")
	if err := s.End(ctx, "tok-short", store.EndIdle, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "tok-short"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after the tombstone expired = %v, want ErrNotFound", err)
	}
}

// testEndUser: a tombstone keeps the user the session belonged to, and
// every call for the ended token reports it with the reason, including a
// Wait that was blocked when the session ended; a session without a user
// reports none.
func testEndUser(t *testing.T, s store.Store) {
	ctx := context.Background()
	const user = "alice smith|x" // a space and a separator: read back whole
	rec := store.Record{Token: "tok-u", Generation: 1, Owner: "p1", UserID: user, Created: epoch, LastSeen: epoch}
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "tok-u", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	settle(t, s, "tok-u")
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(ctx, "tok-u", 1) }()
	time.Sleep(20 * time.Millisecond) // let the Wait block; it must see the end either way
	if err := s.End(ctx, "tok-u", store.EndIdle, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	want := store.EndedError{Token: "tok-u", Reason: store.EndIdle, UserID: user}
	check := func(op string, err error) {
		t.Helper()
		var ended *store.EndedError
		if !errors.As(err, &ended) || *ended != want {
			t.Fatalf("%s after End = %v (%+v), want %+v", op, err, ended, want)
		}
	}
	select {
	case err := <-waited:
		check("Wait in progress", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after End")
	}
	_, err := s.Get(ctx, "tok-u")
	check("Get", err)
	_, _, err = s.Read(ctx, "tok-u", 0, 10)
	check("Read", err)
	_, err = s.Bounds(ctx, "tok-u")
	check("Bounds", err)
	_, err = s.Append(ctx, "tok-u", 1, msgs("b"))
	check("Append", err)
	_, err = s.Claim(ctx, "tok-u", "p2", 1, time.Time{})
	check("Claim", err)
	check("Wait", s.Wait(ctx, "tok-u", 0))
	if err := s.End(ctx, "tok-u", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("second End = %v, want nil", err)
	}
	_, err = s.Get(ctx, "tok-u")
	check("Get after a second End", err)

	create(t, s, "tok-nouser")
	if err := s.End(ctx, "tok-nouser", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	want = store.EndedError{Token: "tok-nouser", Reason: store.EndDeleted}
	_, err = s.Get(ctx, "tok-nouser")
	check("Get of a session without a user", err)
}

func testAppendRead(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "tok-r")
	evs := msgs("a", "b", "c")
	b, err := s.Append(ctx, "tok-r", 1, evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) || e.Generation != 1 {
			t.Fatalf("event %d: Seq %d Generation %d, want %d and 1", i, e.Seq, e.Generation, i+1)
		}
	}
	if b.Floor != 1 || b.HWM != 3 || b.Events != 3 || b.Bytes != 3*65 || !b.Oldest.Equal(epoch) {
		t.Fatalf("Bounds after 3 appends = %+v, want floor 1 hwm 3 events 3 bytes 195 oldest %v", b, epoch)
	}
	if _, err := s.Append(ctx, "tok-r", 1, []store.Event{{Stream: 0, Kind: store.KindPriming, End: true, Retry: 1500 * time.Millisecond, Time: epoch}}); err != nil {
		t.Fatal(err)
	}
	// An event that opens a stream gets its own sequence as stream number.
	open := []store.Event{{Stream: store.NewStream, Kind: store.KindPriming, Time: epoch}, {Stream: 0, Kind: store.KindMessage, Data: []byte("x"), Time: epoch}}
	if _, err := s.Append(ctx, "tok-r", 1, open); err != nil {
		t.Fatal(err)
	}
	settle(t, s, "tok-r")
	if open[0].Seq != 5 || open[0].Stream != 5 || open[1].Stream != 0 {
		t.Fatalf("opening event: seq %d stream %d (next event stream %d); want 5, 5 and 0", open[0].Seq, open[0].Stream, open[1].Stream)
	}
	if got, _, _ := s.Read(ctx, "tok-r", 4, 1); len(got) != 1 || got[0].Stream != 5 {
		t.Fatalf("opening event read back as %+v, want stream 5", got)
	}
	got, b, err := s.Read(ctx, "tok-r", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || string(got[0].Data) != "b" || got[0].Seq != 2 || string(got[1].Data) != "c" {
		t.Fatalf("Read(after 1) = %+v", got)
	}
	last := got[2]
	if last.Seq != 4 || last.Stream != 0 || last.Kind != store.KindPriming || !last.End || last.Retry != 1500*time.Millisecond || len(last.Data) != 0 || !last.Time.Equal(epoch) {
		t.Fatalf("priming event read back as %+v", last)
	}
	if b.HWM != 6 {
		t.Fatalf("HWM = %d, want 6", b.HWM)
	}
	got, _, _ = s.Read(ctx, "tok-r", 0, 2)
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 {
		t.Fatalf("Read(after 0, max 2) = %+v", got)
	}
	got, _, _ = s.Read(ctx, "tok-r", 6, 10)
	if len(got) != 0 {
		t.Fatalf("Read(after HWM) = %+v, want none", got)
	}
	if _, err := s.Append(ctx, "nope", 1, msgs("x")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Append(unknown) = %v, want ErrNotFound", err)
	}
}

func testFencing(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "tok-f")
	if _, err := s.Append(ctx, "tok-f", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "tok-f", "p2", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var fe *store.FencedError
	_, err := s.Append(ctx, "tok-f", 1, msgs("late"))
	if !errors.As(err, &fe) || fe.Have != 1 || fe.Want != 2 || fe.Op != "append" {
		t.Fatalf("Append with the old generation = %v, want FencedError have 1 want 2", err)
	}
	if err := s.SaveState(ctx, "tok-f", 1, []byte(`{}`)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("SaveState with the old generation = %v, want ErrFenced", err)
	}
	if err := s.Renew(ctx, "tok-f", "p1", 1, time.Now()); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Renew by the old owner = %v, want ErrFenced", err)
	}
	if err := s.Renew(ctx, "tok-f", "p3", 2, time.Now()); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Renew by a non-owner = %v, want ErrFenced", err)
	}
	if _, err := s.Trim(ctx, "tok-f", 1, 5); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Trim with the old generation = %v, want ErrFenced", err)
	}
	got, b, _ := s.Read(ctx, "tok-f", 0, 10)
	if len(got) != 0 || b.HWM != 1 || b.Floor != 2 || b.Generation != 2 {
		t.Fatalf("after a fenced append: events %+v bounds %+v, want none, HWM 1, floor 2, gen 2", got, b)
	}
	if _, err := s.Append(ctx, "tok-f", 2, msgs("new")); err != nil {
		t.Fatalf("Append with the current generation: %v", err)
	}
}

func testClaim(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "tok-c")
	if _, err := s.Append(ctx, "tok-c", 1, msgs("a", "b")); err != nil {
		t.Fatal(err)
	}
	lease := epoch.Add(time.Minute).UTC()
	rec, err := s.Claim(ctx, "tok-c", "p2", 1, lease)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Generation != 2 || rec.Owner != "p2" || !rec.LeaseUntil.Equal(lease) || string(rec.State) != `{"v":1}` {
		t.Fatalf("Claim = %+v, want gen 2 owner p2 lease %v, state kept", rec, lease)
	}
	// Two claimants of generation 1: exactly one can win.
	var fe *store.FencedError
	if _, err := s.Claim(ctx, "tok-c", "p3", 1, lease); !errors.As(err, &fe) || fe.Want != 2 {
		t.Fatalf("second Claim from gen 1 = %v, want FencedError want 2", err)
	}
	b, _ := s.Bounds(ctx, "tok-c")
	if b.Generation != 2 || b.HWM != 2 || b.Floor != 3 || b.Events != 0 {
		t.Fatalf("Bounds after Claim = %+v, want gen 2, HWM 2, floor 3, no events", b)
	}
	evs := msgs("c")
	if _, err := s.Append(ctx, "tok-c", 2, evs); err != nil {
		t.Fatal(err)
	}
	if evs[0].Seq != 3 || evs[0].Generation != 2 {
		t.Fatalf("first event of gen 2: seq %d gen %d, want 3 and 2 (sequences continue)", evs[0].Seq, evs[0].Generation)
	}
	settle(t, s, "tok-c")
	got, _, _ := s.Read(ctx, "tok-c", 0, 10)
	if len(got) != 1 || got[0].Seq != 3 {
		t.Fatalf("Read after Claim = %+v, want only seq 3", got)
	}
	// Concurrent claims: exactly one winner.
	var wins, fenced int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Claim(ctx, "tok-c", fmt.Sprintf("r%d", i), 2, lease)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, store.ErrFenced):
				fenced++
			default:
				t.Errorf("Claim: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || fenced != 7 {
		t.Fatalf("8 concurrent claims: %d won, %d fenced; want 1 and 7", wins, fenced)
	}
}

func testTrim(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "tok-t")
	if _, err := s.Append(ctx, "tok-t", 1, msgs("a", "b", "c", "d", "e")); err != nil {
		t.Fatal(err)
	}
	settle(t, s, "tok-t")
	b, err := s.Trim(ctx, "tok-t", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if b.Floor != 3 || b.HWM != 5 || b.Events != 3 || b.Bytes != 3*65 || !b.Oldest.Equal(epoch.Add(2*time.Second)) {
		t.Fatalf("Trim to 3 = %+v, want floor 3, 3 events of 195 bytes, oldest %v", b, epoch.Add(2*time.Second))
	}
	got, _, _ := s.Read(ctx, "tok-t", 0, 10)
	if len(got) != 3 || got[0].Seq != 3 || string(got[0].Data) != "c" {
		t.Fatalf("Read after Trim = %+v, want seq 3..5", got)
	}
	if b, _ := s.Trim(ctx, "tok-t", 1, 2); b.Floor != 3 {
		t.Fatalf("Trim below the floor lowered it to %d", b.Floor)
	}
	if b, _ := s.Trim(ctx, "tok-t", 1, 100); b.Floor != 6 || b.Events != 0 || b.Bytes != 0 {
		t.Fatalf("Trim above HWM = %+v, want floor HWM+1 = 6 and nothing retained", b)
	}
}

func testWait(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "tok-w")
	if _, err := s.Append(ctx, "tok-w", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	// Already above: returns at once.
	if err := s.Wait(ctx, "tok-w", 0); err != nil {
		t.Fatalf("Wait(after 0) with HWM 1 = %v", err)
	}
	// Times out when nothing happens.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.Wait(short, "tok-w", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with nothing new = %v, want DeadlineExceeded", err)
	}
	wake := func(name string, act func()) {
		t.Helper()
		done := make(chan error, 1)
		b, _ := s.Bounds(ctx, "tok-w")
		go func() { done <- s.Wait(ctx, "tok-w", b.HWM) }()
		time.Sleep(20 * time.Millisecond)
		act()
		select {
		case err := <-done:
			if name == "end" {
				if !errors.Is(err, store.ErrEnded) {
					t.Fatalf("Wait woken by End = %v, want ErrEnded", err)
				}
			} else if err != nil {
				t.Fatalf("Wait woken by %s = %v", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Wait was not woken by %s", name)
		}
	}
	wake("append", func() { s.Append(ctx, "tok-w", 1, msgs("b")) })
	wake("claim", func() { s.Claim(ctx, "tok-w", "p2", 1, time.Time{}) })
	wake("end", func() { s.End(ctx, "tok-w", store.EndDeleted, time.Now().Add(time.Hour)) })
}

func testConcurrentAppends(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "tok-x")
	const writers, per = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				evs := msgs(fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("w%d-%d'", w, i))
				if _, err := s.Append(ctx, "tok-x", 1, evs); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				if evs[1].Seq != evs[0].Seq+1 {
					t.Errorf("one Append got seqs %d and %d, want contiguous", evs[0].Seq, evs[1].Seq)
				}
			}
		}()
	}
	wg.Wait()
	settle(t, s, "tok-x")
	got, b, err := s.Read(ctx, "tok-x", 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*per*2 || b.HWM != writers*per*2 {
		t.Fatalf("read %d events, HWM %d; want %d", len(got), b.HWM, writers*per*2)
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: gap or disorder", i, e.Seq)
		}
	}
}

// testSync: events appended are visible, in order and without a gap, once
// Sync returns, and Append's bounds count them already; Sync of an unknown
// or ended session fails as Read does.
func testSync(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "tok-s")
	var bytes int64
	for i := range 100 {
		data := fmt.Sprintf("e%d", i)
		bytes += 64 + int64(len(data))
		b, err := s.Append(ctx, "tok-s", 1, msgs(data))
		if err != nil {
			t.Fatal(err)
		}
		if b.HWM != uint64(i+1) || b.Floor != 1 || b.Events != i+1 || b.Bytes != bytes || !b.Oldest.Equal(epoch) {
			t.Fatalf("Append %d returned %+v, want HWM %d, floor 1, %d events of %d bytes, oldest %v", i, b, i+1, i+1, bytes, epoch)
		}
	}
	settle(t, s, "tok-s")
	got, b, err := s.Read(ctx, "tok-s", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 || b.HWM != 100 || b.Events != 100 || b.Bytes != bytes {
		t.Fatalf("after Sync: %d events, bounds %+v; want 100 events, HWM 100, %d bytes", len(got), b, bytes)
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) || string(e.Data) != fmt.Sprintf("e%d", i) {
			t.Fatalf("event %d read back as seq %d %q", i, e.Seq, e.Data)
		}
	}
	if err := s.Sync(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Sync(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.End(ctx, "tok-s", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "tok-s"); !errors.Is(err, store.ErrEnded) {
		t.Fatalf("Sync after End = %v, want ErrEnded", err)
	}
}

// wantOpenings checks that token's record keeps want, written STREAM DATA
// for each opening, in order.
func wantOpenings(t *testing.T, s store.Store, token, when string, want ...string) {
	t.Helper()
	rec, err := s.Get(context.Background(), token)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(rec.Openings))
	for i, o := range rec.Openings {
		got[i] = fmt.Sprintf("%d %s", o.Stream, o.Data)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: Openings %q, want %q", when, got, want)
	}
}

// testOpenings: a Trim that removes the opening event of a stream whose
// end is not stored keeps the event's Data in the record
// (store.Record.Openings); the Trim that removes the stream's end has
// dropped it (a store may drop it at any trim once the end is stored);
// other writes keep them, and Claim empties them.
func testOpenings(t *testing.T, s store.Store) {
	ctx := context.Background()
	rec := create(t, s, "tok-o")
	rec.Token, rec.Openings = "tok-o2", store.Openings{{Stream: 9, Data: []byte("[9]")}}
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	wantOpenings(t, s, "tok-o2", "Create given openings")

	open := func(ids string) store.Event {
		return store.Event{Stream: store.NewStream, Kind: store.KindPriming, Data: []byte(ids), Time: epoch}
	}
	msg := func(stream uint64, end bool) store.Event {
		return store.Event{Stream: stream, Kind: store.KindMessage, End: end, Data: []byte(`{"jsonrpc":"2.0"}`), Time: epoch}
	}
	appendAll := func(gen uint64, evs ...store.Event) {
		t.Helper()
		for _, e := range evs {
			if _, err := s.Append(ctx, "tok-o", gen, []store.Event{e}); err != nil {
				t.Fatal(err)
			}
		}
		settle(t, s, "tok-o")
	}
	trim := func(gen, floor uint64) {
		t.Helper()
		if _, err := s.Trim(ctx, "tok-o", gen, floor); err != nil {
			t.Fatalf("Trim(%d): %v", floor, err)
		}
	}
	// Seq 1 opens stream 1 (request 7), seq 2 stream 2 (request "b"),
	// seq 3 is the standalone stream's priming event.
	appendAll(1, open(`[7]`), open(`["b"]`), store.Event{Stream: 0, Kind: store.KindPriming, Time: epoch}, msg(1, false))
	wantOpenings(t, s, "tok-o", "before any Trim")
	trim(1, 2)
	wantOpenings(t, s, "tok-o", "Trim(2)", "1 [7]")
	if _, err := s.Trim(ctx, "tok-o", 2, 5); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Trim with a stale generation = %v, want ErrFenced", err)
	}
	trim(1, 4)
	wantOpenings(t, s, "tok-o", "Trim(4)", `1 [7]`, `2 ["b"]`)
	if err := s.SaveState(ctx, "tok-o", 1, []byte(`{"v":3}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch(ctx, "tok-o", epoch.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, "tok-o", "p1", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	wantOpenings(t, s, "tok-o", "SaveState, Touch, Renew", `1 [7]`, `2 ["b"]`)
	// Stream 2 ends at 5; the trim that removes its end has dropped it.
	appendAll(1, msg(2, true), msg(1, false))
	trim(1, 6)
	wantOpenings(t, s, "tok-o", "Trim(6): stream 2's end", "1 [7]")
	if err := s.Hibernate(ctx, "tok-o", "p1", 1, []byte(`{"v":4}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wake(ctx, "tok-o", "p2", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	wantOpenings(t, s, "tok-o", "Hibernate, Wake", "1 [7]")
	claimed, err := s.Claim(ctx, "tok-o", "p3", 1, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed.Openings) != 0 {
		t.Fatalf("Claim returned Openings %v, want none", claimed.Openings)
	}
	wantOpenings(t, s, "tok-o", "Claim")

	// The next generation: an opening kept by one Trim, dropped by the
	// Trim that removes its end.
	appendAll(2, open(`[1,2]`), msg(0, false), msg(0, false))
	b, err := s.Bounds(ctx, "tok-o")
	if err != nil {
		t.Fatal(err)
	}
	first := b.Floor
	trim(2, first+1)
	wantOpenings(t, s, "tok-o", "Trim past the new generation's opening", fmt.Sprintf("%d [1,2]", first))
	appendAll(2, msg(first, true))
	trim(2, first+4)
	wantOpenings(t, s, "tok-o", "Trim past its end")

	// Past the bounds: a stream whose ids are over store.MaxOpeningBytes,
	// then store.MaxOpenings+1 streams, the oldest of whose ids go. The
	// mark (an opening with no data: Openings.Dropped) rises to each
	// stream not kept, and stays when that stream's end goes.
	if b, err = s.Bounds(ctx, "tok-o"); err != nil {
		t.Fatal(err)
	}
	long := b.HWM + 1
	evs := []store.Event{open(`["` + strings.Repeat("x", store.MaxOpeningBytes) + `"]`)}
	for i := range store.MaxOpenings + 1 {
		evs = append(evs, open(fmt.Sprintf("[%d]", i)))
	}
	appendAll(2, append(evs, msg(0, false))...)
	trim(2, long+uint64(len(evs)))
	want := []string{fmt.Sprintf("%d ", long+1)}
	for i := 1; i <= store.MaxOpenings; i++ {
		want = append(want, fmt.Sprintf("%d [%d]", long+1+uint64(i), i))
	}
	wantOpenings(t, s, "tok-o", "Trim past the bounds", want...)
	appendAll(2, msg(long, true), msg(long+1, true), msg(0, false))
	trim(2, long+uint64(len(evs))+3)
	wantOpenings(t, s, "tok-o", "Trim past the ends of the streams not kept", want...)
	if _, err := s.Claim(ctx, "tok-o", "p4", 2, time.Time{}); err != nil {
		t.Fatal(err)
	}
	wantOpenings(t, s, "tok-o", "Claim after the bounds")
}
