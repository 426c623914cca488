// What the session inspector (admin, /debug/sessions) is told about the
// sessions whose live state a registry holds, and those it hibernated.

package session

import (
	"slices"
	"strings"
	"time"
)

// Snapshot is what a registry knows of one live session at one instant.
type Snapshot struct {
	// Token is the whole session token: callers show only a prefix.
	Token           string
	Generation      uint64
	ProtocolVersion string
	// Owner is this registry's identity; LeaseUntil its lease's expiry
	// (zero: no expiry).
	Owner      string
	LeaseUntil time.Time
	Created    time.Time
	// Idle is the time since the latest request (zero while a connection
	// serves one of its streams).
	Idle time.Duration
	// Calls maps each stream with calls in flight to their number.
	Calls map[uint64]int
	// CallsInFlight is the sum of Calls.
	CallsInFlight int

	used uint64 // recency stamp
}

// Snapshots returns the sessions whose live state this registry holds and
// whose token starts with prefix ("" for all), most recently used first.
func (r *Registry) Snapshots(prefix string) []Snapshot {
	r.mu.RLock()
	lives := make([]*Live, 0, len(r.live))
	for tok, l := range r.live {
		if strings.HasPrefix(tok, prefix) && !l.dead() {
			lives = append(lives, l)
		}
	}
	r.mu.RUnlock()
	now := r.opts.Now()
	out := make([]Snapshot, 0, len(lives))
	for _, l := range lives {
		out = append(out, l.snapshot(now))
	}
	slices.SortFunc(out, func(a, b Snapshot) int {
		switch {
		case a.used > b.used:
			return -1
		case a.used < b.used:
			return 1
		}
		return strings.Compare(a.Token, b.Token)
	})
	return out
}

// snapshot returns l's Snapshot at now.
func (l *Live) snapshot(now time.Time) Snapshot {
	idle := now.Sub(l.idleSince())
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{
		Token: l.token, Generation: l.gen, ProtocolVersion: l.state.ProtocolVersion,
		Owner: l.reg.opts.Owner, LeaseUntil: l.leaseUntil, Created: l.created,
		Idle: max(idle, 0), Calls: make(map[uint64]int, len(l.streams)),
		CallsInFlight: len(l.calls), used: l.used.Load(),
	}
	for _, c := range l.calls {
		s.Calls[c.stream]++
	}
	return s
}

// HibernatedSession is what a registry keeps of a session it hibernated
// (DESIGN.md, "Hibernation"): its token and its latest use.
type HibernatedSession struct {
	// Token is the whole session token: callers show only a prefix.
	Token string
	// LastSeen is the session's latest use; it hibernated HibernateAfter
	// later, at a sweep. Idle is the time since then.
	LastSeen time.Time
	Idle     time.Duration
}

// HibernatedSessions returns the sessions this registry hibernated since
// it started and has not seen woken or ended since whose token starts with
// prefix ("" for all), most recently used first. It reads no record and wakes nothing;
// another replica may have woken one meanwhile.
func (r *Registry) HibernatedSessions(prefix string) []HibernatedSession {
	now := r.opts.Now()
	r.mu.RLock()
	out := make([]HibernatedSession, 0, r.hibernated.len())
	r.hibernated.each(func(k tokenKey, long string, h hibernation) bool {
		tok := long
		switch {
		case tok == "" && k.hasPrefix(prefix):
			tok = k.String()
		case tok == "" || !strings.HasPrefix(tok, prefix):
			return true
		}
		at := time.Unix(0, h.seen)
		out = append(out, HibernatedSession{Token: tok, LastSeen: at, Idle: max(now.Sub(at), 0)})
		return true
	})
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b HibernatedSession) int {
		if c := b.LastSeen.Compare(a.LastSeen); c != 0 {
			return c
		}
		return strings.Compare(a.Token, b.Token)
	})
	return out
}
