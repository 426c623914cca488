// Package warngate holds how often a WARN line that repeats is logged: a
// store outage fails every request and every hibernation the same way,
// and one line for each would flood the log with lines that say the same
// thing. The transport gates its 5xx refusal lines with it, keyed by
// refusal reason, and the session registry its hibernation failures,
// keyed by kind of failure, and the generations that cursors above the
// store's ended, keyed by whether the cursor's generation was above.
package warngate

import (
	"sync"
	"time"
)

// Gate lets one WARN line per key through per interval and counts the
// ones it holds back, for the next line of that key to report. A nil
// *Gate lets every line through. Its methods are safe for concurrent use.
type Gate[K comparable] struct {
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[K]*state
}

type state struct {
	last       time.Time // when the last line went through
	suppressed int       // lines held back since
}

// New returns a gate that lets a line of a key through when at least
// interval has passed, by now, since the last one of that key that went
// through; the first line of each key always goes through.
func New[K comparable](interval time.Duration, now func() time.Time) *Gate[K] {
	return &Gate[K]{interval: interval, now: now, keys: make(map[K]*state)}
}

// Pass reports whether a WARN line of key goes through now and, when it
// does, how many of that key's lines were held back since the last one
// that went through (0 for none, and always 0 when ok is false).
func (g *Gate[K]) Pass(key K) (ok bool, suppressed int) {
	if g == nil {
		return true, 0
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.keys[key]
	if st == nil {
		st = &state{}
		g.keys[key] = st
	}
	if !st.last.IsZero() && now.Sub(st.last) < g.interval {
		st.suppressed++
		return false, 0
	}
	suppressed = st.suppressed
	st.last, st.suppressed = now, 0
	return true, suppressed
}
