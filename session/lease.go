// lease.go holds the lease rules of a fleet.

package session

import (
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// Leases (DESIGN.md, "Fleet mode"): with Options.Lease > 0, a registry's
// claim on a session's live state lasts until store.Record.LeaseUntil, and
// Run renews it every RenewInterval. Registries sharing one store (the
// replicas of a fleet) read the record: a session whose owner's lease has
// not lapsed is served by that owner (Get returns a *RemoteError and the
// transport forwards the request); one whose lease has lapsed is taken
// over at generation+1. The generation is the fencing token: the store
// refuses every write of an older generation, so a paused or partitioned
// old owner (a zombie) cannot store anything after a takeover, whatever
// the clocks say. Clocks only decide when a takeover may happen, so
// replicas' clocks must agree to well within the lease (NTP).

// DefaultRenewDivisor sets the default renew interval: Lease divided by it.
const DefaultRenewDivisor = 3

// ErrRemote is wrapped by Get's error when another owner holds the
// session's live state under a lease that has not lapsed; the error is a
// *RemoteError naming it. The caller reaches that owner (the transport
// forwards the request) or waits until the lease lapses.
var ErrRemote = errors.New("session: live state held by another owner")

// RemoteError is returned, wrapping ErrRemote, by Get for a session whose
// live state another owner holds.
type RemoteError struct {
	// Token is the session token.
	Token string
	// Owner is the owner's identity (its Options.Owner, the replica ID).
	Owner string
	// Generation is the generation the owner holds.
	Generation uint64
	// LeaseUntil is when the owner's lease lapses unless renewed; after it
	// (by this process's clock) the next Get takes the session over.
	LeaseUntil time.Time
}

// Error names the session by its token prefix, its generation, the owner
// holding it and when that owner's lease lapses.
func (e *RemoteError) Error() string {
	return fmt.Sprintf("session %s gen %d: held by owner %q until %s: %s",
		store.Prefix(e.Token), e.Generation, e.Owner, e.LeaseUntil.Format(time.RFC3339Nano), ErrRemote)
}

// Unwrap returns ErrRemote.
func (e *RemoteError) Unwrap() error { return ErrRemote }

// leaseUntil returns the expiry of a lease taken now: zero (no expiry)
// when Lease is 0.
func (r *Registry) leaseUntil(now time.Time) time.Time {
	if r.opts.Lease <= 0 {
		return time.Time{}
	}
	return now.Add(r.opts.Lease)
}

// remote returns a *RemoteError if rec's live state is held by another
// owner under a lease that has not lapsed at now, else nil. A record whose
// LeaseUntil is zero and whose owner is someone else belongs to a process
// without leases (a previous boot on a durable store): it is never remote.
func (r *Registry) remote(rec store.Record, now time.Time) error {
	if rec.Owner == r.opts.Owner || rec.LeaseUntil.IsZero() || !rec.LeaseUntil.After(now) {
		return nil
	}
	return &RemoteError{Token: rec.Token, Owner: rec.Owner, Generation: rec.Generation, LeaseUntil: rec.LeaseUntil}
}

// lostReason returns the log reason for a renewal or append error that
// means this generation is over for this process (replay.ReasonFenced or
// replay.ReasonSessionNotFound), or "" for a transient error.
func lostReason(err error) replay.Reason {
	switch {
	case errors.Is(err, store.ErrFenced):
		return replay.ReasonFenced
	case errors.Is(err, store.ErrEnded), errors.Is(err, store.ErrNotFound):
		return replay.ReasonSessionNotFound
	}
	return ""
}
