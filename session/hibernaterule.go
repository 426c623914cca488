// hibernaterule.go holds the rules of hibernation (DESIGN.md,
// "Hibernation") as pure functions: which session the sweep may
// hibernate, and at which generation a hibernated session wakes.
// testdata/hibernate lists their cases.

package session

import (
	"errors"
	"time"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/store"
)

// idleness is what the sweep knows of a session when it decides whether
// it hibernates.
type idleness struct {
	initialized bool // its initialize succeeded
	busy        int  // calls in flight, answers being stored, connections attached, requests being served
	// served: of busy, the requests already served (their contexts are
	// done) whose hold has not been released yet (Live.unhold runs in a
	// goroutine of its own).
	served int
	idle   time.Duration // since its last use
	after  time.Duration // Options.HibernateAfter (≤ 0: never)
	engine engine.Hibernation
	// room: another session needs its room (Options.MaxSessions are
	// live), so how long it has been idle does not matter.
	room bool
	// handover: the process shuts down and hands the session over
	// (Registry.HandOver), so neither how long it has been idle nor
	// HibernateAfter nor an earlier refusal matters, but the engine must
	// restore its state exactly: the handover is for waking at the same
	// generation.
	handover bool
	// failures counts its hibernations in a row that the store refused
	// while it stayed awake (keepsAwake), and sinceFailure is the time
	// since the latest of them.
	failures     int
	sinceFailure time.Duration
}

// mayHibernate reports whether a session may hibernate now: the engine
// lets it, hibernation is on (HibernateAfter > 0), its initialize
// succeeded, nothing of it is busy, and it has been idle for longer than
// HibernateAfter or its room is needed. The sweep waits
// hibernateRetry(failures, after) after a hibernation the store refused
// before it tries that session again; making room does not wait. A
// session hibernated to make room
// keeps its token, its generation (under an exact engine) and every
// cursor, where an eviction would end it: MaxSessions bounds the live
// sessions, and the idle TTL the hibernated ones.
//
// At a graceful shutdown (handover) only the engine's exactness, the
// initialize and busy count, less the requests already served: the HTTP
// server has returned from every handler by then, and a hold whose
// release is late must not close a session that nothing uses (a client
// whose standalone GET stream the shutdown just ended). A session handed
// over wakes at its generation in the next process, where one closed
// claims generation+1. The sweep and making room wait for the release,
// which starts the session's idle time.
func mayHibernate(s idleness) bool {
	if !s.initialized {
		return false
	}
	if s.handover {
		return s.busy-s.served == 0 && s.engine == engine.HibernateExact
	}
	if s.busy != 0 {
		return false
	}
	backingOff := !s.room && s.failures > 0 && s.sinceFailure < hibernateRetry(s.failures, s.after)
	return s.engine != engine.HibernateNever && s.after > 0 &&
		(s.room || s.idle > s.after) && !backingOff
}

// hibernateRetryMax bounds the wait of hibernateRetry: a session whose
// hibernations keep failing through a long outage is tried again at
// least this often (a minute), so it hibernates within a minute of the
// store's return.
const hibernateRetryMax = time.Minute

// hibernateRetry is how long the sweep waits, after the failures-th
// hibernation in a row that the store refused, before it tries the
// session again: after (Options.HibernateAfter) doubled for each failure
// but the first, at most hibernateRetryMax.
func hibernateRetry(failures int, after time.Duration) time.Duration {
	d := max(after, 0)
	for i := 1; i < failures && d < hibernateRetryMax; i++ {
		d *= 2
	}
	return min(d, hibernateRetryMax)
}

// keepsAwake reports whether a session whose hibernation failed with err
// stays awake at its generation, to hibernate at a later sweep: when the
// store was unavailable (store.ErrUnavailable). Hibernation is an
// optimisation: such a session has lost nothing, its state and its
// events being what they were, so a store outage must not end its
// generation (DESIGN.md, "Hibernation"). Its generation ends when its
// events could not all be stored (store.ErrLost: its log has a hole), and
// it is not this process's to keep when the store says another owner
// holds it or it ended (store.ErrFenced, store.ErrEnded,
// store.ErrNotFound).
func keepsAwake(err error) bool {
	return errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrLost) &&
		!errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrEnded) && !errors.Is(err, store.ErrNotFound)
}

// wakesAtSameGeneration reports whether a session whose record has owner
// and carries the exact mark (hibernatedExact) wakes at its generation
// under an engine that says eng: only a record nobody holds, hibernated
// exactly, under an engine that restores exactly. Otherwise it is
// claimed at generation+1, as after a restart.
func wakesAtSameGeneration(owner string, markedExact bool, eng engine.Hibernation) bool {
	return owner == "" && markedExact && eng == engine.HibernateExact
}
