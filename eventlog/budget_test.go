package eventlog_test

// Tests of the process budget: its cost over the budget, the order in
// which events and sessions go, and its accounting under concurrency.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// countingLog counts the calls an eventlog.Log makes to its store besides
// Append: what enforcing retention and the budget costs.
type countingLog struct {
	store.Log
	calls atomic.Int64
}

func (c *countingLog) Read(ctx context.Context, token string, after uint64, max int) ([]store.Event, store.Bounds, error) {
	c.calls.Add(1)
	return c.Log.Read(ctx, token, after, max)
}

func (c *countingLog) Trim(ctx context.Context, token string, gen, floor uint64) (store.Bounds, error) {
	c.calls.Add(1)
	return c.Log.Trim(ctx, token, gen, floor)
}

func (c *countingLog) Bounds(ctx context.Context, token string) (store.Bounds, error) {
	c.calls.Add(1)
	return c.Log.Bounds(ctx, token)
}

// TestBudgetCostsNoScanOfSessions: over the budget, an append costs a few
// store calls whatever the number of sessions, not a look at every session
// (an operator's case: --retention-budget 1048576, 3,000 sessions, a
// countdown of 5,000 steps). Here 1,000 sessions each hold one 264-byte event
// (their newest, never trimmed) against a budget of 200,000 bytes, with no
// evict function: 100 appends to another session ask the store at most 3
// times each (its bounds, its oldest events, the trim).
func TestBudgetCostsNoScanOfSessions(t *testing.T) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	cl := &countingLog{Log: st}
	clk := testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	log := eventlog.New(cl, eventlog.Options{Budget: 200_000, Now: clk.Now})
	data := strings.Repeat("x", 200)
	for i := range 1000 {
		tok := fmt.Sprintf("idle%04d", i)
		st.Create(ctx, store.Record{Token: tok, Generation: 1})
		if err := log.Append(ctx, tok, 1, msg(1, data)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	st.Create(ctx, store.Record{Token: "busy", Generation: 1})
	cl.calls.Store(0)
	for range 100 {
		if err := log.Append(ctx, "busy", 1, msg(1, data)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	if n := cl.calls.Load(); n > 300 {
		t.Fatalf("100 appends over the budget made %d store calls besides Append, want at most 300", n)
	}
	if b, _ := st.Bounds(ctx, "busy"); b.HWM != 100 || b.Events != 1 {
		t.Fatalf("busy = %+v, want only its newest event (HWM 100)", b)
	}
	for _, tok := range []string{"idle0000", "idle0999"} {
		if b, _ := st.Bounds(ctx, tok); b.Events != 1 || b.Floor != 1 {
			t.Fatalf("%s = %+v, want its newest event kept", tok, b)
		}
	}
	if got, want := log.Usage(), int64(1001*264); got != want {
		t.Fatalf("Usage = %d, want %d (every session's newest event)", got, want)
	}
}

// TestBudgetEvictsTheLeastRecent: with an evict function, a session whose
// newest event is the oldest event left over the budget is evicted, the
// least recent first, so the total stays within the budget even when the
// newest events alone exceed it (150 sessions each holding one 4 MiB
// answer against a budget of 512 MiB). Ten sessions of one 100-byte event each,
// budget 600: each time
// the total passes 600, the oldest go until it is at most 600 - 37.
func TestBudgetEvictsTheLeastRecent(t *testing.T) {
	ctx := context.Background()
	var tokens []string
	for i := range 10 {
		tokens = append(tokens, fmt.Sprintf("s%d", i))
	}
	st, log, clk := setup(t, eventlog.Options{Budget: 600}, tokens...)
	var evicted []string
	log.SetEvict(func(tok string) {
		evicted = append(evicted, tok)
		st.End(ctx, tok, store.EndCapacity, time.Now().Add(time.Hour))
		log.Forget(tok)
	})
	for _, tok := range tokens {
		if err := log.Append(ctx, tok, 1, msg(1, "012345678901234567890123456789012345")); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		if log.Usage() > 600 {
			t.Fatalf("after appending to %s: Usage %d, over the budget of 600", tok, log.Usage())
		}
	}
	if fmt.Sprint(evicted) != "[s0 s1 s2 s3]" {
		t.Fatalf("evicted %v, want [s0 s1 s2 s3] (the least recent first)", evicted)
	}
	if log.Usage() != 600 {
		t.Fatalf("Usage = %d, want 600", log.Usage())
	}
	if b, err := st.Bounds(ctx, "s4"); err != nil || b.Events != 1 {
		t.Fatalf("s4 = %+v, %v; want its event kept", b, err)
	}
}

// TestBudgetOldestFirst: over the budget the oldest event of the process
// goes first, whichever session holds it: a session down to its newest
// event is evicted before a busier session loses newer events, and two
// sessions whose events interleave in time lose them in time order.
func TestBudgetOldestFirst(t *testing.T) {
	ctx := context.Background()
	st, log, clk := setup(t, eventlog.Options{Budget: 550}, "quiet", "a", "b", "c")
	var evicted []string
	log.SetEvict(func(tok string) {
		evicted = append(evicted, tok)
		st.End(ctx, tok, store.EndCapacity, time.Now().Add(time.Hour))
		log.Forget(tok)
	})
	ev := msg(1, "012345678901234567890123456789012345") // 100 bytes
	log.Append(ctx, "quiet", 1, ev)
	for range 3 {
		clk.Advance(time.Second)
		log.Append(ctx, "a", 1, ev)
		clk.Advance(time.Second)
		log.Append(ctx, "b", 1, ev)
	}
	// 700 bytes: "quiet" (the oldest, alone in its session) and then "a"'s
	// first event went, leaving 500.
	if fmt.Sprint(evicted) != "[quiet]" {
		t.Fatalf("evicted %v, want [quiet]", evicted)
	}
	a, _ := st.Bounds(ctx, "a")
	b, _ := st.Bounds(ctx, "b")
	if a.Floor != 2 || b.Floor != 1 || log.Usage() != 500 {
		t.Fatalf("a %+v, b %+v, Usage %d; want a floor 2, b floor 1, 500 bytes", a, b, log.Usage())
	}
	clk.Advance(time.Second)
	log.Append(ctx, "c", 1, ev)
	// 600 bytes: the oldest event left is b's first.
	a, _ = st.Bounds(ctx, "a")
	b, _ = st.Bounds(ctx, "b")
	if a.Floor != 2 || b.Floor != 2 || log.Usage() != 500 {
		t.Fatalf("a %+v, b %+v, Usage %d; want both at floor 2, 500 bytes", a, b, log.Usage())
	}
}

// TestBudgetUnderConcurrency appends from several goroutines to sessions
// whose events exceed a small budget, evicting as session.Registry does
// (on a goroutine of its own): once all is quiet, the total is within the
// budget and exactly what the sessions left retain.
func TestBudgetUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	var tokens []string
	for i := range 64 {
		tokens = append(tokens, fmt.Sprintf("s%02d", i))
	}
	st, log, _ := setup(t, eventlog.Options{Budget: 20_000, MaxEvents: 50}, tokens...)
	var ending sync.WaitGroup
	log.SetEvict(func(tok string) {
		ending.Go(func() {
			st.End(ctx, tok, store.EndCapacity, time.Now().Add(time.Hour))
			log.Forget(tok)
		})
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				tok := tokens[(g*8+i)%len(tokens)]
				err := log.Append(ctx, tok, 1, msg(1, "0123456789012345678901234567890123456789"))
				if err != nil && !errors.Is(err, store.ErrEnded) {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	ending.Wait()
	var want int64
	for _, tok := range tokens {
		if b, err := st.Bounds(ctx, tok); err == nil {
			want += b.Bytes
		}
	}
	if got := log.Usage(); got != want || got > 20_000 {
		t.Fatalf("Usage = %d, want %d (what the live sessions retain), at most 20,000", got, want)
	}
}
