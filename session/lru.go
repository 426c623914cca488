package session

import "container/heap"

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

func (h recency) Len() int           { return len(h) }
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
