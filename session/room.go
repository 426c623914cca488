// room.go holds the room for sessions (Options.MaxSessions): reserving it
// for a session about to start, and the recency order in which sessions
// are evicted to make it.

package session

import (
	"container/heap"
	"context"
	"fmt"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// reserve takes room for one more session, whose start follows (start
// gives the room back if it fails): when MaxSessions sessions are held or
// being started, it makes room first. A session whose engine session died
// leaves without ending (its next request re-creates it); otherwise the
// least recently used session with no call in flight is evicted (ended,
// store.EndCapacity). Ending a busy one would cut a client mid-call for
// another client's benefit: when every session is busy, reserve fails
// with engine.ErrCapacity. The victim leaves the registry, and its room
// passes to the caller, in one step under mu, so concurrent callers each
// evict a session of their own and the cap is never exceeded.
func (r *Registry) reserve(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if len(r.live)+r.reserved < r.opts.MaxSessions {
		r.reserved++
		r.mu.Unlock()
		return nil
	}
	victim, dead := r.lru.victim()
	if victim == nil {
		held, starting := len(r.live), r.reserved
		r.mu.Unlock()
		return fmt.Errorf("session: %w: all %d sessions have calls in flight, %d starting",
			engine.ErrCapacity, held, starting)
	}
	if !dead && r.hibernates() && victim.beginHibernate(r.opts.Now(), true) {
		// Hibernated rather than ended: its client loses nothing.
		r.removeLocked(victim)
		r.reserved++
		r.starting[victim.token] = make(chan struct{})
		r.mu.Unlock()
		r.hibernate(context.WithoutCancel(ctx), victim)
		return nil
	}
	r.removeLocked(victim)
	r.reserved++
	if !dead {
		// From now until its record ends, the victim answers as ended.
		r.ending[victim.token] = &store.EndedError{Token: victim.token, Reason: store.EndCapacity, UserID: victim.userID}
	}
	r.mu.Unlock()
	if dead {
		victim.releaseSpans(replay.ReasonEngineEnded)
	} else {
		defer r.endDone(victim.token)
		// The victim's token answers 404 at once; its engine session
		// closes in the background: the creator does not wait for another
		// session's teardown (a gateway's subprocess may take its stop
		// grace).
		err := r.endRecord(ctx, victim.token, store.EndCapacity)
		victim.logger.Info("session ended", "reason", string(store.EndCapacity))
		if err == nil {
			r.recordEnded(victim, store.EndCapacity)
		}
		r.closeInBackground(victim, replay.ReasonCapacity)
	}
	return nil
}

// unreserve gives back room reserve took for a session that did not start.
func (r *Registry) unreserve() {
	r.mu.Lock()
	r.reserved--
	r.mu.Unlock()
}

// removeLocked takes l out of the registry if it is the live state held
// for its token. r.mu must be held.
func (r *Registry) removeLocked(l *Live) bool {
	if r.live[l.token] != l {
		return false
	}
	delete(r.live, l.token)
	r.lru.remove(l)
	return true
}

// unpark makes l a candidate for eviction again once its last call in
// flight ended (see recency), if the registry still holds it.
func (r *Registry) unpark(l *Live) {
	r.mu.Lock()
	if r.live[l.token] == l {
		r.lru.add(l)
	}
	r.mu.Unlock()
}

// park reports whether a call is in flight on l: such a session is not
// evicted to make room for another. If so it marks l parked: when its last
// call ends, it becomes a candidate for eviction again (see recency). An
// open stream alone does not make a session busy: clients keep their
// standalone GET stream open for the session's whole life, and counting
// it would lock new sessions out for good once MaxSessions clients hold
// one.
func (l *Live) park() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) == 0 {
		return false
	}
	l.parked = true
	return true
}

// recency is the order in which sessions are evicted for room
// (Options.MaxSessions): a min-heap of the sessions this registry holds, by
// a recency stamp (Registry.clock) that each use of a session raises.
//
// A use writes only the session's atomic stamp (Live.used), so requests
// share nothing: the heap keeps the stamp each session had when it was
// last placed (Live.lruKey), which is never above its current one. The
// top of the heap is therefore the least recently used session once its
// key equals its stamp; an outdated top is placed again by its current
// stamp (victim). Each use costs at most one such placing, at the next
// eviction, so finding the least recently used session costs O(log n)
// per use, never a scan of every session.
//
// A session with a call in flight is not evicted: victim takes it out of
// the heap (Live.parked), and it comes back when its last call ends
// (Registry.unpark), so a full registry whose sessions are all busy fails
// fast instead of looking at each of them on every creation.
//
// recency is guarded by Registry.mu.
type recency []*Live

func (h recency) Len() int { return len(h) }

func (h recency) Less(i, j int) bool { return h[i].lruKey < h[j].lruKey }

func (h recency) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].lruIndex = i
	h[j].lruIndex = j
}

// Push and Pop are for container/heap only; use add and remove.
func (h *recency) Push(x any) {
	l := x.(*Live)
	l.lruIndex = len(*h)
	*h = append(*h, l)
}

func (h *recency) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.lruIndex = -1
	return l
}

// add places l by its current stamp, unless it is placed already.
func (h *recency) add(l *Live) {
	if l.lruIndex >= 0 {
		return
	}
	l.lruKey = l.used.Load()
	heap.Push(h, l)
}

// remove takes l out of the heap, if it is in it.
func (h *recency) remove(l *Live) {
	if l.lruIndex >= 0 {
		heap.Remove(h, l.lruIndex)
	}
}

// victim returns the least recently used session that is dead (then dead
// is true) or has no call in flight, taken out of the heap, or nil when
// there is none. Busy sessions it meets leave the heap until their calls
// end (Live.park).
func (h *recency) victim() (l *Live, dead bool) {
	for len(*h) > 0 {
		l := (*h)[0]
		if l.dead() {
			heap.Pop(h)
			return l, true
		}
		if cur := l.used.Load(); cur != l.lruKey {
			l.lruKey = cur
			heap.Fix(h, 0)
			continue
		}
		heap.Pop(h)
		if !l.park() {
			return l, false
		}
	}
	return nil, false
}
