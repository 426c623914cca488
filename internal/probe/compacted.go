// Check compacted-cursor. Rule (DESIGN.md, "Where the rule comes from"): a cursor below
// the replay floor, whose following events the server no longer retains,
// answers 409 and forces re-initialization; it is never replayed with a
// gap.

package probe

import (
	"context"
	"fmt"
	"net/http"
	"sync"
)

func checkCompacted(ctx context.Context, e *env) Result {
	n := e.cfg.RetentionEvents
	if n <= 0 {
		return Result{Verdict: NA, Observed: "give --retention-events N (the server's per-session retention) to run it"}
	}
	if r, ok := e.noStream(); ok {
		return r
	}
	s, err := e.p.initialize(ctx)
	if err != nil {
		return failed(nil, err, "initialize")
	}
	// The first call's first cursor, then calls until more than n events
	// (each with an ID) have followed it: the cursor's successors are gone.
	var (
		cursor   string
		newer    int
		calls    int
		statuses []int
		mu       sync.Mutex
	)
	runCall := func(i int) error {
		evs, _, err := e.callToEnd(ctx, s, fmt.Sprintf("probe-compacted-%d", i))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		for _, ev := range evs {
			if ev.id == "" {
				continue
			}
			if cursor == "" {
				cursor = ev.id
				continue
			}
			newer++
		}
		return nil
	}
	if err := runCall(0); err != nil {
		return failed(nil, err, "tools/call")
	}
	if cursor == "" {
		return Result{Verdict: Fail, Observed: "the server's events carry no IDs"}
	}
	// Calls run a few at a time, but never so many that their events
	// together near the retention: a reader then falls below the floor
	// while it reads, which a correct server answers by ending its stream,
	// and the check would blame the server for it.
	parallel := max(1, min(4, n/(2*len(e.base.events))))
	for i := 1; newer <= n+1; i += parallel {
		if calls > 10000 {
			return Result{Verdict: Fail, Observed: fmt.Sprintf("%d calls did not produce %d events", calls, n+2)}
		}
		var wg sync.WaitGroup
		errs := make([]error, parallel)
		for j := range parallel {
			wg.Go(func() { errs[j] = runCall(i + j) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return failed(nil, err, "tools/call %d", calls+1)
			}
		}
	}
	rs, err := s.resume(ctx, cursor)
	what := fmt.Sprintf("a cursor followed by %d newer events (retention %d)", newer, n)
	return refusalResult(ctx, statuses, rs, err, what,
		func(s int) bool { return s == http.StatusConflict },
		"want 409: the events after the cursor are compacted (if the server retains more than --retention-events, give its real retention)")
}
