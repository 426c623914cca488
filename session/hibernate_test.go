// hibernate_test.go holds the tests of hibernation (DESIGN.md,
// "Hibernation"): an idle session gives up its live state, and the next
// request wakes it at the same generation or at generation+1.

package session_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// hibernating is a registry on a memory store whose go-sdk engine is
// restorable (exact) or not, with a manual clock, and its log, Debug
// lines included.
func hibernating(t *testing.T, restorable bool, opts session.Options) (*fixture, *testenv.LogBuffer) {
	t.Helper()
	return hibernatingRetained(t, restorable, opts, eventlog.Options{})
}

// hibernatingRetained is hibernating with its log's retention set by
// retention (its clock is the fixture's).
func hibernatingRetained(t *testing.T, restorable bool, opts session.Options, retention eventlog.Options) (*fixture, *testenv.LogBuffer) {
	t.Helper()
	f := &fixture{clk: testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), server: demo.NewServer()}
	f.st = memory.New(memory.Options{Now: f.clk.Now})
	retention.Now = f.clk.Now
	f.log = eventlog.New(f.st, retention)
	logs := &testenv.LogBuffer{}
	opts.Now = f.clk.Now
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	eng := gosdk.New(f.server)
	eng.Restorable = restorable
	f.reg = session.New(f.st, f.log, eng, opts)
	t.Cleanup(func() { f.reg.Close() })
	return f, logs
}

// hibernateIdle lets l, a session of f's registry with HibernateAfter a
// minute, go idle past it, and sweeps until it has hibernated.
func hibernateIdle(t *testing.T, f *fixture, l *session.Live) {
	t.Helper()
	waitFor(t, func() bool { return session.Idle(l) })
	f.clk.Advance(2 * time.Minute)
	waitFor(t, func() bool { f.reg.Sweep(context.Background()); return f.reg.Hibernated() == 1 })
}

// echo is a tools/call of the demo server's echo tool.
func echo(t testing.TB, id int, text string) *jsonrpc.Request {
	return request(t, id, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": text}})
}

// streamAfter reads stream of l after sequence after until its last event.
func streamAfter(t *testing.T, l *session.Live, stream, after uint64) []store.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rd := l.Reader(stream, after)
	var out []store.Event
	for {
		evs, err := rd.Next(ctx)
		if err != nil {
			t.Fatalf("stream %d after %d: read %d events, then: %v", stream, after, len(out), err)
		}
		out = append(out, evs...)
		if len(out) > 0 && out[len(out)-1].End {
			return out
		}
	}
}

// TestHibernateWakesAtSameGeneration: a session idle past HibernateAfter
// under an exact engine leaves the process with its record kept at its
// generation and no owner; the next Get wakes it at the same generation,
// a cursor held from before replays exactly the events after it, and
// calls work without a new initialize.
func TestHibernateWakesAtSameGeneration(t *testing.T) {
	ctx := context.Background()
	f, logs := hibernating(t, true, session.Options{HibernateAfter: time.Minute})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	req := echo(t, 2, "before")
	s, err := l.OpenStream(ctx, []*jsonrpc.Request{req}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Deliver(ctx, req, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	held := streamAfter(t, l, s, 0) // the opening event, then the answer
	if len(held) != 2 || !strings.Contains(string(held[1].Data), "before") {
		t.Fatalf("call stream = %+v, want the opening event and the answer", held)
	}
	cursor := held[0].Seq                              // the client holds the opening event's id
	waitFor(t, func() bool { return session.Idle(l) }) // the answer's call has left it

	f.clk.Advance(59 * time.Second)
	f.reg.Sweep(ctx)
	if f.reg.Len() != 1 || f.reg.Hibernated() != 0 {
		t.Fatalf("after 59 s idle: %d live, %d hibernated; want 1 and 0", f.reg.Len(), f.reg.Hibernated())
	}
	f.clk.Advance(2 * time.Second)
	// The answer's call leaves the session just after the answer is read.
	waitFor(t, func() bool { f.reg.Sweep(ctx); return f.reg.Hibernated() == 1 })
	if f.reg.Len() != 0 || f.reg.Hibernated() != 1 {
		t.Fatalf("after 61 s idle: %d live, %d hibernated; want 0 and 1", f.reg.Len(), f.reg.Hibernated())
	}
	rec, err := f.st.Get(ctx, l.Token())
	if err != nil || rec.Generation != 1 || rec.Owner != "" {
		t.Fatalf("record after hibernation = %+v, %v; want generation 1, no owner", rec, err)
	}
	wantLog(t, logs, `level=INFO msg="session hibernated".*exact=true`)

	woken, err := f.reg.Get(ctx, l.Token(), "")
	if err != nil {
		t.Fatal(err)
	}
	if woken == l || woken.Generation() != 1 {
		t.Fatalf("woken generation %d (same Live: %v), want a new Live at generation 1", woken.Generation(), woken == l)
	}
	if f.reg.Hibernated() != 0 || f.reg.Len() != 1 {
		t.Fatalf("after the wake: %d live, %d hibernated; want 1 and 0", f.reg.Len(), f.reg.Hibernated())
	}
	wantLog(t, logs, `msg="session woke"`)
	got := streamAfter(t, woken, s, cursor)
	if len(got) != 1 || got[0].Seq != held[1].Seq || string(got[0].Data) != string(held[1].Data) {
		t.Fatalf("resumed after %d: %+v, want exactly the answer at %d: %s", cursor, got, held[1].Seq, held[1].Data)
	}
	out := roundTrip(t, f, woken, echo(t, 3, "after"))
	if len(out) != 1 || !strings.Contains(out[0], "after") || !strings.Contains(out[0], `"id":3`) {
		t.Fatalf("call after the wake answered %v", out)
	}
	if st := woken.State(); !st.Initialized || st.ProtocolVersion != "2025-11-25" {
		t.Fatalf("woken state = %+v, want the initialized session", st)
	}
}

// TestHibernateLossyWakesAtNextGeneration: under an engine that cannot
// restore state exactly, the session wakes at generation+1, the old
// generation's events are gone (floor above them), and the log says why.
func TestHibernateLossyWakesAtNextGeneration(t *testing.T) {
	ctx := context.Background()
	f, logs := hibernating(t, false, session.Options{HibernateAfter: time.Minute})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	roundTrip(t, f, l, echo(t, 2, "before"))
	b, _ := f.st.Bounds(ctx, l.Token())
	// The answer's call leaves the session just after the answer is read,
	// and its idle time starts then.
	waitFor(t, func() bool { return session.Idle(l) })
	f.clk.Advance(2 * time.Minute)
	waitFor(t, func() bool { f.reg.Sweep(ctx); return f.reg.Hibernated() == 1 })
	wantLog(t, logs, `level=INFO msg="session hibernated".*exact=false`)
	woken, err := f.reg.Get(ctx, l.Token(), "")
	if err != nil {
		t.Fatal(err)
	}
	if woken.Generation() != 2 {
		t.Fatalf("woken at generation %d, want 2", woken.Generation())
	}
	nb, _ := f.st.Bounds(ctx, l.Token())
	if nb.Generation != 2 || nb.Floor != b.HWM+1 {
		t.Fatalf("bounds after the wake = %+v, want generation 2, floor %d", nb, b.HWM+1)
	}
	wantLog(t, logs, `msg="session re-created".*reason=hibernated`)
	out := roundTrip(t, f, woken, echo(t, 3, "after"))
	if len(out) != 1 || !strings.Contains(out[0], "after") {
		t.Fatalf("call after the wake answered %v", out)
	}
}

// TestHibernateKeepsOnlyReplayableEvents: while a session hibernates, its
// log keeps the events a cursor can still replay and nothing else. Under
// an exact engine the wake keeps the generation, so every event stays,
// counted in the process budget; under a lossy one the wake claims
// generation+1, whose floor is past them all, so they go at the
// hibernation, with their accounting: the bounds are those the claim
// leaves (floor HWM+1, the high-water mark kept), at the old generation.
func TestHibernateKeepsOnlyReplayableEvents(t *testing.T) {
	ctx := context.Background()
	for _, exact := range []bool{true, false} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			f, _ := hibernating(t, exact, session.Options{HibernateAfter: time.Minute})
			l := mustCreate(t, f.reg)
			initialize(t, f, l)
			roundTrip(t, f, l, echo(t, 2, "before"))
			waitFor(t, func() bool { return session.Idle(l) })
			b, _ := f.st.Bounds(ctx, l.Token())
			if b.Events != 4 || f.log.Usage() != b.Bytes {
				t.Fatalf("before the hibernation: bounds %+v, budget usage %d; want 4 events (an initialize and a call answered), usage %d", b, f.log.Usage(), b.Bytes)
			}
			f.clk.Advance(2 * time.Minute)
			waitFor(t, func() bool { f.reg.Sweep(ctx); return f.reg.Hibernated() == 1 })
			got, err := f.st.Bounds(ctx, l.Token())
			if err != nil {
				t.Fatal(err)
			}
			want, usage := b, b.Bytes
			if !exact {
				want, usage = store.Bounds{Generation: 1, Floor: b.HWM + 1, HWM: b.HWM}, 0
			}
			if got != want || f.log.Usage() != usage {
				t.Fatalf("hibernated: bounds %+v, budget usage %d; want %+v, %d", got, f.log.Usage(), want, usage)
			}
			if evs, _, err := f.st.Read(ctx, l.Token(), 0, 100); err != nil || len(evs) != want.Events {
				t.Fatalf("hibernated: read %d events, %v; want %d", len(evs), err, want.Events)
			}
		})
	}
}

// TestHibernateSkipsBusySessions: a session with a call in flight, an
// attached connection or a request being served does not hibernate,
// however long it has been idle by the clock; a session that never
// initialized neither.
func TestHibernateSkipsBusySessions(t *testing.T) {
	ctx := context.Background()
	f, _ := hibernating(t, true, session.Options{HibernateAfter: time.Minute, IdleTTL: -1})
	release := busySessions(t, f)
	f.clk.Advance(time.Hour - time.Second)
	f.reg.Sweep(ctx)
	if f.reg.Hibernated() != 0 || f.reg.Len() != 4 {
		t.Fatalf("%d hibernated, %d live; want 0 and 4", f.reg.Hibernated(), f.reg.Len())
	}
	release()
	// The hold ends on a goroutine of the context's: sweep until it has.
	waitFor(t, func() bool { f.clk.Advance(2 * time.Minute); f.reg.Sweep(ctx); return f.reg.Hibernated() == 2 })
}

// busySessions creates on f's registry the four sessions that neither
// the sweep nor a handover hibernates: one initialized with a connection
// attached, one initialized with a call in flight (opened, never
// delivered), one initialized and held by a request being served (Get
// with a context not yet done), and one never initialized. release
// detaches the first and ends the third's request, after which those two
// may hibernate; the call stays in flight and the last uninitialized.
// Call release once.
func busySessions(t *testing.T, f *fixture) (release func()) {
	t.Helper()
	ctx := context.Background()
	attached := mustCreate(t, f.reg)
	initialize(t, f, attached)
	detach := attached.Attach()
	calling := mustCreate(t, f.reg)
	initialize(t, f, calling)
	if _, err := calling.OpenStream(ctx, []*jsonrpc.Request{echo(t, 9, "x")}, false, 0); err != nil {
		t.Fatal(err) // opened, never delivered: in flight
	}
	held := mustCreate(t, f.reg)
	initialize(t, f, held)
	reqCtx, endRequest := context.WithCancel(ctx)
	if _, err := f.reg.Get(reqCtx, held.Token(), ""); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, f.reg) // no initialize
	return func() {
		detach()
		endRequest()
	}
}

// waitFor calls cond until it holds, for up to 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHibernateRacesRequests: requests and sweeps that hibernate every
// idle session at once run together; every request is answered once,
// with its own answer, at generation 1 (under -race).
func TestHibernateRacesRequests(t *testing.T) {
	ctx := context.Background()
	f, logs := hibernating(t, true, session.Options{HibernateAfter: time.Nanosecond})
	const sessions, calls = 4, 25
	var toks []string
	for range sessions {
		l := mustCreate(t, f.reg)
		initialize(t, f, l)
		toks = append(toks, l.Token())
	}
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			f.clk.Advance(time.Millisecond)
			f.reg.Sweep(ctx)
			runtime.Gosched()
		}
	})
	var wg sync.WaitGroup
	for i, tok := range toks {
		wg.Go(func() {
			for c := range calls {
				time.Sleep(time.Duration(c%3) * time.Millisecond) // idle a moment: sweeps hibernate it
				id := 10 + c
				text := fmt.Sprintf("s%d-c%d", i, c)
				func() {
					reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					l, err := f.reg.Get(reqCtx, tok, "")
					if err != nil {
						t.Errorf("Get: %v", err)
						return
					}
					if l.Generation() != 1 {
						t.Errorf("session %d call %d: generation %d, want 1", i, c, l.Generation())
					}
					out := roundTrip(t, f, l, echo(t, id, text))
					if len(out) != 1 || !strings.Contains(out[0], text) || !strings.Contains(out[0], fmt.Sprintf(`"id":%d`, id)) {
						t.Errorf("session %d call %d answered %v", i, c, out)
					}
				}()
			}
		})
	}
	wg.Wait()
	close(stop)
	sweeps.Wait()
	t.Logf("%d wakes during %d calls", strings.Count(logs.String(), "session woke"), sessions*calls)
	f.reg.Sweep(ctx)
	for _, tok := range toks {
		rec, err := f.st.Get(ctx, tok)
		if err != nil || rec.Generation != 1 {
			t.Fatalf("record %+v, %v; want generation 1", rec, err)
		}
	}
}

// TestHibernatedSessionsEndIdle: a hibernated session not woken within
// the idle TTL ends as idle, and its token answers ended.
func TestHibernatedSessionsEndIdle(t *testing.T) {
	ctx := context.Background()
	f, _ := hibernating(t, true, session.Options{HibernateAfter: time.Minute, IdleTTL: 30 * time.Minute})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	waitFor(t, func() bool { return session.Idle(l) })
	f.clk.Advance(2 * time.Minute)
	waitFor(t, func() bool { f.reg.Sweep(ctx); return f.reg.Hibernated() == 1 })
	f.clk.Advance(29 * time.Minute)
	f.reg.Sweep(ctx)
	if f.reg.Hibernated() != 0 {
		t.Fatalf("%d hibernated after the idle TTL, want 0", f.reg.Hibernated())
	}
	var ended *store.EndedError
	if _, err := f.reg.Get(ctx, l.Token(), ""); !errors.As(err, &ended) || ended.Reason != store.EndIdle {
		t.Fatalf("Get after the idle TTL = %v, want ended idle", err)
	}
}

// TestHibernateFleetWake: in a fleet on one store, a session replica a
// hibernated is woken by replica b at the same generation, and b then
// owns it under a lease; a and b waking it at once, exactly one wakes it
// and the other is told it is held remotely (fleet.ErrRemote).
func TestHibernateFleetWake(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	replica := func(owner string) *session.Registry {
		eng := gosdk.New(demo.NewServer())
		eng.Restorable = true
		reg := session.New(rs.st, eventlog.New(rs.st, eventlog.Options{Now: rs.clk.Now, Budget: -1}), eng,
			session.Options{Owner: owner, Lease: 10 * time.Second, HibernateAfter: time.Minute, Now: rs.clk.Now, Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(func() { reg.Close() })
		return reg
	}
	a, b := replica("a"), replica("b")
	f := &fixture{clk: rs.clk}
	hibernated := func(reg *session.Registry, want int) string {
		l := mustCreate(t, reg)
		initialize(t, f, l)
		// A call's answer settles on a goroutine of its own and starts the
		// session's idle time then: advance while sweeping, renewing the
		// leases the clock lets lapse, as Run does.
		waitFor(t, func() bool {
			rs.clk.Advance(2 * time.Minute)
			a.RenewLeases(ctx)
			b.RenewLeases(ctx)
			reg.Sweep(ctx)
			return reg.Hibernated() == want
		})
		return l.Token()
	}
	tok := hibernated(a, 1)
	l, err := b.Get(ctx, tok, "")
	if err != nil || l.Generation() != 1 {
		t.Fatalf("wake on the other replica: %v; want generation 1", err)
	}
	rec, _ := rs.st.Get(ctx, tok)
	if rec.Owner != "b" || rec.Generation != 1 {
		t.Fatalf("record after b woke it = owner %q generation %d, want b and 1", rec.Owner, rec.Generation)
	}
	if _, err := a.Get(ctx, tok, ""); !errors.Is(err, fleet.ErrRemote) {
		t.Fatalf("a's Get of the session b woke = %v, want fleet.ErrRemote", err)
	}
	out := roundTrip(t, f, l, echo(t, 5, "on b"))
	if len(out) != 1 || !strings.Contains(out[0], "on b") {
		t.Fatalf("call on b answered %v", out)
	}

	// Both replicas wake another hibernated session at once.
	tok = hibernated(b, 2) // the session b woke hibernates too
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, reg := range []*session.Registry{a, b} {
		wg.Go(func() {
			reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l, err := reg.Get(reqCtx, tok, "")
			if err == nil && l.Generation() != 1 {
				err = fmt.Errorf("woken at generation %d, want 1", l.Generation())
			}
			errs[i] = err
		})
	}
	wg.Wait()
	woke, remote := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			woke++
		case errors.Is(err, fleet.ErrRemote):
			remote++
		default:
			t.Errorf("concurrent wake: %v", err)
		}
	}
	if woke != 1 || remote != 1 {
		t.Fatalf("two replicas waking at once: %d woke, %d told remote (%v); want 1 and 1", woke, remote, errs)
	}
}

// TestHibernateResumeNumbersGoOn: the resume parts of a generation's
// priming events (Live.NextResume) go on through exact hibernations, in
// whichever replica wakes the session, so no priming event id is issued
// twice; a lossy hibernation's wake at generation+1 starts again at 1.
func TestHibernateResumeNumbersGoOn(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	f := &fixture{clk: rs.clk}
	replica := func(owner string, restorable bool) *session.Registry {
		eng := gosdk.New(demo.NewServer())
		eng.Restorable = restorable
		reg := session.New(rs.st, eventlog.New(rs.st, eventlog.Options{Now: rs.clk.Now, Budget: -1}), eng,
			session.Options{Owner: owner, Lease: 10 * time.Second, HibernateAfter: time.Minute, Now: rs.clk.Now, Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(func() { reg.Close() })
		return reg
	}
	hibernate := func(regs ...*session.Registry) {
		t.Helper()
		waitFor(t, func() bool {
			rs.clk.Advance(2 * time.Minute)
			for _, reg := range regs {
				reg.RenewLeases(ctx)
				reg.Sweep(ctx)
			}
			return regs[0].Hibernated() == 1
		})
	}
	resumes := func(l *session.Live, want ...uint64) {
		t.Helper()
		for _, w := range want {
			if got, err := l.NextResume(ctx); err != nil || got != w {
				t.Fatalf("generation %d: NextResume = %d, %v; want %d", l.Generation(), got, err, w)
			}
		}
	}
	// A wake's first resume makes the wake durable first: the record's
	// state is stored anew, without the hibernation's mark, so a crash
	// now leaves a record a successor claims at generation+1.
	durable := func(tok string) {
		t.Helper()
		rec, err := rs.st.Get(ctx, tok)
		if err != nil || strings.Contains(string(rec.State), "hibernated") {
			t.Fatalf("record after the woken generation's first resume: %s, %v; want its state saved anew, without hibernatedExact", rec.State, err)
		}
	}

	a, b := replica("a", true), replica("b", true)
	l := mustCreate(t, a)
	initialize(t, f, l)
	tok := l.Token()
	resumes(l, 1, 2)
	hibernate(a, b)
	if l, err := b.Get(ctx, tok, ""); err != nil || l.Generation() != 1 {
		t.Fatalf("b's wake: %v; want generation 1", err)
	} else {
		resumes(l, 3)
		durable(tok)
	}
	hibernate(b, a)
	if l, err := a.Get(ctx, tok, ""); err != nil || l.Generation() != 1 {
		t.Fatalf("a's wake: %v; want generation 1", err)
	} else {
		resumes(l, 4, 5)
	}

	lossy := replica("c", false)
	l = mustCreate(t, lossy)
	initialize(t, f, l)
	resumes(l, 1, 2)
	hibernate(lossy)
	if l, err := lossy.Get(ctx, l.Token(), ""); err != nil || l.Generation() != 2 {
		t.Fatalf("lossy wake: %v; want generation 2", err)
	} else {
		resumes(l, 1)
	}
}

// refusing is an engine that refuses its next Start (engine.ErrCapacity)
// when refuse is set, and otherwise starts with eng.
type refusing struct {
	*gosdk.Engine
	refuse atomic.Bool
}

func (e *refusing) Start(ctx context.Context, info engine.Info, out engine.Outbox) (engine.Session, error) {
	if e.refuse.Swap(false) {
		return nil, engine.ErrCapacity
	}
	return e.Engine.Start(ctx, info, out)
}

// TestHibernateWakeRefusedKeepsGeneration: a wake whose engine cannot
// start the session now (at capacity) fails the request and lets the
// session go again, so the next request still wakes it at the same
// generation.
func TestHibernateWakeRefusedKeepsGeneration(t *testing.T) {
	ctx := context.Background()
	clk := testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := memory.New(memory.Options{Now: clk.Now})
	eng := &refusing{Engine: gosdk.New(demo.NewServer())}
	eng.Restorable = true
	reg := session.New(st, eventlog.New(st, eventlog.Options{Now: clk.Now}), eng,
		session.Options{HibernateAfter: time.Minute, Now: clk.Now, Logger: slog.New(slog.DiscardHandler)})
	defer reg.Close()
	f := &fixture{clk: clk}
	l := mustCreate(t, reg)
	initialize(t, f, l)
	waitFor(t, func() bool { return session.Idle(l) })
	clk.Advance(2 * time.Minute)
	waitFor(t, func() bool { reg.Sweep(ctx); return reg.Hibernated() == 1 })
	eng.refuse.Store(true)
	if _, err := reg.Get(ctx, l.Token(), ""); !errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("wake with the engine at capacity = %v, want engine.ErrCapacity", err)
	}
	if rec, _ := st.Get(ctx, l.Token()); rec.Owner != "" || rec.Generation != 1 {
		t.Fatalf("record after the refused wake: owner %q generation %d, want none and 1", rec.Owner, rec.Generation)
	}
	woken, err := reg.Get(ctx, l.Token(), "")
	if err != nil || woken.Generation() != 1 {
		t.Fatalf("second wake: %v; want generation 1", err)
	}
}

// TestHibernateCountsIdleFromCallEnd: a call that runs longer than
// HibernateAfter keeps its session awake, and the session's idle time
// starts when the call's answer is stored, not at its request: a sweep
// right after the call ends leaves the session live, and one
// HibernateAfter later hibernates it. Counting from the request
// hibernated the session at the first sweep after a long call, which
// under a lossy engine lost the answer the client had not yet read.
func TestHibernateCountsIdleFromCallEnd(t *testing.T) {
	ctx := context.Background()
	f, _ := hibernating(t, true, session.Options{HibernateAfter: time.Minute, IdleTTL: -1})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	call := request(t, 7, "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": 1, "delay_ms": 300}})
	s, err := l.OpenStream(ctx, []*jsonrpc.Request{call}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Deliver(ctx, call, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Hour) // the call runs an hour by the registry's clock
	f.reg.Sweep(ctx)
	if f.reg.Hibernated() != 0 {
		t.Fatal("a session with a call in flight hibernated")
	}
	evs := streamAfter(t, l, s, s)
	if last := string(evs[len(evs)-1].Data); !strings.Contains(last, "countdown of 1 finished") {
		t.Fatalf("the call's last event = %s, want its result", last)
	}
	f.reg.Sweep(ctx)
	if f.reg.Hibernated() != 0 || f.reg.Len() != 1 {
		t.Fatalf("right after the call ended: %d hibernated, %d live; want 0 and 1", f.reg.Hibernated(), f.reg.Len())
	}
	waitFor(t, func() bool {
		f.clk.Advance(time.Minute + time.Second)
		f.reg.Sweep(ctx)
		return f.reg.Hibernated() == 1
	})
}

// TestHibernatedIdleEndSparesWokenSession: in a fleet, a replica whose
// index says a session it hibernated is idle past the idle TTL ends it
// only if the record agrees: a session another replica woke and keeps
// using stays, and the index entry goes; a session not woken ends, is
// logged and counted once.
func TestHibernatedIdleEndSparesWokenSession(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	logs := &testenv.LogBuffer{}
	replica := func(owner string) *session.Registry {
		eng := gosdk.New(demo.NewServer())
		eng.Restorable = true
		reg := session.New(rs.st, eventlog.New(rs.st, eventlog.Options{Now: rs.clk.Now, Budget: -1}), eng,
			session.Options{Owner: owner, Lease: 10 * time.Minute, HibernateAfter: time.Minute, IdleTTL: 30 * time.Minute,
				Now: rs.clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		t.Cleanup(func() { reg.Close() })
		return reg
	}
	a, b := replica("a"), replica("b")
	f := &fixture{clk: rs.clk}
	used, idle := mustCreate(t, a), mustCreate(t, a)
	initialize(t, f, used)
	initialize(t, f, idle)
	// initialize's hold ends on a goroutine of its context's, which moves
	// the last use to the clock's time then: advance while sweeping.
	waitFor(t, func() bool { rs.clk.Advance(2 * time.Minute); a.Sweep(ctx); return a.Hibernated() == 2 })
	// b wakes one and uses it every five minutes for 35 minutes.
	for i := range 8 {
		l, err := b.Get(ctx, used.Token(), "")
		if err != nil {
			t.Fatalf("b's call %d: %v", i, err)
		}
		if out := roundTrip(t, f, l, echo(t, 10+i, "on b")); len(out) != 1 || !strings.Contains(out[0], "on b") {
			t.Fatalf("b's call %d answered %v", i, out)
		}
		rs.clk.Advance(5 * time.Minute)
		b.RenewLeases(ctx)
		a.Sweep(ctx)
	}
	if rec, err := rs.st.Get(ctx, used.Token()); err != nil || rec.Owner != "b" {
		t.Fatalf("record of the session b uses = %+v, %v; want owner b", rec, err)
	}
	var ended *store.EndedError
	if _, err := rs.st.Get(ctx, idle.Token()); !errors.As(err, &ended) || ended.Reason != store.EndIdle {
		t.Fatalf("record of the session nobody woke = %v, want ended idle", err)
	}
	if a.Hibernated() != 0 {
		t.Fatalf("a still indexes %d sessions, want 0", a.Hibernated())
	}
	wantLog(t, logs, `msg="session ended" session=`+regexp.QuoteMeta(store.Prefix(idle.Token()))+` generation=1 reason=idle live=false`)
	if n := strings.Count(logs.String(), `msg="session ended"`); n != 1 {
		t.Fatalf("%d session ended lines, want 1:\n%s", n, logs)
	}
}

// TestHibernateToMakeRoom: with MaxSessions live, a new session or a wake
// hibernates the least recently used idle session rather than end it, so
// every session keeps its token and wakes at its generation; none ends.
func TestHibernateToMakeRoom(t *testing.T) {
	ctx := context.Background()
	f, logs := hibernating(t, true, session.Options{HibernateAfter: time.Hour, MaxSessions: 2, IdleTTL: -1})
	var toks []string
	for range 4 {
		l := mustCreate(t, f.reg)
		initialize(t, f, l)
		waitFor(t, func() bool { return session.Idle(l) }) // its answer stored
		toks = append(toks, l.Token())
		f.clk.Advance(time.Second)
	}
	if f.reg.Len() != 2 || f.reg.Hibernated() != 2 {
		t.Fatalf("4 sessions under MaxSessions 2: %d live, %d hibernated; want 2 and 2", f.reg.Len(), f.reg.Hibernated())
	}
	for round := range 2 {
		for i, tok := range toks {
			l, err := f.reg.Get(ctx, tok, "")
			if err != nil || l.Generation() != 1 {
				t.Fatalf("round %d, session %d: %v; want generation 1", round, i, err)
			}
			text := fmt.Sprintf("r%d-s%d", round, i)
			if out := roundTrip(t, f, l, echo(t, 10*round+i, text)); len(out) != 1 || !strings.Contains(out[0], text) {
				t.Fatalf("round %d, session %d answered %v", round, i, out)
			}
			waitFor(t, func() bool { return session.Idle(l) })
			f.clk.Advance(time.Second)
		}
	}
	if strings.Contains(logs.String(), "session ended") {
		t.Fatalf("a session ended to make room:\n%s", logs)
	}
	if n := strings.Count(logs.String(), "session woke"); n != 8 {
		t.Fatalf("%d wakes, want 8 (each of the 4 sessions, twice)", n)
	}
}

// counting is a store that counts the reads of records (Get) and the
// wakes (Wake) made through it.
type counting struct {
	store.Store
	gets, wakes atomic.Int64
}

func (c *counting) Get(ctx context.Context, token string) (store.Record, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, token)
}

func (c *counting) Wake(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) (store.Record, error) {
	c.wakes.Add(1)
	return c.Store.Wake(ctx, token, owner, gen, leaseUntil)
}

// TestHibernateWakeIsOneStoreOp: a session this registry hibernated
// exactly wakes with Wake alone, no read of its record first (one round
// trip on Redis); a request of another user wakes nothing: it is refused
// (ErrForbidden) and the session stays hibernated at its generation, and
// its own user then wakes it at that generation.
func TestHibernateWakeIsOneStoreOp(t *testing.T) {
	ctx := context.Background()
	clk := testenv.NewClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	st := &counting{Store: memory.New(memory.Options{Now: clk.Now})}
	eng := gosdk.New(demo.NewServer())
	eng.Restorable = true
	reg := session.New(st, eventlog.New(st, eventlog.Options{Now: clk.Now}), eng, session.Options{
		HibernateAfter: time.Minute, IdleTTL: -1, Now: clk.Now, Logger: slog.New(slog.DiscardHandler)})
	defer reg.Close()
	f := &fixture{clk: clk}
	hibernate := func(l *session.Live) {
		t.Helper()
		// The clock moves inside the loop: the settle of the last call runs
		// on a goroutine and may stamp the session after a single advance.
		waitFor(t, func() bool {
			clk.Advance(2 * time.Minute)
			reg.Sweep(ctx)
			return reg.Hibernated() == 1
		})
	}
	l, err := reg.Create(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	initialize(t, f, l)
	hibernate(l)
	gets, wakes := st.gets.Load(), st.wakes.Load()
	woken, err := reg.Get(ctx, l.Token(), "alice")
	if err != nil || woken.Generation() != 1 {
		t.Fatalf("wake = %v; want generation 1", err)
	}
	if g, w := st.gets.Load()-gets, st.wakes.Load()-wakes; g != 0 || w != 1 {
		t.Fatalf("the wake read %d records and made %d Wakes, want 0 and 1", g, w)
	}
	if out := roundTrip(t, f, woken, echo(t, 2, "awake")); len(out) != 1 || !strings.Contains(out[0], "awake") {
		t.Fatalf("call after the wake answered %v", out)
	}

	hibernate(woken)
	if _, err := reg.Get(ctx, l.Token(), "bob"); !errors.Is(err, session.ErrForbidden) {
		t.Fatalf("Get by another user = %v, want ErrForbidden", err)
	}
	rec, err := st.Store.Get(ctx, l.Token())
	if err != nil || rec.Generation != 1 || rec.Owner != "" || reg.Hibernated() != 1 {
		t.Fatalf("after another user's request: record %+v, %v, %d hibernated; want generation 1, no owner, 1", rec, err, reg.Hibernated())
	}
	woken, err = reg.Get(ctx, l.Token(), "alice")
	if err != nil || woken.Generation() != 1 {
		t.Fatalf("wake by its user = %v; want generation 1", err)
	}
}

// TestHibernateGivesBackTheMap: once most live sessions hibernated, the
// registry's map of live sessions is made anew at its size, so the room
// the hibernated ones took is given back (a Go map never shrinks by
// itself).
func TestHibernateGivesBackTheMap(t *testing.T) {
	ctx := context.Background()
	f, _ := hibernating(t, true, session.Options{HibernateAfter: time.Minute})
	var keep []*session.Live
	for i := range 100 {
		l := mustCreate(t, f.reg)
		initialize(t, f, l)
		if i >= 90 {
			keep = append(keep, l)
		}
	}
	if n := f.reg.LiveRoom(); n != 100 {
		t.Fatalf("map room with 100 live sessions = %d, want 100", n)
	}
	f.clk.Advance(2 * time.Minute)
	for _, l := range keep {
		l.Touch() // used now: stays live
	}
	waitFor(t, func() bool { f.reg.Sweep(ctx); return f.reg.Hibernated() == 90 })
	// Made anew at its size at the end of the sweep that took it under a
	// quarter of 100 (the sweeps may take the 90 in more than one go).
	if n := f.reg.LiveRoom(); f.reg.Len() != 10 || n < 10 || n >= 25 {
		t.Fatalf("after 90 of 100 hibernated: %d live, map room %d; want 10, and 10 to 24", f.reg.Len(), n)
	}
}

// TestSweptCountsHibernated: Options.Swept is called once per Sweep with
// the number of sessions that sweep hibernated: 300 initialized sessions
// idle past HibernateAfter (more than one batch of them), and not the one
// with a connection attached nor the one never initialized; the next
// sweep, with nothing left to hibernate, reports 0.
func TestSweptCountsHibernated(t *testing.T) {
	ctx := context.Background()
	var calls []int
	f, _ := hibernating(t, true, session.Options{HibernateAfter: time.Minute, IdleTTL: -1,
		Swept: func(n int) { calls = append(calls, n) }})
	idle := make([]*session.Live, 0, 300)
	for range 300 {
		l := mustCreate(t, f.reg)
		initialize(t, f, l)
		idle = append(idle, l)
	}
	attached := mustCreate(t, f.reg)
	initialize(t, f, attached)
	defer attached.Attach()()
	mustCreate(t, f.reg) // no initialize
	// A request's hold ends after its call returns (the request's context
	// ends); one still held when the clock moves would be used after it.
	for _, l := range idle {
		waitFor(t, func() bool { return session.Idle(l) })
	}
	f.clk.Advance(2 * time.Minute)
	f.reg.Sweep(ctx)
	f.reg.Sweep(ctx)
	if want := []int{300, 0}; fmt.Sprint(calls) != fmt.Sprint(want) || f.reg.Hibernated() != 300 {
		t.Fatalf("Swept calls %v, %d hibernated; want %v and 300", calls, f.reg.Hibernated(), want)
	}
}
