package session_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// replyLost is a store whose Hibernate, while lose is set, stores the
// hibernation and then reports store.ErrUnavailable, as a Redis store
// does when the connection dies after Redis ran the script and before
// its reply arrived. Nothing real produces that moment on demand.
type replyLost struct {
	store.Store
	lose atomic.Bool
}

func (s *replyLost) Hibernate(ctx context.Context, token, owner string, gen uint64, state []byte) error {
	err := s.Store.Hibernate(ctx, token, owner, gen, state)
	if s.lose.Load() {
		return fmt.Errorf("redis store: hibernate session %s: %w: connection reset", store.Prefix(token), store.ErrUnavailable)
	}
	return err
}

// TestHibernateReplyLostKeepsGeneration: a hibernation the store reports
// as failed although it stored it leaves the session awake at generation
// 1, with its record let go (no owner); the next request takes the record
// back at generation 1 (the same live session serves it, and the record's
// owner is this registry again) rather than claim generation 2, and a
// sweep after the backoff (HibernateAfter, one minute) hibernates it.
func TestHibernateReplyLostKeepsGeneration(t *testing.T) {
	ctx := context.Background()
	clk := testenv.NewClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	st := &replyLost{Store: memory.New(memory.Options{Now: clk.Now})}
	eng := gosdk.New(demo.NewServer())
	eng.Restorable = true
	logs := &testenv.LogBuffer{}
	reg := session.New(st, eventlog.New(st, eventlog.Options{Now: clk.Now}), eng, session.Options{
		HibernateAfter: time.Minute, IdleTTL: -1, Owner: "p1", Now: clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	defer reg.Close()
	f := &fixture{clk: clk}
	l, err := reg.Create(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	initialize(t, f, l)
	st.lose.Store(true)
	waitFor(t, func() bool {
		clk.Advance(2 * time.Minute)
		reg.Sweep(ctx)
		return strings.Contains(logs.String(), "hibernation failed")
	})
	wantLog(t, logs, `msg="hibernation failed; the session stays awake at its generation.*reason=unavailable`)
	if reg.Len() != 1 || reg.Hibernated() != 0 {
		t.Fatalf("after the failed hibernation: %d live, %d hibernated; want 1 and 0", reg.Len(), reg.Hibernated())
	}
	if rec, err := st.Store.Get(ctx, l.Token()); err != nil || rec.Generation != 1 || rec.Owner != "" {
		t.Fatalf("record after the lost reply = %+v, %v; want generation 1, no owner", rec, err)
	}
	st.lose.Store(false)

	got, err := reg.Get(ctx, l.Token(), "alice")
	if err != nil || got != l || got.Generation() != 1 {
		t.Fatalf("Get after the lost reply = generation %d (same live: %v), %v; want the same live session at generation 1", got.Generation(), got == l, err)
	}
	if rec, err := st.Store.Get(ctx, l.Token()); err != nil || rec.Generation != 1 || rec.Owner != "p1" {
		t.Fatalf("record after the request = %+v, %v; want generation 1, owner p1", rec, err)
	}
	if out := roundTrip(t, f, got, echo(t, 2, "awake")); len(out) != 1 || !strings.Contains(out[0], "awake") {
		t.Fatalf("call after the lost reply answered %v", out)
	}
	if strings.Contains(logs.String(), "generation ends") || strings.Contains(logs.String(), "re-created") {
		t.Fatalf("a generation ended; log:\n%s", logs)
	}
	waitFor(t, func() bool {
		clk.Advance(2 * time.Minute)
		reg.Sweep(ctx)
		return reg.Hibernated() == 1
	})
	woken, err := reg.Get(ctx, l.Token(), "alice")
	if err != nil || woken.Generation() != 1 {
		t.Fatalf("wake after the later hibernation = %v; want generation 1", err)
	}
}

// refused is a store whose Hibernate, while refuse is set, stores nothing
// and reports store.ErrUnavailable, as during a Redis outage, or, for the
// tokens in fenced, a *store.FencedError, as when another process claimed
// the session. fenced is filled before refuse is set.
type refused struct {
	store.Store
	refuse atomic.Bool
	fenced map[string]bool
}

func (s *refused) Hibernate(ctx context.Context, token, owner string, gen uint64, state []byte) error {
	if s.refuse.Load() {
		if s.fenced[token] {
			return &store.FencedError{Token: token, Op: "hibernate", Have: gen, Want: gen + 1}
		}
		return fmt.Errorf("redis store: hibernate session %s: %w: connection refused", store.Prefix(token), store.ErrUnavailable)
	}
	return s.Store.Hibernate(ctx, token, owner, gen, state)
}

// TestRefusedLossyHibernationKeepsEvents: a session that would wake at
// generation+1 (its engine does not restore state) lets go of its events
// only once the store kept its hibernation; one the store refuses stays
// awake with its log as it was, floor and events alike, so every cursor
// its client holds still replays (regression: the log was trimmed to
// HWM+1 before the refused write, and the awake session's old cursors
// answered 409 cursor_compacted).
func TestRefusedLossyHibernationKeepsEvents(t *testing.T) {
	ctx := context.Background()
	clk := testenv.NewClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	st := &refused{Store: memory.New(memory.Options{Now: clk.Now})}
	logs := &testenv.LogBuffer{}
	reg := session.New(st, eventlog.New(st, eventlog.Options{Now: clk.Now}), gosdk.New(demo.NewServer()), session.Options{
		HibernateAfter: time.Minute, IdleTTL: -1, Owner: "p1", Now: clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	defer reg.Close()
	f := &fixture{clk: clk}
	l, err := reg.Create(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	initialize(t, f, l)
	roundTrip(t, f, l, echo(t, 2, "kept"))
	before, err := st.Bounds(ctx, l.Token())
	if err != nil || before.Events == 0 || before.Floor != 1 {
		t.Fatalf("bounds before the sweep = %+v, %v; want events from floor 1", before, err)
	}
	st.refuse.Store(true)
	waitFor(t, func() bool {
		clk.Advance(2 * time.Minute)
		reg.Sweep(ctx)
		return strings.Contains(logs.String(), "hibernation failed")
	})
	after, err := st.Bounds(ctx, l.Token())
	if err != nil || after.Floor != before.Floor || after.HWM != before.HWM || after.Events != before.Events || after.Generation != 1 {
		t.Fatalf("bounds after the refused hibernation = %+v, %v; want %+v", after, err, before)
	}
	if reg.Len() != 1 || reg.Hibernated() != 0 {
		t.Fatalf("after the refused hibernation: %d live, %d hibernated; want 1 and 0", reg.Len(), reg.Hibernated())
	}
}

// TestRoomRefusedHibernationKeepsSession: with room for one session, a
// second session needs the first's room, and the store refuses the
// first's hibernation while unavailable. The second is refused with the
// store's error (503 unavailable at the transport) and the first stays
// awake at generation 1, serving its client as before (regression: making
// room ended the first's generation, and its next request re-created it at
// generation 2). Once the store answers, the second gets the room and the
// first hibernates and wakes at generation 1.
func TestRoomRefusedHibernationKeepsSession(t *testing.T) {
	ctx := context.Background()
	clk := testenv.NewClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	st := &refused{Store: memory.New(memory.Options{Now: clk.Now})}
	eng := gosdk.New(demo.NewServer())
	eng.Restorable = true
	logs := &testenv.LogBuffer{}
	reg := session.New(st, eventlog.New(st, eventlog.Options{Now: clk.Now}), eng, session.Options{
		HibernateAfter: time.Hour, MaxSessions: 1, IdleTTL: -1, Owner: "p1", Now: clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	defer reg.Close()
	f := &fixture{clk: clk}
	a, err := reg.Create(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	initialize(t, f, a)
	roundTrip(t, f, a, echo(t, 2, "before"))
	waitFor(t, func() bool { return session.Idle(a) })

	st.refuse.Store(true)
	if _, err := reg.Create(ctx, "bob"); !errors.Is(err, store.ErrUnavailable) || errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("Create while the store refuses the room's hibernation = %v; want store.ErrUnavailable", err)
	}
	if reg.Len() != 1 || reg.Hibernated() != 0 {
		t.Fatalf("after the refused room: %d live, %d hibernated; want 1 and 0", reg.Len(), reg.Hibernated())
	}
	got, err := reg.Get(ctx, a.Token(), "alice")
	if err != nil || got != a || got.Generation() != 1 {
		t.Fatalf("Get of the first session after the refused room = %v; want the same live session at generation 1", err)
	}
	if out := roundTrip(t, f, got, echo(t, 3, "after")); len(out) != 1 || !strings.Contains(out[0], "after") {
		t.Fatalf("call after the refused room answered %v", out)
	}
	if strings.Contains(logs.String(), "generation ends") || strings.Contains(logs.String(), "session ended") {
		t.Fatalf("the first session's generation ended; log:\n%s", logs)
	}
	wantLog(t, logs, `msg="hibernation failed; the session stays awake at its generation.*reason=unavailable`)

	st.refuse.Store(false)
	waitFor(t, func() bool { return session.Idle(a) })
	b, err := reg.Create(ctx, "bob")
	if err != nil {
		t.Fatalf("Create once the store answers: %v", err)
	}
	if b.Token() == a.Token() || reg.Hibernated() != 1 {
		t.Fatalf("after the room was made: %d hibernated; want the first session hibernated", reg.Hibernated())
	}
}

// refusingRegistry returns a registry on a refused memory store, with an
// engine that restores state exactly, hibernating after a minute of the
// returned clock, and the buffer its log lines, DEBUG included, go to.
// The test's cleanup closes the registry.
func refusingRegistry(t *testing.T) (*testenv.Clock, *refused, *session.Registry, *testenv.LogBuffer) {
	t.Helper()
	clk := testenv.NewClock(time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC))
	st := &refused{Store: memory.New(memory.Options{Now: clk.Now}), fenced: map[string]bool{}}
	eng := gosdk.New(demo.NewServer())
	eng.Restorable = true
	logs := &testenv.LogBuffer{}
	reg := session.New(st, eventlog.New(st, eventlog.Options{Now: clk.Now}), eng, session.Options{
		HibernateAfter: time.Minute, IdleTTL: -1, Owner: "p1", Now: clk.Now,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	t.Cleanup(func() { reg.Close() })
	return clk, st, reg, logs
}

// TestHibernateFailuresLogOncePerInterval: 300 idle sessions (more than
// one batch of the sweep) whose hibernation the store refuses, every
// other one unavailable (the session stays awake) and the rest fenced
// (its generation ends), give one WARN line per kind of failure per
// second, each naming its session and generation, and the other 149 of
// each kind at DEBUG. The next sweep after the backoff, with the 150
// sessions kept awake refused again, gives one more WARN line, saying
// that 149 were held back (regression: one WARN line per session per
// sweep, 450 here).
func TestHibernateFailuresLogOncePerInterval(t *testing.T) {
	ctx := context.Background()
	clk, st, reg, logs := refusingRegistry(t)
	f := &fixture{clk: clk}
	lives := make([]*session.Live, 0, 300)
	for i := range 300 {
		l, err := reg.Create(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		initialize(t, f, l)
		if i%2 == 1 {
			st.fenced[l.Token()] = true
		}
		lives = append(lives, l)
	}
	for _, l := range lives {
		waitFor(t, func() bool { return session.Idle(l) })
	}
	const (
		awake = `msg="hibernation failed; the session stays awake at its generation`
		ended = `msg="hibernation failed: this generation ends here`
	)
	// count returns the lines of msg at level, and how many of them there are.
	count := func(level, msg string) ([]string, int) {
		var out []string
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "level="+level+" "+msg) {
				out = append(out, line)
			}
		}
		return out, len(out)
	}
	passed := regexp.MustCompile(` session=\S+ generation=1 reason=(unavailable|fenced) `)
	st.refuse.Store(true)
	clk.Advance(2 * time.Minute)
	reg.Sweep(ctx)

	warnAwake, nAwake := count("WARN", awake)
	warnEnded, nEnded := count("WARN", ended)
	_, dAwake := count("DEBUG", awake)
	_, dEnded := count("DEBUG", ended)
	if nAwake != 1 || nEnded != 1 || dAwake != 149 || dEnded != 149 {
		t.Fatalf("after the first refused sweep: WARN %d kept awake and %d ended, DEBUG %d and %d; want 1, 1, 149, 149",
			nAwake, nEnded, dAwake, dEnded)
	}
	for _, line := range append(warnAwake, warnEnded...) {
		if !passed.MatchString(line) || strings.Contains(line, "suppressed=") {
			t.Fatalf("WARN line %q: want its session and generation 1, and nothing held back yet", line)
		}
	}
	if reg.Len() != 150 {
		t.Fatalf("after the first refused sweep: %d live, want the 150 kept awake", reg.Len())
	}

	clk.Advance(session.HibernateRetry(1, time.Minute) + time.Second)
	reg.Sweep(ctx)
	warnAwake, nAwake = count("WARN", awake)
	_, nEnded = count("WARN", ended)
	_, dAwake = count("DEBUG", awake)
	if nAwake != 2 || nEnded != 1 || dAwake != 149+149 {
		t.Fatalf("after the second refused sweep: WARN %d kept awake and %d ended, DEBUG %d kept awake; want 2, 1, 298",
			nAwake, nEnded, dAwake)
	}
	if last := warnAwake[1]; !passed.MatchString(last) || !strings.HasSuffix(last, " suppressed=149") {
		t.Fatalf("second WARN line %q: want its session, generation 1 and suppressed=149", last)
	}
}

// TestLetGoFailuresLogOncePerInterval: 20 hibernated sessions are asked
// for by another user while the store refuses hibernation: each wake
// lets go of its session again, which the store refuses, and that gives
// one WARN line per second (then DEBUG), not one per wake (regression: 20
// WARN lines).
func TestLetGoFailuresLogOncePerInterval(t *testing.T) {
	ctx := context.Background()
	clk, st, reg, logs := refusingRegistry(t)
	f := &fixture{clk: clk}
	var tokens []string
	for range 20 {
		l, err := reg.Create(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		initialize(t, f, l)
		waitFor(t, func() bool { return session.Idle(l) })
		tokens = append(tokens, l.Token())
	}
	clk.Advance(2 * time.Minute)
	waitFor(t, func() bool { reg.Sweep(ctx); return reg.Hibernated() == 20 })
	st.refuse.Store(true)
	for _, tok := range tokens {
		if l, err := reg.Get(ctx, tok, "mallory"); err == nil {
			t.Fatalf("session %s woken for another user: generation %d", tok, l.Generation())
		}
	}
	const msg = `msg="waking failed, and letting go of the session again failed too`
	var warn, debug int
	for _, line := range strings.Split(logs.String(), "\n") {
		switch {
		case strings.Contains(line, "level=WARN "+msg):
			warn++
		case strings.Contains(line, "level=DEBUG "+msg):
			debug++
		}
	}
	if warn != 1 || debug != 19 {
		t.Fatalf("letting go failed for 20 wakes: %d WARN and %d DEBUG lines, want 1 and 19", warn, debug)
	}
}
