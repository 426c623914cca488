// hibernaterule.go holds the rules of hibernation (DESIGN.md,
// "Hibernation") as pure functions: which session the sweep may
// hibernate, and at which generation a hibernated session wakes.
// testdata/hibernate lists their cases.

package session

import (
	"time"

	"github.com/tidemark-mcp/tidemark/engine"
)

// idleness is what the sweep knows of a session when it decides whether
// it hibernates.
type idleness struct {
	initialized bool          // its initialize succeeded
	busy        int           // calls in flight, answers being stored, connections attached, requests being served
	idle        time.Duration // since its last use
	after       time.Duration // Options.HibernateAfter (≤ 0: never)
	engine      engine.Hibernation
	// room: another session needs its room (Options.MaxSessions are
	// live), so how long it has been idle does not matter.
	room bool
}

// mayHibernate reports whether a session may hibernate now: the engine
// lets it, hibernation is on (HibernateAfter > 0), its initialize
// succeeded, nothing of it is busy, and it has been idle for longer than
// HibernateAfter or its room is needed. A session hibernated to make room
// keeps its token, its generation (under an exact engine) and every
// cursor, where an eviction would end it: MaxSessions bounds the live
// sessions, and the idle TTL the hibernated ones.
func mayHibernate(s idleness) bool {
	return s.engine != engine.HibernateNever && s.after > 0 &&
		s.initialized && s.busy == 0 && (s.room || s.idle > s.after)
}

// wakesAtSameGeneration reports whether a session whose record has owner
// and carries the exact mark (hibernatedExact) wakes at its generation
// under an engine that says eng: only a record nobody holds, hibernated
// exactly, under an engine that restores exactly. Otherwise it is
// claimed at generation+1, as after a restart.
func wakesAtSameGeneration(owner string, markedExact bool, eng engine.Hibernation) bool {
	return owner == "" && markedExact && eng == engine.HibernateExact
}
