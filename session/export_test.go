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
func MayHibernate(initialized bool, busy int, idle, after time.Duration, eng engine.Hibernation) bool {
	return mayHibernate(idleness{initialized: initialized, busy: busy, idle: idle, after: after, engine: eng})
}

// WakesAtSameGeneration is wakesAtSameGeneration, for the cases of
// testdata/hibernate.
func WakesAtSameGeneration(owner string, markedExact bool, eng engine.Hibernation) bool {
	return wakesAtSameGeneration(owner, markedExact, eng)
}
