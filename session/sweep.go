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
	lives := r.removeDead(r.lives())
	if r.opts.IdleTTL > 0 {
		cutoff := r.opts.Now().Add(-r.opts.IdleTTL)
		r.endIdleHibernated(ctx, cutoff)
		for _, l := range lives {
			if l.idleSince().Before(cutoff) {
				r.End(ctx, l.token, store.EndIdle)
			}
		}
	}
	n := r.hibernateIdle(ctx, lives)
	r.log.Sweep(ctx)
	if r.opts.Swept != nil {
		r.opts.Swept(n)
	}
}

// lives returns the sessions in the registry. The read lock is held only
// while their pointers are copied: the sweep and the lease renewals then
// look at each session (its lock, its engine session's Done) without the
// registry's lock, which every request takes, so a pass over 100,000
// sessions (about 0.7 µs each) does not hold requests up for tens of
// milliseconds.
func (r *Registry) lives() []*Live {
	r.mu.RLock()
	defer r.mu.RUnlock()
	lives := make([]*Live, 0, len(r.live))
	for _, l := range r.live {
		lives = append(lives, l)
	}
	return lives
}

// removeDead removes from the registry, without ending them, those of
// lives whose engine session died on its own, and returns the others
// (reusing lives' array). An engine session that died stays dead, so the
// registry's lock is taken only to remove the ones found, and only when
// there are any.
func (r *Registry) removeDead(lives []*Live) []*Live {
	var dead []*Live
	alive := lives[:0]
	for _, l := range lives {
		if l.dead() {
			dead = append(dead, l)
		} else {
			alive = append(alive, l)
		}
	}
	if len(dead) == 0 {
		return alive
	}
	removed := dead[:0]
	r.mu.Lock()
	for _, l := range dead {
		if r.removeLocked(l) {
			removed = append(removed, l)
		}
	}
	r.mu.Unlock()
	for _, l := range removed {
		l.releaseSpans(replay.ReasonEngineEnded)
	}
	return alive
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
