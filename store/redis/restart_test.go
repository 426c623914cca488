package redis_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// recover polls Get until Redis answers again, failing after 15 s.
func recoverStore(t *testing.T, s store.Store, token string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := s.Get(context.Background(), token)
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Get while Redis comes back = %v, want nil or ErrUnavailable", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not recover within 15s of the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// view is everything a client can observe of a session.
type view struct {
	rec    store.Record
	bounds store.Bounds
	events []store.Event
}

func look(t *testing.T, s store.Store, token string) view {
	t.Helper()
	ctx := context.Background()
	rec, err := s.Get(ctx, token)
	if err != nil {
		t.Fatalf("Get(%s): %v", token, err)
	}
	evs, b, err := s.Read(ctx, token, 0, 1000)
	if err != nil {
		t.Fatalf("Read(%s): %v", token, err)
	}
	return view{rec, b, evs}
}

// TestRestartKeepsSessions: with appendonly yes and appendfsync always,
// redis-server killed with SIGKILL and started again keeps every record,
// floor, HWM, byte count, event and tombstone; the sessions continue at
// HWM+1, fencing still holds, and Wait works again.
func TestRestartKeepsSessions(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	ctx := context.Background()
	s := open(t, srv, redis.Options{Timeout: time.Second})

	// a: events, some trimmed.
	create(t, s, "a")
	if _, err := s.Append(ctx, "a", 1, msgs("a1", "a2", "a3", "a4", "a5")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Trim(ctx, "a", 1, 3); err != nil {
		t.Fatal(err)
	}
	// b: claimed into generation 2, with events of both generations.
	create(t, s, "b")
	if _, err := s.Append(ctx, "b", 1, msgs("b1", "b2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "b", "p2", 1, epoch.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "b", 2, []store.Event{{Stream: store.NewStream, Kind: store.KindPriming, Retry: time.Second, Time: epoch}, {Stream: 0, Kind: store.KindClose, End: true, Time: epoch}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveState(ctx, "b", 2, []byte(`{"proto":"2025-11-25"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch(ctx, "b", epoch.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// c: evicted as idle; d: ended by DELETE. The tombstones keep the
	// two apart (a 404 says which).
	create(t, s, "c")
	if err := s.End(ctx, "c", store.EndIdle, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	create(t, s, "d")
	if err := s.End(ctx, "d", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	before := map[string]view{"a": look(t, s, "a"), "b": look(t, s, "b")}
	if before["a"].bounds.Floor != 3 || before["a"].bounds.HWM != 5 || before["b"].bounds.Floor != 3 || before["b"].bounds.HWM != 4 {
		t.Fatalf("setup: bounds a %+v b %+v", before["a"].bounds, before["b"].bounds)
	}

	srv.Restart() // SIGKILL, then start on the same port and AOF
	recoverStore(t, s, "a")

	for _, tok := range []string{"a", "b"} {
		if got := look(t, s, tok); !reflect.DeepEqual(got, before[tok]) {
			t.Fatalf("session %s after restart:\n got %+v\nwant %+v", tok, got, before[tok])
		}
	}
	var ended *store.EndedError
	if _, err := s.Get(ctx, "c"); !errors.As(err, &ended) || ended.Reason != store.EndIdle {
		t.Fatalf("ended session after restart: %v, want EndedError(idle)", err)
	}
	if _, err := s.Get(ctx, "d"); !errors.As(err, &ended) || ended.Reason != store.EndDeleted {
		t.Fatalf("deleted session after restart: %v, want EndedError(deleted)", err)
	}
	// Sequences continue: no gap, no reuse.
	evs := msgs("a6")
	if _, err := s.Append(ctx, "a", 1, evs); err != nil || evs[0].Seq != 6 {
		t.Fatalf("append after restart: seq %d, %v; want 6", evs[0].Seq, err)
	}
	if _, err := s.Append(ctx, "b", 1, msgs("zombie")); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append of gen 1 to b after restart = %v, want ErrFenced", err)
	}
	// A Store opened after the restart (a replica starting) sees the same.
	s2 := open(t, srv, redis.Options{})
	if got := look(t, s2, "b"); !reflect.DeepEqual(got, before["b"]) {
		t.Fatalf("session b through a new store:\n got %+v\nwant %+v", got, before["b"])
	}
	done := waitAsync(ctx, s, "b", 4)
	time.Sleep(50 * time.Millisecond)
	if _, err := s2.Append(ctx, "b", 2, msgs("b5")); err != nil {
		t.Fatal(err)
	}
	mustWake(t, "an append after the restart", done, nil)
}

// TestAppendAcrossKill: a writer appends without pause, and syncs every
// ten appends, while redis-server is killed (SIGKILL) and restarted.
// Every event acknowledged (accepted, then a Sync returned nil) is in the
// log afterwards at the sequence Append gave it, sequences are 1..HWM with
// no gap, and no event is stored twice; the writer stops with an error
// wrapping ErrUnavailable (the generation lost, when Redis died with
// events accepted; or an append or Sync refused at once, once the store
// has seen Redis down) and the events accepted since the last good Sync
// may or may not be there (a reply was lost), but only once and at their
// own sequences.
func TestAppendAcrossKill(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	ctx := context.Background()
	s := open(t, srv, redis.Options{Timeout: time.Second})
	create(t, s, "tok")

	acked := map[string]uint64{}  // data → seq, stored for sure
	failed := map[string]uint64{} // data → seq, accepted, fate unknown
	var lostErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		var unsure []string
		seqs := map[string]uint64{}
		for i := 0; ; i++ {
			d := fmt.Sprintf("e%d", i)
			evs := msgs(d)
			_, err := s.Append(ctx, "tok", 1, evs)
			if err == nil {
				unsure = append(unsure, d)
				seqs[d] = evs[0].Seq
				if i%10 != 9 {
					continue
				}
				err = s.Sync(ctx, "tok")
			}
			for _, u := range unsure {
				if err == nil {
					acked[u] = seqs[u]
				} else {
					failed[u] = seqs[u]
				}
			}
			unsure = nil
			if err != nil {
				lostErr = err
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	srv.Kill()
	<-done
	srv.Restart()
	recoverStore(t, s, "tok")
	if !errors.Is(lostErr, store.ErrUnavailable) {
		t.Fatalf("the appends ended with %v, want an error wrapping ErrUnavailable", lostErr)
	}
	if t.Failed() {
		return
	}

	evs, b, err := s.Read(ctx, "tok", 0, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) == 0 || len(acked) == 0 {
		t.Fatalf("%d appends acknowledged, %d failed: the kill did not land while appending", len(acked), len(failed))
	}
	seen := map[string]bool{}
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: gap", i, e.Seq)
		}
		d := string(e.Data)
		if seen[d] {
			t.Fatalf("event %s stored twice", d)
		}
		seen[d] = true
		seq, ok := acked[d]
		if !ok {
			seq, ok = failed[d]
		}
		if !ok {
			t.Fatalf("event %s stored but never appended", d)
		}
		if seq != e.Seq {
			t.Fatalf("event %s appended as seq %d, stored at %d", d, seq, e.Seq)
		}
	}
	for d, seq := range acked {
		if !seen[d] {
			t.Fatalf("acknowledged event %s (seq %d) lost in the restart", d, seq)
		}
	}
	if b.HWM != uint64(len(evs)) {
		t.Fatalf("HWM %d with %d events", b.HWM, len(evs))
	}
	t.Logf("%d appends acknowledged, %d failed while Redis was down, HWM %d", len(acked), len(failed), b.HWM)
}

// TestRedisDown: with redis-server killed, every call fails promptly with
// ErrUnavailable (a blocked Wait too), New refuses to start, and the same
// Store works again once Redis is back.
func TestRedisDown(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	ctx := context.Background()
	s := open(t, srv, redis.Options{Timeout: time.Second})
	create(t, s, "tok")
	if _, err := s.Append(ctx, "tok", 1, msgs("a", "b")); err != nil {
		t.Fatal(err)
	}
	create(t, s, "two")
	if _, err := s.Append(ctx, "two", 1, msgs("t1", "t2")); err != nil {
		t.Fatal(err)
	}
	waiting := waitAsync(ctx, s, "tok", 2)
	time.Sleep(50 * time.Millisecond)

	srv.Kill()
	mustWake(t, "Redis dying", waiting, store.ErrUnavailable)
	// A pipelined append is accepted, then lost: never stored, and its
	// generation takes no more appends.
	lost := msgs("c")
	if _, err := s.Append(ctx, "tok", 1, lost); err != nil || lost[0].Seq != 3 {
		t.Fatalf("Append with Redis down: seq %d, %v; want accepted as 3", lost[0].Seq, err)
	}
	var le *store.LostError
	if err := s.Sync(ctx, "tok"); !errors.As(err, &le) || le.Seq != 3 || le.Generation != 1 || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Sync with Redis down = %v, want a LostError from 3 wrapping ErrUnavailable", err)
	}
	if _, err := s.Append(ctx, "tok", 1, msgs("d")); !errors.Is(err, store.ErrLost) {
		t.Fatalf("Append to the lost generation = %v, want ErrLost", err)
	}
	// Once a round trip failed, the store stores an append before it
	// answers: another session's append fails at once and loses nothing.
	if _, err := s.Append(ctx, "two", 1, msgs("t3")); !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrLost) {
		t.Fatalf("Append to another session once Redis is known down = %v, want ErrUnavailable, not a loss", err)
	}
	calls := map[string]func() error{
		"Create": func() error { return s.Create(ctx, store.Record{Token: "new", Generation: 1}) },
		"Get":    func() error { _, err := s.Get(ctx, "tok"); return err },
		"Claim":  func() error { _, err := s.Claim(ctx, "tok", "p2", 1, time.Time{}); return err },
		"Renew":  func() error { return s.Renew(ctx, "tok", "p1", 1, time.Time{}) },
		"Touch":  func() error { return s.Touch(ctx, "tok", time.Now()) },
		"End":    func() error { return s.End(ctx, "tok", store.EndDeleted, time.Now().Add(time.Hour)) },
		"Read":   func() error { _, _, err := s.Read(ctx, "tok", 0, 10); return err },
		"Trim":   func() error { _, err := s.Trim(ctx, "tok", 1, 2); return err },
		"Bounds": func() error { _, err := s.Bounds(ctx, "tok"); return err },
		"Wait":   func() error { return s.Wait(ctx, "tok", 2) },
	}
	for name, call := range calls {
		start := time.Now()
		if err := call(); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("%s with Redis down = %v, want ErrUnavailable", name, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("%s with Redis down took %v, want under 3s (Timeout 1s)", name, d)
		}
	}
	if _, err := redis.New(ctx, redis.Options{URL: srv.URL(), Timeout: time.Second}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("New with Redis down = %v, want ErrUnavailable", err)
	}

	srv.Restart()
	recoverStore(t, s, "tok")
	if _, err := s.Claim(ctx, "tok", "p1", 1, time.Time{}); err != nil {
		t.Fatalf("Claim of the lost generation after Redis returned: %v", err)
	}
	evs := msgs("c")
	if _, err := s.Append(ctx, "tok", 2, evs); err != nil || evs[0].Seq != 3 {
		t.Fatalf("Append to generation 2 after Redis returned: seq %d, %v; want 3 (the lost event was never stored)", evs[0].Seq, err)
	}
	two := msgs("t3")
	if _, err := s.Append(ctx, "two", 1, two); err != nil || two[0].Seq != 3 {
		t.Fatalf("Append to the other session after Redis returned: seq %d, %v; want 3 in generation 1 (the refused append took nothing)", two[0].Seq, err)
	}
	if err := s.Wait(ctx, "tok", 2); err != nil {
		t.Fatalf("Wait after Redis returned = %v", err)
	}
}
