// sweep.go holds the registry's periodic work: ending idle sessions and
// letting go of dead ones (Sweep, Run).

package session

import (
	"context"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// Sweep evicts the sessions idle for longer than IdleTTL, hibernated ones
// included, hibernates those idle for longer than HibernateAfter
// (hibernate.go), lets go of the sessions whose engine session died
// (their next request re-creates them), and applies the event log's age
// limit. Run calls it periodically. It ends with Options.Swept.
func (r *Registry) Sweep(ctx context.Context) {
	r.removeDead()
	if r.opts.IdleTTL > 0 {
		cutoff := r.opts.Now().Add(-r.opts.IdleTTL)
		r.endIdleHibernated(ctx, cutoff)
		var idle []string
		r.mu.RLock()
		for _, l := range r.live {
			if l.idleSince().Before(cutoff) {
				idle = append(idle, l.token)
			}
		}
		r.mu.RUnlock()
		for _, tok := range idle {
			r.End(ctx, tok, store.EndIdle)
		}
	}
	n := r.hibernateIdle(ctx)
	r.log.Sweep(ctx)
	if r.opts.Swept != nil {
		r.opts.Swept(n)
	}
}

// removeDead removes the sessions whose engine session died on its own
// from the registry, without ending them.
func (r *Registry) removeDead() {
	var dead []*Live
	r.mu.Lock()
	for _, l := range r.live {
		if l.dead() {
			r.removeLocked(l)
			dead = append(dead, l)
		}
	}
	r.mu.Unlock()
	for _, l := range dead {
		l.releaseSpans(replay.ReasonEngineEnded)
	}
}

// Run sweeps every interval and, when Options.Lease > 0, renews the
// leases of the sessions this registry holds every RenewInterval (see
// RenewLeases), until ctx is done. Renewals run on their own goroutine, so
// a long sweep cannot delay them past the lease.
func (r *Registry) Run(ctx context.Context, interval time.Duration) {
	var renewing sync.WaitGroup
	if r.opts.Lease > 0 {
		renewing.Go(func() { every(ctx, r.opts.RenewInterval, r.RenewLeases) })
	}
	defer renewing.Wait()
	every(ctx, interval, r.Sweep)
}

// every calls do every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, do func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			do(ctx)
		}
	}
}
