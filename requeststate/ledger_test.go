package requeststate_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// TestMemoryLedger: an id is fresh once until its expiry, the bound holds,
// and expired entries make room.
func TestMemoryLedger(t *testing.T) {
	l := requeststate.NewMemoryLedger(3)
	t0 := time.Date(2026, 11, 6, 12, 0, 0, 0, time.UTC)
	use := func(id string, now time.Time, ttl time.Duration) string {
		fresh, err := l.Use(t.Context(), id, now, now.Add(ttl))
		if err != nil {
			return err.Error()
		}
		return fmt.Sprint(fresh)
	}
	for _, step := range []struct {
		id   string
		at   time.Duration // after t0
		ttl  time.Duration
		want string
		len  int
	}{
		{"a", 0, 10 * time.Second, "true", 1},
		{"a", time.Second, 10 * time.Second, "false", 1},
		{"b", time.Second, 20 * time.Second, "true", 2},
		{"c", time.Second, 20 * time.Second, "true", 3},
		{"d", 2 * time.Second, 20 * time.Second, "requeststate: the ledger of used states is full: 3 states remembered until they expire (the bound)", 3},
		// a expires at 10 s: at that instant it is forgotten, d fits.
		{"d", 10 * time.Second, 20 * time.Second, "true", 3},
		{"a", 10 * time.Second, 20 * time.Second, "requeststate: the ledger of used states is full: 3 states remembered until they expire (the bound)", 3},
		{"a", 21 * time.Second, 20 * time.Second, "true", 2}, // b and c gone, d stays
	} {
		if got := use(step.id, t0.Add(step.at), step.ttl); got != step.want || l.Len() != step.len {
			t.Fatalf("Use(%s) at +%v: %s with %d entries, want %s with %d", step.id, step.at, got, l.Len(), step.want, step.len)
		}
	}
}

// TestSingleUseConcurrent: 16 goroutines open the same state at once; the
// ledger lets exactly one of them through.
func TestSingleUseConcurrent(t *testing.T) {
	s := requeststate.New(requeststate.RandomRing(), requeststate.Options{Ledger: requeststate.NewMemoryLedger(0)})
	req := requeststate.Request{Method: "tools/call", Target: "confirm"}
	state, err := s.Seal(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ok, replayed atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			err := s.Open(t.Context(), req, state, nil)
			switch {
			case err == nil:
				ok.Add(1)
			case requeststate.ReasonOf(err) == replay.ReasonStateReplayed:
				replayed.Add(1)
			default:
				t.Errorf("Open: %v", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || replayed.Load() != 15 {
		t.Errorf("%d opened and %d refused as replayed, want 1 and 15", ok.Load(), replayed.Load())
	}
}

// failingLedger cannot be reached.
type failingLedger struct{}

func (failingLedger) Use(_ context.Context, _ string, _, _ time.Time) (bool, error) {
	return false, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

// TestLedgerUnavailable: a ledger that cannot record the use refuses the
// state with -32603 unavailable, so a replay is never accepted unrecorded.
func TestLedgerUnavailable(t *testing.T) {
	s := requeststate.New(requeststate.RandomRing(), requeststate.Options{Ledger: failingLedger{}})
	req := requeststate.Request{Method: "tools/call", Target: "confirm"}
	state, _ := s.Seal(req, nil)
	err := s.Open(t.Context(), req, state, nil)
	want := "requeststate: cannot record the state's use: dial tcp 127.0.0.1:6379: connection refused; retry later"
	if requeststate.ReasonOf(err) != replay.ReasonUnavailable || err.Error() != want {
		t.Errorf("Open: %v (reason %q), want %q with reason unavailable", err, requeststate.ReasonOf(err), want)
	}
}
