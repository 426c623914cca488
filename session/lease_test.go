package session_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// flaky is a store whose appends fail with ErrUnavailable while failing
// is set, and whose Claim lets a competitor claim first once when race is
// set.
type flaky struct {
	store.Store
	failing atomic.Bool
	race    atomic.Pointer[func(token string, from uint64)]
}

func (s *flaky) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	if s.failing.Load() {
		return store.Bounds{}, store.ErrUnavailable
	}
	return s.Store.Append(ctx, token, gen, evs)
}

func (s *flaky) Claim(ctx context.Context, token, owner string, from uint64, leaseUntil time.Time) (store.Record, error) {
	if f := s.race.Swap(nil); f != nil {
		(*f)(token, from)
	}
	return s.Store.Claim(ctx, token, owner, from, leaseUntil)
}

// replicas is several registries (replicas of a fleet) on one store, with
// one clock.
type replicas struct {
	st  *flaky
	clk *testenv.Clock
}

func newReplicas() *replicas {
	clk := testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	return &replicas{st: &flaky{Store: memory.New(memory.Options{Now: clk.Now})}, clk: clk}
}

// registry returns replica owner with the given lease, and its log.
func (rs *replicas) registry(t *testing.T, owner string, lease time.Duration) (*session.Registry, *testenv.LogBuffer) {
	t.Helper()
	logs := &testenv.LogBuffer{}
	reg := session.New(rs.st, eventlog.New(rs.st, eventlog.Options{Now: rs.clk.Now, Budget: -1}), gosdk.New(demo.NewServer()),
		session.Options{Owner: owner, Lease: lease, Now: rs.clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(func() { reg.Close() })
	return reg, logs
}

func (rs *replicas) record(t *testing.T, token string) store.Record {
	t.Helper()
	rec, err := rs.st.Get(context.Background(), token)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func wantRemote(t *testing.T, err error, owner string, gen uint64, until time.Time) {
	t.Helper()
	var re *session.RemoteError
	if !errors.As(err, &re) || !errors.Is(err, session.ErrRemote) {
		t.Fatalf("got %v, want a *RemoteError (ErrRemote)", err)
	}
	if re.Owner != owner || re.Generation != gen || !re.LeaseUntil.Equal(until) {
		t.Fatalf("RemoteError = owner %q gen %d until %v; want %q gen %d until %v", re.Owner, re.Generation, re.LeaseUntil, owner, gen, until)
	}
}

func wantDone(t *testing.T, l *session.Live) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the dropped generation's engine session did not close")
	}
}

func wantLog(t *testing.T, logs *testenv.LogBuffer, pattern string) {
	t.Helper()
	if !regexp.MustCompile(pattern).MatchString(logs.String()) {
		t.Fatalf("no log line matches %q; log:\n%s", pattern, logs)
	}
}

// TestLeaseRemoteUntilLapsed: a session another replica holds under a
// lease is remote (ErrRemote, with owner, generation and expiry) until the
// lease lapses, renewals extend it, and the first Get after it lapses
// takes the session over at generation+1 with a lease of its own. The old
// owner's next renewal is fenced: its live state is dropped and logged.
func TestLeaseRemoteUntilLapsed(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	regA, logsA := rs.registry(t, "a", 10*time.Second)
	regB, logsB := rs.registry(t, "b", 10*time.Second)
	t0 := rs.clk.Now()

	la := mustCreate(t, regA)
	tok := la.Token()
	if rec := rs.record(t, tok); rec.Owner != "a" || !rec.LeaseUntil.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("created record: owner %q lease %v, want a until t0+10s", rec.Owner, rec.LeaseUntil)
	}
	_, err := regB.Get(ctx, tok, "")
	wantRemote(t, err, "a", 1, t0.Add(10*time.Second))

	rs.clk.Advance(5 * time.Second)
	regA.RenewLeases(ctx)
	if rec := rs.record(t, tok); !rec.LeaseUntil.Equal(t0.Add(15 * time.Second)) {
		t.Fatalf("lease after renewal at t0+5s: %v, want t0+15s", rec.LeaseUntil)
	}
	rs.clk.Advance(9 * time.Second) // t0+14s: still a's
	_, err = regB.Get(ctx, tok, "")
	wantRemote(t, err, "a", 1, t0.Add(15*time.Second))
	// Exactly at the expiry the lease has lapsed.
	rs.clk.Advance(time.Second)
	lb, err := regB.Get(ctx, tok, "")
	if err != nil {
		t.Fatalf("Get after the lease lapsed: %v", err)
	}
	if lb.Generation() != 2 {
		t.Fatalf("taken over at generation %d, want 2", lb.Generation())
	}
	if rec := rs.record(t, tok); rec.Owner != "b" || rec.Generation != 2 || !rec.LeaseUntil.Equal(t0.Add(25*time.Second)) {
		t.Fatalf("record after the takeover: owner %q gen %d lease %v; want b, 2, t0+25s", rec.Owner, rec.Generation, rec.LeaseUntil)
	}
	wantLog(t, logsB, `msg="session re-created" session=\S+ generation=2 previous_generation=1 previous_owner=a reason=lease_expired`)

	regA.RenewLeases(ctx)
	wantDone(t, la)
	if regA.Len() != 0 {
		t.Fatalf("a still holds %d sessions after its renewal was fenced", regA.Len())
	}
	wantLog(t, logsA, `level=WARN msg="live state dropped: this process no longer owns the generation" session=\S+ generation=1 reason=fenced`)
	_, err = regA.Get(ctx, tok, "")
	wantRemote(t, err, "b", 2, t0.Add(25*time.Second))
}

// TestLeaseLapsedLocally: a registry whose own lease lapsed (it was paused,
// or its renewals failed) renews before serving; if nobody took the
// session over it keeps it, else it drops its generation and reports the
// new owner.
func TestLeaseLapsedLocally(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	regA, logsA := rs.registry(t, "a", 10*time.Second)
	regB, _ := rs.registry(t, "b", 10*time.Second)
	la := mustCreate(t, regA)
	tok := la.Token()

	rs.clk.Advance(11 * time.Second)
	got, err := regA.Get(ctx, tok, "")
	if err != nil || got != la {
		t.Fatalf("Get on the owner after its lease lapsed unclaimed: %v, %v; want the same Live", got, err)
	}
	if rec := rs.record(t, tok); !rec.LeaseUntil.Equal(rs.clk.Now().Add(10 * time.Second)) {
		t.Fatalf("lease after the renewal on Get: %v, want now+10s", rec.LeaseUntil)
	}

	rs.clk.Advance(11 * time.Second)
	if _, err := regB.Get(ctx, tok, ""); err != nil {
		t.Fatal(err)
	}
	_, err = regA.Get(ctx, tok, "")
	wantRemote(t, err, "b", 2, rs.clk.Now().Add(10*time.Second))
	wantDone(t, la)
	wantLog(t, logsA, `reason=fenced`)
}

// TestLeaseWithoutExpiry: a record without a lease (a process of a
// previous boot, Lease 0) is taken over at once, as before leases existed;
// a registry with Lease 0 writes no lease.
func TestLeaseWithoutExpiry(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	old, _ := rs.registry(t, "old", 0)
	regA, _ := rs.registry(t, "a", 10*time.Second)
	l := mustCreate(t, old)
	if rec := rs.record(t, l.Token()); !rec.LeaseUntil.IsZero() {
		t.Fatalf("Lease 0 wrote lease %v, want none", rec.LeaseUntil)
	}
	la, err := regA.Get(ctx, l.Token(), "")
	if err != nil || la.Generation() != 2 {
		t.Fatalf("Get of a lease-less record: %v, want generation 2", err)
	}
}

// TestLeaseSessionEnded: a session deleted through another replica is
// dropped by its owner's next renewal, logged as session_not_found.
func TestLeaseSessionEnded(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	regA, logsA := rs.registry(t, "a", 10*time.Second)
	regB, _ := rs.registry(t, "b", 10*time.Second)
	la := mustCreate(t, regA)
	if err := regB.End(ctx, la.Token(), store.EndDeleted); err != nil {
		t.Fatal(err)
	}
	regA.RenewLeases(ctx)
	wantDone(t, la)
	wantLog(t, logsA, `msg="live state dropped: this process no longer owns the generation" session=\S+ generation=1 reason=session_not_found`)
}

// TestLeaseFencedAppend: an append of a generation another replica took
// over is refused; the old generation's engine session closes.
func TestLeaseFencedAppend(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	regA, logsA := rs.registry(t, "a", 10*time.Second)
	regB, _ := rs.registry(t, "b", 10*time.Second)
	la := mustCreate(t, regA)
	rs.clk.Advance(11 * time.Second)
	if _, err := regB.Get(ctx, la.Token(), ""); err != nil {
		t.Fatal(err)
	}
	_, err := la.OpenStream(ctx, []*jsonrpc.Request{request(t, 5, "ping", nil)}, false, 0)
	var fe *store.FencedError
	if !errors.As(err, &fe) || fe.Have != 1 || fe.Want != 2 {
		t.Fatalf("append of the old generation: %v, want fenced gen 1 by gen 2", err)
	}
	wantDone(t, la)
	wantLog(t, logsA, `msg="append fenced: a newer generation owns the session" session=\S+ generation=1 reason=fenced`)
}

// TestLeaseClaimRace: a takeover that loses the race to another replica
// reports the winner as the owner.
func TestLeaseClaimRace(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	regA, _ := rs.registry(t, "a", 10*time.Second)
	regB, _ := rs.registry(t, "b", 10*time.Second)
	la := mustCreate(t, regA)
	rs.clk.Advance(11 * time.Second)
	until := rs.clk.Now().Add(10 * time.Second)
	race := func(token string, from uint64) {
		if _, err := rs.st.Store.Claim(ctx, token, "c", from, until); err != nil {
			t.Errorf("competitor's claim: %v", err)
		}
	}
	rs.st.race.Store(&race)
	_, err := regB.Get(ctx, la.Token(), "")
	wantRemote(t, err, "c", 2, until)
}

// TestLeaseUnavailableSend: an outbound message that cannot be stored
// because the store is unavailable ends the generation in this process,
// and the next request re-creates the session at generation+1.
func TestLeaseUnavailableSend(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	regA, logsA := rs.registry(t, "a", 10*time.Second)
	la := mustCreate(t, regA)
	rs.st.failing.Store(true)
	err := session.OutboxOf(la).Send(ctx, &jsonrpc.Request{Method: "notifications/message"}, jsonrpc.ID{})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Send with the store down: %v, want ErrUnavailable", err)
	}
	wantDone(t, la)
	wantLog(t, logsA, `msg="live state dropped: an event could not be stored, so this generation ends; the next request re-creates the session at generation\+1" session=\S+ generation=1 reason=unavailable`)
	rs.st.failing.Store(false)
	l2, err := regA.Get(ctx, la.Token(), "")
	if err != nil || l2.Generation() != 2 {
		t.Fatalf("Get after the store came back: %v, want generation 2", err)
	}
}

// TestLeaseReleasedOnClose: Close makes the leases lapse, so another
// replica takes the sessions over at once.
func TestLeaseReleasedOnClose(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	regA, _ := rs.registry(t, "a", 10*time.Second)
	regB, _ := rs.registry(t, "b", 10*time.Second)
	la := mustCreate(t, regA)
	regA.Close()
	if rec := rs.record(t, la.Token()); !rec.LeaseUntil.Equal(rs.clk.Now()) {
		t.Fatalf("lease after Close: %v, want now (%v)", rec.LeaseUntil, rs.clk.Now())
	}
	lb, err := regB.Get(ctx, la.Token(), "")
	if err != nil || lb.Generation() != 2 {
		t.Fatalf("Get on b after a closed: %v, want generation 2", err)
	}
}

// TestLeaseRunRenews: Run renews leases every RenewInterval (real time).
func TestLeaseRunRenews(t *testing.T) {
	st := memory.New(memory.Options{})
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), gosdk.New(demo.NewServer()),
		session.Options{Owner: "a", Lease: 300 * time.Millisecond, RenewInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer reg.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); reg.Run(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()
	l, err := reg.Create(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // twice the lease
	rec, err := st.Get(context.Background(), l.Token())
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(rec.LeaseUntil); left < 150*time.Millisecond {
		t.Fatalf("lease has %v left after two lease lengths of Run, want renewals every 50ms to keep it above 150ms", left)
	}
}

// mustCreate creates a session on reg, failing the test if it cannot.
func mustCreate(t *testing.T, reg *session.Registry) *session.Live {
	t.Helper()
	l, err := reg.Create(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return l
}
