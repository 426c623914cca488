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

// leaseRules are the lease and takeover rules of one registry, whose
// identity is owner and whose leases last ttl (Options.Owner,
// Options.Lease; ttl 0: no leases). They are pure: each decides from a
// record, the time and the store's answers, and the registry carries the
// decision out (ownership.go, recreate.go). testdata/lease drives them.
type leaseRules struct {
	owner string
	ttl   time.Duration
}

// grant returns the expiry of a lease this registry takes or renews at
// now: now+ttl, or zero (no expiry) without leases.
func (lr leaseRules) grant(now time.Time) time.Time {
	if lr.ttl <= 0 {
		return time.Time{}
	}
	return now.Add(lr.ttl)
}

// remote returns a *RemoteError naming rec's owner if another owner holds
// rec's live state under a lease that has not lapsed at now, else nil:
// this registry may then claim the session. A lease lapses exactly at its
// expiry. A record whose LeaseUntil is zero and whose owner is someone
// else belongs to a process without leases (a previous boot on a durable
// store): it is never remote.
func (lr leaseRules) remote(rec store.Record, now time.Time) *RemoteError {
	if rec.Owner == lr.owner || rec.LeaseUntil.IsZero() || !rec.LeaseUntil.After(now) {
		return nil
	}
	return &RemoteError{Token: rec.Token, Owner: rec.Owner, Generation: rec.Generation, LeaseUntil: rec.LeaseUntil}
}

// mustRenew reports whether this registry renews the lease of a
// generation it holds, lapsing at until by the last renewal, before that
// generation serves a request at now: only with leases, and only once the
// lease has lapsed by the local clock (the process was paused, or its
// renewals failed), since another replica may have taken the session over.
func (lr leaseRules) mustRenew(until, now time.Time) bool {
	return lr.ttl > 0 && !now.Before(until)
}

// takeoverReason returns why the previous generation of the session is
// over when this registry claims the next one from prev, the record it
// read: engineEnded (this process saw that generation's engine session
// end on its own) gives engine_ended; another owner's lease that lapsed
// gives lease_expired; otherwise the owner was a process without leases
// that is gone (owner_gone).
func (lr leaseRules) takeoverReason(prev store.Record, engineEnded bool) replay.Reason {
	switch {
	case engineEnded:
		return replay.ReasonEngineEnded
	case prev.Owner != lr.owner && !prev.LeaseUntil.IsZero():
		return replay.ReasonLeaseExpired
	}
	return replay.ReasonOwnerGone
}

// release returns the expiry that makes this registry's leases lapse at
// once when it closes at now, so that other replicas take its sessions
// over at their next request instead of a lease later.
func (lr leaseRules) release(now time.Time) time.Time { return now }

// lostReason returns the log reason for a renewal or append error that
// means this registry's generation is over (replay.ReasonFenced,
// replay.ReasonGenerationLost or replay.ReasonSessionNotFound), or "" for
// a transient error.
func lostReason(err error) replay.Reason {
	switch {
	case errors.Is(err, store.ErrFenced):
		return replay.ReasonFenced
	case errors.Is(err, store.ErrLost):
		return replay.ReasonGenerationLost
	case errors.Is(err, store.ErrEnded), errors.Is(err, store.ErrNotFound):
		return replay.ReasonSessionNotFound
	}
	return ""
}
