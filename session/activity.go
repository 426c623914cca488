// activity.go holds a session's use as the registry sees it: the recency
// stamp that orders eviction, and the activity that keeps a session from
// being evicted as idle.

package session

import (
	"context"
	"sync"
	"time"
)

// markUsed raises l's recency stamp to t.
func (l *Live) markUsed(t uint64) {
	for {
		old := l.used.Load()
		if old >= t || l.used.CompareAndSwap(old, t) {
			return
		}
	}
}

// Touch records activity now. The store learns of it at most every quarter
// of the idle TTL, so that a later process sees recent activity.
func (l *Live) Touch() {
	now := l.reg.opts.Now()
	l.mu.Lock()
	l.lastSeen = now
	write := l.reg.opts.IdleTTL > 0 && now.Sub(l.storedSeen) > l.reg.opts.IdleTTL/4
	if write {
		l.storedSeen = now
	}
	l.mu.Unlock()
	if write {
		l.reg.st.Touch(context.Background(), l.token, now)
	}
}

// Attach records that a connection serves one of the session's streams; a
// session with an attached connection is not idle, and does not give its
// room to another while it can hibernate (busyForRoomLocked). Call the
// returned function when the connection ends.
func (l *Live) Attach() (detach func()) {
	l.mu.Lock()
	l.attached++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.attached--
			l.lastSeen = l.reg.opts.Now()
			unpark := l.unparkLocked()
			l.mu.Unlock()
			if unpark {
				l.reg.unpark(l)
			}
		})
	}
}

func (l *Live) idleSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attached > 0 {
		return l.reg.opts.Now()
	}
	return l.lastSeen
}
