// handover.go holds the handover of a graceful shutdown (DESIGN.md,
// "Hibernation"): the sessions a process holds are hibernated exactly
// before it exits, so that the next process, or another replica, wakes
// each at its generation and every cursor of it replays, instead of
// claiming generation+1.

package session

import (
	"context"

	"github.com/tidemark-mcp/tidemark/engine"
)

// handsOver reports whether this registry hands its sessions over at a
// graceful shutdown: its store outlives the process (Options.HandOver)
// and its engine restores state exactly (engine.HibernateExact).
func (r *Registry) handsOver() bool {
	return r.opts.HandOver && r.hib == engine.HibernateExact
}

// HandOver hibernates every session this registry holds whose initialize
// succeeded and that has no call in flight, no answer being stored, no
// connection attached and no request being served, however long it has
// been idle and whatever Options.HibernateAfter is: each wakes at its
// generation in the next process that serves it, where a session that
// Close ends is claimed at generation+1 and its cursors refused. It does
// nothing unless the registry hands over (Options.HandOver, under an
// engine that hibernates exactly). Call it once no new call is taken and
// the streams are closed (transport.Handler.Drain and Shutdown), and
// before Close. It stops starting hibernations once ctx is done; one
// started then fails with ctx's error and its generation ends, as Close
// would end it. It returns the number of sessions handed over, whose
// hibernation the store kept, and the number of live sessions left,
// which Close ends: each session handed over logs "session hibernated"
// at Debug only, so a process with many sessions writes no line per
// session in its last seconds, and the caller logs these two counts.
func (r *Registry) HandOver(ctx context.Context) (handed, left int) {
	if r.handsOver() {
		handed = r.hibernateAll(ctx, r.lives(), r.opts.Now(), hibHandOver)
	}
	return handed, r.Len()
}
