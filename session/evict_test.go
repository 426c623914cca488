// evict_test.go holds the tests of making room for a session at
// Options.MaxSessions.

package session_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// endCounter is a store that counts the End calls of each token, by reason.
type endCounter struct {
	store.Store
	mu   sync.Mutex
	ends map[string][]store.EndReason
}

func (s *endCounter) End(ctx context.Context, token string, reason store.EndReason, until time.Time) error {
	s.mu.Lock()
	s.ends[token] = append(s.ends[token], reason)
	s.mu.Unlock()
	return s.Store.End(ctx, token, reason, until)
}

// TestEvictionConcurrentCreators: creators that arrive together at a full
// registry each evict a session of their own, the least recently used
// ones, none twice, and the registry ends holding exactly MaxSessions.
func TestEvictionConcurrentCreators(t *testing.T) {
	const capacity, creators = 32, 32
	ctx := context.Background()
	st := &endCounter{Store: memory.New(memory.Options{}), ends: map[string][]store.EndReason{}}
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), gosdk.New(demo.NewServer()),
		session.Options{MaxSessions: capacity, Logger: slog.New(slog.DiscardHandler)})
	defer reg.Close()
	old := make(map[string]bool, capacity)
	for range capacity {
		old[mustCreate(t, reg).Token()] = true
	}

	gate := make(chan struct{})
	created := make([]string, creators)
	var wg sync.WaitGroup
	for i := range creators {
		wg.Go(func() {
			<-gate
			l, err := reg.Create(ctx, "")
			if err != nil {
				t.Errorf("creator %d: %v", i, err)
				return
			}
			created[i] = l.Token()
		})
	}
	close(gate)
	wg.Wait()

	if n := reg.Len(); n != capacity {
		t.Errorf("registry holds %d sessions after %d creations at the cap, want %d", n, creators, capacity)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	evicted := 0
	for tok, reasons := range st.ends {
		if !old[tok] {
			t.Errorf("a session created at the cap was ended (%v)", reasons)
			continue
		}
		if len(reasons) != 1 || reasons[0] != store.EndCapacity {
			t.Errorf("session %s ended %v, want once, by capacity", store.Prefix(tok), reasons)
		}
		evicted++
	}
	if evicted != creators {
		t.Errorf("%d sessions evicted for %d creations, want one each", evicted, creators)
	}
	for _, tok := range created {
		if tok == "" {
			continue
		}
		if _, err := reg.Get(ctx, tok, ""); err != nil {
			t.Errorf("a session created at the cap: %v, want held", err)
		}
	}
}

// TestEvictionSkipsBusySessions: when sessions do not hibernate, a session
// with a call in flight is never evicted; when all are busy, Create fails
// with engine.ErrCapacity, and a session whose last call ended is a
// candidate again. An open standalone stream alone does not protect a
// session (with hibernation it does: TestRoomNeverTakesABusySession).
func TestEvictionSkipsBusySessions(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{MaxSessions: 2, HibernateAfter: -1})
	a := mustCreate(t, f.reg)
	initialize(t, f, a)
	b := mustCreate(t, f.reg)
	initialize(t, f, b)
	// An answer is readable a moment before its append returns and its
	// session stops counting it in flight.
	waitFor(t, func() bool { return f.reg.CallsInFlight() == 0 })
	call := func(l *session.Live, id string) (uint64, []*jsonrpc.Request) {
		calls := []*jsonrpc.Request{request(t, id, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": id}})}
		s, err := l.OpenStream(ctx, calls, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		return s, calls
	}
	sa, callsA := call(a, "a1")
	call(b, "b1")
	if _, err := f.reg.Create(ctx, ""); !errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("Create with every session busy: %v, want engine.ErrCapacity", err)
	}
	// a's call ends (never delivered, so released): a can go, b cannot,
	// although a was used after b.
	f.reg.Get(ctx, a.Token(), "")
	a.ReleaseCalls(ctx, sa, callsA, replay.ReasonClientGone)
	detach := a.Attach() // a standalone stream is open on a
	defer detach()
	c, err := f.reg.Create(ctx, "")
	if err != nil {
		t.Fatalf("Create after a's call ended: %v", err)
	}
	var ended *store.EndedError
	if _, err := f.reg.Get(ctx, a.Token(), ""); !errors.As(err, &ended) || ended.Reason != store.EndCapacity {
		t.Fatalf("a after the Create: %v, want ended by capacity", err)
	}
	for _, l := range []*session.Live{b, c} {
		if _, err := f.reg.Get(ctx, l.Token(), ""); err != nil {
			t.Fatalf("session %s after the Create: %v, want held", store.Prefix(l.Token()), err)
		}
	}
}

// TestRoomNeverTakesABusySession: when sessions can hibernate, making room
// hibernates the least recently used idle session, never one with a
// connection attached (an open stream) or a request being served: such a
// session can neither hibernate nor be ended for another client's
// benefit, so the request needing room fails with engine.ErrCapacity and
// the busy session stays, at its generation. Once it is idle, it
// hibernates for the room, and wakes at its generation; no session ends.
func TestRoomNeverTakesABusySession(t *testing.T) {
	ctx := context.Background()
	f, logs := hibernating(t, true, session.Options{HibernateAfter: time.Hour, MaxSessions: 1, IdleTTL: -1})
	a := mustCreate(t, f.reg)
	initialize(t, f, a)
	waitFor(t, func() bool { return session.Idle(a) })

	detach := a.Attach() // a's standalone stream is open
	if _, err := f.reg.Create(ctx, ""); !errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("Create with a's stream open: %v, want engine.ErrCapacity", err)
	}
	detach()
	b := mustCreate(t, f.reg)
	initialize(t, f, b)
	waitFor(t, func() bool { return session.Idle(b) })
	if f.reg.Len() != 1 || f.reg.Hibernated() != 1 {
		t.Fatalf("after b's creation: %d live, %d hibernated; want 1 and 1 (a hibernated)", f.reg.Len(), f.reg.Hibernated())
	}

	// A request is being served on b (its context has not ended): a's
	// wake finds no room.
	served, done := context.WithCancel(ctx)
	if _, err := f.reg.Get(served, b.Token(), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.Get(ctx, a.Token(), ""); !errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("waking a while b serves a request: %v, want engine.ErrCapacity", err)
	}
	if l, err := f.reg.Get(ctx, b.Token(), ""); err != nil || l != b {
		t.Fatalf("b after a's refused wake: %v, want it held as it was", err)
	}
	done()
	waitFor(t, func() bool { return session.Idle(b) })
	for _, tok := range []string{a.Token(), b.Token()} {
		l, err := f.reg.Get(ctx, tok, "")
		if err != nil || l.Generation() != 1 {
			t.Fatalf("session %s once the room is free: %v; want it woken at generation 1", store.Prefix(tok), err)
		}
		waitFor(t, func() bool { return session.Idle(l) })
	}
	if strings.Contains(logs.String(), "session ended") {
		t.Fatalf("a session ended to make room:\n%s", logs)
	}
	if n := strings.Count(logs.String(), "session woke"); n != 2 {
		t.Fatalf("%d wakes, want 2 (a, then b):\n%s", n, logs)
	}
}

// TestRoomConcurrentWakes: wakes that arrive together at a full registry
// each hibernate an idle session, never one another nor a session that a
// request is being served on, and never end one; those that find every
// session busy fail with engine.ErrCapacity. Each request holds the
// session it is served by until it ends, as an HTTP request does.
func TestRoomConcurrentWakes(t *testing.T) {
	const capacity, sessions, rounds = 4, 8, 20
	ctx := context.Background()
	f, logs := hibernating(t, true, session.Options{HibernateAfter: time.Hour, MaxSessions: capacity, IdleTTL: -1})
	var toks []string
	for range sessions {
		l := mustCreate(t, f.reg)
		initialize(t, f, l)
		waitFor(t, func() bool { return session.Idle(l) })
		toks = append(toks, l.Token())
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i, tok := range toks {
		wg.Go(func() {
			for n := range rounds {
				served, done := context.WithCancel(ctx)
				l, err := f.reg.Get(served, tok, "")
				outcome := "served"
				switch {
				case errors.Is(err, engine.ErrCapacity):
					outcome = "capacity"
				case err != nil:
					outcome = err.Error()
				case l.Generation() != 1:
					outcome = fmt.Sprintf("generation %d", l.Generation())
				default:
					text := fmt.Sprintf("s%d-r%d", i, n)
					if out := roundTrip(t, f, l, echo(t, 100+n, text)); len(out) != 1 || !strings.Contains(out[0], text) {
						outcome = fmt.Sprintf("answered %v", out)
					}
				}
				done()
				mu.Lock()
				outcomes[outcome]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(outcomes) > 2 || outcomes["served"] == 0 || outcomes["served"]+outcomes["capacity"] != sessions*rounds {
		t.Fatalf("outcomes %v, want each of %d requests served or refused for capacity", outcomes, sessions*rounds)
	}
	if strings.Contains(logs.String(), "session ended") {
		t.Fatalf("a session ended to make room:\n%s", logs)
	}
	if n := f.reg.Len() + f.reg.Hibernated(); n != sessions {
		t.Fatalf("%d sessions live or hibernated, want %d", n, sessions)
	}
}

// holding is a store whose appends of a call's answer (a message that
// ends its stream) wait, once hold was called, until release is: entered
// says one is waiting.
type holding struct {
	store.Store
	held    atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (s *holding) hold() {
	s.entered, s.gate = make(chan struct{}, 1), make(chan struct{})
	s.held.Store(true)
}

func (s *holding) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	if s.held.Load() && slices.ContainsFunc(evs, func(e store.Event) bool { return e.Kind == store.KindMessage && e.End }) {
		s.entered <- struct{}{}
		<-s.gate
	}
	return s.Store.Append(ctx, token, gen, evs)
}

// TestEvictionWaitsForTheAnswersAppend: when sessions do not hibernate, a
// session whose last call was answered keeps its room until the answer is
// stored, so the request needing the room fails with engine.ErrCapacity
// meanwhile; ending the session then would lose an answer the server gave
// (its client's resume would answer request_lost). Once the answer is
// stored, the session is the one that gives way.
func TestEvictionWaitsForTheAnswersAppend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clk := testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := &holding{Store: memory.New(memory.Options{Now: clk.Now})}
	reg := session.New(st, eventlog.New(st, eventlog.Options{Now: clk.Now}), gosdk.New(demo.NewServer()),
		session.Options{MaxSessions: 1, HibernateAfter: -1, Now: clk.Now, Logger: slog.New(slog.DiscardHandler)})
	defer reg.Close()
	f := &fixture{clk: clk, reg: reg}
	a := mustCreate(t, reg)
	initialize(t, f, a)

	st.hold()
	var once sync.Once
	release := func() { once.Do(func() { st.held.Store(false); close(st.gate) }) }
	defer release() // before reg.Close, which waits for the append
	req := echo(t, 2, "kept")
	s, err := a.OpenStream(ctx, []*jsonrpc.Request{req}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	rd := a.Reader(s, s)
	if err := a.Deliver(ctx, req, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	<-st.entered // the engine answered; the answer is being appended
	if _, err := reg.Create(ctx, ""); !errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("Create while a's answer is being appended: %v, want engine.ErrCapacity", err)
	}
	release()
	var got []string
	for done := false; !done; {
		evs, err := rd.Next(ctx)
		if err != nil {
			t.Fatalf("a's stream after %v: %v", got, err)
		}
		for _, e := range evs {
			got = append(got, string(e.Data))
			done = done || e.End
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], `"text":"kept"`) {
		t.Fatalf("a's stream = %v, want the echo of kept", got)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := reg.Create(ctx, "")
		if err == nil {
			break
		}
		if !errors.Is(err, engine.ErrCapacity) || time.Now().After(deadline) {
			t.Fatalf("Create after a's answer was stored: %v", err)
		}
	}
	var ended *store.EndedError
	if _, err := reg.Get(ctx, a.Token(), ""); !errors.As(err, &ended) || ended.Reason != store.EndCapacity {
		t.Fatalf("a after the Create: %v, want ended by capacity", err)
	}
}
