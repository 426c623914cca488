// lease.go holds the lease rules of a replica, the error that names a
// session's remote owner, and the renewal of many leases at once.

package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// DefaultRenewDivisor sets a registry's default renew interval: the lease
// TTL divided by it, so that two renewals in a row may fail before the
// lease lapses.
const DefaultRenewDivisor = 3

// ErrRemote is wrapped by a lookup's error when another owner holds the
// session's live state under a lease that has not lapsed; the error is a
// *RemoteError naming it. The caller reaches that owner (Router forwards
// the request) or waits until the lease lapses.
var ErrRemote = errors.New("fleet: live state held by another owner")

// RemoteError is returned, wrapping ErrRemote, by a lookup of a session
// whose live state another owner holds (session.Registry.Get).
type RemoteError struct {
	// Token is the session token.
	Token string
	// Owner is the owner's identity (its replica ID).
	Owner string
	// Generation is the generation the owner holds.
	Generation uint64
	// LeaseUntil is when the owner's lease lapses unless renewed; after it
	// (by this process's clock) the next lookup takes the session over.
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

// Leases are the lease and takeover rules of one replica, whose identity
// is Owner (its replica ID, written as store.Record.Owner) and whose
// leases last TTL (0: no leases, for one process alone on its store).
// Every method is pure: it decides from a record, the time and the
// store's answers, and the caller carries the decision out
// (session.Registry claims, renews and drops generations; Router waits and
// forwards). testdata/lease drives them.
type Leases struct {
	Owner string
	TTL   time.Duration
}

// Grant returns the expiry of a lease taken or renewed at now: now+TTL,
// or zero (no expiry) without leases.
func (l Leases) Grant(now time.Time) time.Time {
	if l.TTL <= 0 {
		return time.Time{}
	}
	return now.Add(l.TTL)
}

// Remote returns a *RemoteError naming rec's owner if another owner holds
// rec's live state at now, else nil: this replica may then claim the
// session. Another owner holds it while its lease has not lapsed, and,
// when this replica saw its store stop answering (since, from
// Contact.Answering, is when it answered again), until one lease TTL
// after since as well: a lease that lapsed while nobody could renew it
// says nothing of its owner, which renews it once its own renewals reach
// the store again (DESIGN.md, "Fleet mode"). The RemoteError's LeaseUntil
// is the later of the two. A lease lapses exactly at its expiry. A
// record whose LeaseUntil is zero and whose owner is someone else belongs
// to a process without leases (a previous boot on a durable store): it is
// never remote.
func (l Leases) Remote(rec store.Record, now, since time.Time) *RemoteError {
	if rec.Owner == l.Owner || rec.LeaseUntil.IsZero() {
		return nil
	}
	until := rec.LeaseUntil
	if !since.IsZero() && l.TTL > 0 {
		until = latest(until, since.Add(l.TTL))
	}
	if !until.After(now) {
		return nil
	}
	return &RemoteError{Token: rec.Token, Owner: rec.Owner, Generation: rec.Generation, LeaseUntil: until}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Contact is what a replica has seen of its store's answers, for the
// takeover rule (Remote): Leases.Heard folds each call's outcome into
// it, and Answering gives Remote's since. The zero Contact has seen no
// break.
type Contact struct {
	// Last is when the store last answered; zero: not yet.
	Last time.Time
	// Since is when the store answered again after the last break this
	// replica saw; zero: it saw none.
	Since time.Time
	// Down says the last call went unanswered: the break goes on.
	Down bool
}

// Heard returns c once the store answered a call at now (answered), or
// did not (store.ErrUnavailable, a timeout). A break is a call left
// unanswered, or more than one lease TTL between two answers (this
// process was paused, or its calls hung: it cannot tell what the store
// did meanwhile); the answer that ends it starts Since. A replica calls
// the store at least every renew interval (session.Registry.RenewLeases),
// so that an outage longer than that is seen as a break.
func (l Leases) Heard(c Contact, answered bool, now time.Time) Contact {
	if !answered {
		c.Down = true
		return c
	}
	if c.Down || (!c.Last.IsZero() && l.TTL > 0 && now.Sub(c.Last) > l.TTL) {
		c.Since = now
	}
	c.Down = false
	c.Last = latest(c.Last, now)
	return c
}

// Answering returns since for Remote at now: when the store answered
// again after the last break this replica saw (zero: none seen); now
// while the break goes on, since a record read now is the store's first
// answer.
func (c Contact) Answering(now time.Time) time.Time {
	if c.Down {
		return now
	}
	return c.Since
}

// MustRenew reports whether this replica renews the lease of a generation
// it holds, lapsing at until by the last renewal, before that generation
// serves a request or takes a message at now: only with leases, and only
// once the lease has lapsed by the local clock (the process was paused, or
// its renewals failed), since another replica may have taken the session
// over meanwhile.
func (l Leases) MustRenew(until, now time.Time) bool {
	return l.TTL > 0 && !now.Before(until)
}

// TakeoverReason returns why the previous generation of the session is
// over when this replica claims the next one from prev, the record it
// read: endedHere, when this process saw that generation end itself
// (engine_ended: its engine session ended on its own; generation_lost:
// its events were not stored, and this process dropped it), non-empty;
// else another owner's lease that lapsed gives lease_expired; otherwise
// the owner was a process without leases, or an earlier process with this
// replica's ID, that is gone (owner_gone).
func (l Leases) TakeoverReason(prev store.Record, endedHere replay.Reason) replay.Reason {
	switch {
	case endedHere != "":
		return endedHere
	case prev.Owner != l.Owner && !prev.LeaseUntil.IsZero():
		return replay.ReasonLeaseExpired
	}
	return replay.ReasonOwnerGone
}

// Release returns the expiry that makes this replica's leases lapse at
// once when it closes at now, so that other replicas take its sessions
// over at their next request instead of a lease later.
func (l Leases) Release(now time.Time) time.Time { return now }

// Waiting is what a replica does about a request it forwarded to a
// session's owner and whose answer has not begun (Leases.Await).
type Waiting int

const (
	// WaitOn: the owner holds its lease; the request waits on, until the
	// time Await gives, when Await is asked again.
	WaitOn Waiting = iota
	// GiveUp: the owner's lease lapsed (it is stopped, dead or cut off),
	// or the session moved to another owner or generation. The request is
	// given up, and the session looked up again: it is taken over at
	// generation+1, or found at its new owner. The owner never serves the
	// request it may hold: it checks its lease before it serves, and a
	// renewal after a takeover is fenced.
	GiveUp
	// Unanswered: the owner holds its lease but has not begun to answer
	// within a lease TTL of the request (an SSE answer begins at once): it
	// is alive but stuck, or the network between the two is. The request
	// is refused (503 owner_unreachable): the owner may have seen it.
	Unanswered
)

// String names the decision for the rules' tests.
func (w Waiting) String() string {
	switch w {
	case WaitOn:
		return "wait on"
	case GiveUp:
		return "give the request up"
	case Unanswered:
		return "refuse it unanswered"
	}
	return fmt.Sprintf("Waiting(%d)", int(w))
}

// Await decides about a request forwarded at sent to held (the owner and
// generation that held the session then, with the lease seen then) whose
// answer has not begun, at now, from rec, the session's record as last
// read, and since (Remote: the owner holds the session also for a lease
// TTL after this replica's store answered again). The wait lasts while
// the owner holds its lease, and, unless whole (an answer that comes in
// one piece, application/json, whose headers come with the end of the
// call), at most one lease TTL after sent: this replica's TTL, or the
// lease seen when sent, whichever is longer. With WaitOn it returns when
// to decide again: the lease's expiry, or that bound, whichever comes
// first.
func (l Leases) Await(held RemoteError, rec store.Record, sent, now, since time.Time, whole bool) (Waiting, time.Time) {
	re := l.Remote(rec, now, since)
	if re == nil || rec.Owner != held.Owner || rec.Generation != held.Generation {
		return GiveUp, time.Time{}
	}
	if whole {
		return WaitOn, re.LeaseUntil
	}
	bound := sent.Add(max(l.TTL, held.LeaseUntil.Sub(sent)))
	if !now.Before(bound) {
		return Unanswered, time.Time{}
	}
	if re.LeaseUntil.Before(bound) {
		return WaitOn, re.LeaseUntil
	}
	return WaitOn, bound
}

// LostReason returns the log reason for a renewal or append error that
// means the generation it was made for is over (replay.ReasonFenced: a
// newer generation owns the session; replay.ReasonSessionNotFound: the
// store holds the session no more, unknown or ended, whether it said so
// to the call or to the pipelined batch the call was in;
// replay.ReasonGenerationLost: events were not stored), or "" for a
// transient error, after which the generation is kept and renewed again.
func LostReason(err error) replay.Reason {
	switch {
	case errors.Is(err, store.ErrFenced):
		return replay.ReasonFenced
	case errors.Is(err, store.ErrEnded), errors.Is(err, store.ErrNotFound):
		// Before ErrLost: a pipelined batch lost because the store no
		// longer holds the session ends no generation that a next one
		// continues; the session is gone.
		return replay.ReasonSessionNotFound
	case errors.Is(err, store.ErrLost):
		return replay.ReasonGenerationLost
	}
	return ""
}

// Renewer renews many leases in one round trip; store/redis implements
// it with a pipeline. errs[i] is the outcome for tokens[i] at gens[i], as
// store.Sessions.Renew reports it.
type Renewer interface {
	RenewMany(ctx context.Context, owner string, leaseUntil time.Time, tokens []string, gens []uint64) []error
}

// Renew sets owner's lease on generation gens[i] of session tokens[i] to
// lapse at until, for every i: in one round trip when st is a Renewer,
// else with one store.Sessions.Renew each. errs[i] is the i-th outcome;
// LostReason says which of them end their generation.
func Renew(ctx context.Context, st store.Sessions, owner string, until time.Time, tokens []string, gens []uint64) []error {
	if br, ok := st.(Renewer); ok {
		return br.RenewMany(ctx, owner, until, tokens, gens)
	}
	errs := make([]error, len(tokens))
	for i := range tokens {
		errs[i] = st.Renew(ctx, tokens[i], owner, gens[i], until)
	}
	return errs
}
