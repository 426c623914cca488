// room.go holds the room for sessions (Options.MaxSessions): reserving it
// for a session about to start, and the recency order in which sessions
// give it up: hibernated when they can, evicted when they cannot, never
// taken while busy.

package session

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// reserve takes room for one more session, whose start follows (start
// gives the room back if it fails): when MaxSessions sessions are held or
// being started, it makes room first, from the least recently used
// session that is not busy (busyForRoomLocked). A session whose engine
// session died leaves without ending (its next request re-creates it); a
// session that can hibernate hibernates, keeping its token, generation
// and cursors (DESIGN.md, "Hibernation"); only one that cannot is ended
// (store.EndCapacity); one whose hibernation the store refuses while
// unavailable stays awake, and reserve fails with the store's error. A
// busy session is never taken: ending it, or
// closing its engine session under a request being served, would cut a
// client mid-use for another client's benefit. When every session is
// busy, reserve fails with engine.ErrCapacity, and the request that needs
// the room is refused (503 capacity) while nothing else changes. The
// victim leaves the registry, and its room passes to the caller, in one
// step under mu, so concurrent callers each take a session of their own
// and the cap is never exceeded; a session being started or woken is not
// in the registry until its request holds it (start), so no caller takes
// a session another has just woken.
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
	victim, how := r.lru.victim(r.opts.Now())
	switch how {
	case noVictim:
		held, starting := len(r.live), r.reserved
		r.mu.Unlock()
		return fmt.Errorf("session: %w: all %d sessions are busy (a call in flight, a stream open or a request being served), %d starting",
			engine.ErrCapacity, held, starting)
	case victimHibernates:
		// Hibernated rather than ended: its client loses nothing.
		r.removeLocked(victim)
		r.reserved++
		r.starting[victim.token] = make(chan struct{})
		r.mu.Unlock()
		if _, awake := r.hibernate(context.WithoutCancel(ctx), victim, hibRoom); awake != nil {
			// The store refused while unavailable: the victim stays
			// awake at its generation, and this request gets no room.
			r.unreserve()
			return fmt.Errorf("session: no room: the least recently used idle session could not hibernate: %w", awake)
		}
		return nil
	}
	r.removeLocked(victim)
	r.reserved++
	if how == victimEnds {
		// From now until its record ends, the victim answers as ended.
		r.ending[victim.token] = &store.EndedError{Token: victim.token, Reason: store.EndCapacity, UserID: victim.userID}
	}
	r.mu.Unlock()
	if how == victimDead {
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

// busyForRoomLocked reports whether l must keep its room: a call is in
// flight on it or its answer is being stored (ending the session then
// would lose an answer the server gave: its client's resume would answer
// request_lost), or, when the registry hibernates sessions, anything else
// keeps it from hibernating (a connection attached, a request being
// served: beginHibernate). Making room
// hibernates a session when it can, so one that cannot hibernate now
// would be ended instead, cutting its client mid-use; it waits until it
// is idle (unparkLocked). Without hibernation an open stream alone does
// not keep the room: clients keep their standalone GET stream open for
// the session's whole life, and counting it would lock new sessions out
// for good once MaxSessions clients hold one; the eviction ends that
// stream. With hibernation such a client's session holds its room while
// the stream is open, and a new session is refused (503 capacity) when
// every session is busy. l.mu must be held.
func (l *Live) busyForRoomLocked() bool {
	return len(l.calls)+l.storing > 0 || l.reg.hibernates() && l.attached+len(l.holds) > 0
}

// unparkLocked reports whether l was parked (recency.victim) and is no
// longer busy (busyForRoomLocked), and marks it not parked: the caller
// then calls reg.unpark(l), with l.mu released, so that l is a candidate
// for the room again. l.mu must be held.
func (l *Live) unparkLocked() bool {
	if !l.parked || l.busyForRoomLocked() {
		return false
	}
	l.parked = false
	return true
}

// roomBy says how a session chosen by recency.victim gives its room.
type roomBy int

const (
	noVictim         roomBy = iota // every session is busy
	victimDead                     // its engine session died: it leaves without ending
	victimHibernates               // it hibernates (marked by beginHibernate)
	victimEnds                     // it cannot hibernate: it ends (store.EndCapacity)
)

// giveRoom decides, under l.mu, how l gives its room to another session
// at now: not at all when it is busy (then it is marked parked, and
// unparkLocked hands it back), by hibernating when it may
// (beginHibernateLocked marks it hibernating in the same step, so no
// request holds it in between), else by ending: the registry does not
// hibernate, or l's initialize has not succeeded.
func (l *Live) giveRoom(now time.Time) roomBy {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busyForRoomLocked() {
		l.parked = true
		return noVictim
	}
	if l.reg.hibernates() && l.beginHibernateLocked(now, hibRoom) {
		return victimHibernates
	}
	return victimEnds
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
// A busy session (Live.busyForRoomLocked) is not taken: victim takes it
// out of the heap (Live.parked), and it comes back when it is busy no
// more (Registry.unpark), so a full registry whose sessions are all busy
// fails fast instead of looking at each of them on every creation.
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

// victim returns the least recently used session that is dead or not
// busy, taken out of the heap, and how it gives its room at now
// (Live.giveRoom), or noVictim when there is none. Busy sessions it meets
// leave the heap until they are busy no more (Live.parked).
func (h *recency) victim(now time.Time) (*Live, roomBy) {
	for len(*h) > 0 {
		l := (*h)[0]
		if l.dead() {
			heap.Pop(h)
			return l, victimDead
		}
		if cur := l.used.Load(); cur != l.lruKey {
			l.lruKey = cur
			heap.Fix(h, 0)
			continue
		}
		heap.Pop(h)
		if how := l.giveRoom(now); how != noVictim {
			return l, how
		}
	}
	return nil, noVictim
}
