// export_test.go gives the tests of package session_test what the
// package does not export.

package session

import (
	"time"

	"github.com/tidemark-mcp/tidemark/engine"
)

// OutboxOf returns l as its engine session sees it, for tests that send as
// an engine does.
func OutboxOf(l *Live) engine.Outbox { return (*outbox)(l) }

// MayHibernate is mayHibernate, for the cases of testdata/hibernate.
func MayHibernate(initialized bool, busy, served int, idle, after time.Duration, eng engine.Hibernation, room, handover bool, failures int, sinceFailure time.Duration) bool {
	return mayHibernate(idleness{initialized: initialized, busy: busy, served: served, idle: idle, after: after, engine: eng, room: room, handover: handover, failures: failures, sinceFailure: sinceFailure})
}

// HibernateRetry is hibernateRetry, for the cases of testdata/hibernate.
func HibernateRetry(failures int, after time.Duration) time.Duration {
	return hibernateRetry(failures, after)
}

// KeepsAwake is keepsAwake, for the cases of testdata/hibernate.
func KeepsAwake(err error) bool { return keepsAwake(err) }

// WakesAtSameGeneration is wakesAtSameGeneration, for the cases of
// testdata/hibernate.
func WakesAtSameGeneration(owner string, markedExact bool, eng engine.Hibernation) bool {
	return wakesAtSameGeneration(owner, markedExact, eng)
}

// Idle reports whether nothing of l is busy: no call in flight, no answer
// being stored, no connection attached, no request being served.
func Idle(l *Live) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)+l.storing+l.attached+len(l.holds) == 0
}

// LiveRoom returns the most entries the map of live sessions has held
// since it was last made anew (compactLocked).
func (r *Registry) LiveRoom() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.liveMax
}

// LedgerKey is ledgerKey, the member of a hibernated record's State that
// holds the live generation's ledger.
const LedgerKey = ledgerKey
