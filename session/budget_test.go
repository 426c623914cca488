// budget_test.go holds the tests of the registry's side of the event
// log's budget: a session whose newest event does not fit is ended.

package session_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// TestEvictedOverBudget: a session whose newest event no longer fits in
// the event log's budget is ended by the registry, reason
// retention_budget, and its token answers as an evicted one's; the
// session that pushed the total over the budget stays. Two sessions each
// echo 2,000 bytes against a budget of 3,000.
func TestEvictedOverBudget(t *testing.T) {
	ctx := context.Background()
	f := &fixture{clk: testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), server: demo.NewServer()}
	f.st = memory.New(memory.Options{Now: f.clk.Now})
	f.log = eventlog.New(f.st, eventlog.Options{Now: f.clk.Now, Budget: 3000})
	f.reg = session.New(f.st, f.log, gosdk.New(f.server), session.Options{Now: f.clk.Now, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { f.reg.Close() })
	text := strings.Repeat("x", 2000)
	var lives []*session.Live
	for range 2 {
		l, err := f.reg.Create(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		initialize(t, f, l)
		roundTrip(t, f, l, request(t, 2, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": text}}))
		lives = append(lives, l)
		f.clk.Advance(time.Second)
	}
	first, second := lives[0].Token(), lives[1].Token()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, _, err := f.reg.Status(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		// The token answers evicted as soon as the end begins; the record
		// ends on the goroutine that ends the session, a moment later.
		var ended *store.EndedError
		_, recErr := f.st.Get(ctx, first)
		if status == replay.Evicted && errors.As(recErr, &ended) && ended.Reason == store.EndRetentionBudget {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the second session went over the budget, the first is %v and its record reads %v; want evicted, ended with reason %s",
				status, recErr, store.EndRetentionBudget)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, _, err := f.reg.Status(ctx, second); err != nil || status != replay.Live {
		t.Fatalf("the second session is %v (%v), want live", status, err)
	}
	if b, err := f.log.Bounds(ctx, second); err != nil || b.Events == 0 || f.log.Usage() > 3000 {
		t.Fatalf("the second session retains %+v (%v), the log %d bytes; want its events kept within the budget of 3000", b, err, f.log.Usage())
	}
}
