package eventlog_test

import (
	"context"
	"fmt"
	"strings"
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
// (the input of issue 17: --retention-budget 1048576, 3,000 sessions, a
// countdown of 5,000 steps). Here 1,000 sessions each hold one 264-byte event
// (their newest, never trimmed) against a budget of 200,000 bytes: 100
// appends to another session ask the store at most 3 times each (its
// bounds, its oldest events, the trim).
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
