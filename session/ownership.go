// ownership.go holds how a registry keeps the generations it owns, as the
// lease rules decide (fleet.Leases): renewing their leases, checking a
// lease before serving, dropping a generation it no longer owns, and
// letting its leases lapse when it closes.

package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// renewTimeoutShare bounds one round of renewals to RenewInterval divided
// by it, so a store that stopped answering cannot hold the renew loop past
// the next round.
const renewTimeoutShare = 2

// errLeaseLost: a local Live turned out to be fenced or ended; Get looks
// the session up again.
var errLeaseLost = errors.New("session: lease lost")

// checkLease confirms, before l serves a request (Get) or hands the engine
// a message (Deliver), that this registry still owns it: when l's lease
// has lapsed by the local clock (the process was paused, or renewals
// failed), it renews synchronously (fleet.Leases.MustRenew). A fenced or
// ended session is dropped, and the error wraps errLeaseLost and the
// store's error; an unreachable store fails the request rather than risk
// serving a generation another replica took.
func (r *Registry) checkLease(ctx context.Context, l *Live) error {
	now := r.opts.Now()
	if !r.lease.MustRenew(l.lease(), now) {
		return nil
	}
	until := r.lease.Grant(now)
	err := r.st.Renew(ctx, l.token, r.opts.Owner, l.gen, until)
	if err == nil {
		l.setLease(until)
		return nil
	}
	if reason := fleet.LostReason(err); reason != "" {
		r.drop(l, reason, err)
		return fmt.Errorf("%w: %w", errLeaseLost, err)
	}
	return fmt.Errorf("session %s gen %d: renew lapsed lease: %w", store.Prefix(l.token), l.gen, err)
}

// RenewLeases renews the lease of every session whose live state this
// registry holds, in one round trip when the store supports it (store/redis
// does). A session fenced by a newer generation, or ended, is dropped: its
// engine session closes, so its handlers stop, and the line logged says
// reason=fenced or reason=session_not_found. A session whose renewal failed
// otherwise (store unavailable) is kept, and renewed again next round; if
// its lease lapses meanwhile another replica may take it over, and this
// one's writes are then fenced. Run calls RenewLeases every RenewInterval
// when Lease > 0; it does nothing when Lease is 0.
func (r *Registry) RenewLeases(ctx context.Context) {
	if r.opts.Lease <= 0 {
		return
	}
	// A session whose engine session died is not renewed: its lease
	// lapses, and the next request anywhere re-creates it.
	lives := r.removeDead(r.lives())
	ctx, cancel := context.WithTimeout(ctx, r.opts.RenewInterval/renewTimeoutShare)
	defer cancel()
	if len(lives) == 0 {
		// Nothing to renew: a read keeps what this registry sees of its
		// store up to date for the takeover rule (Answering).
		_, err := r.st.Get(ctx, contactProbe)
		r.heard(err)
		return
	}
	until := r.lease.Grant(r.opts.Now())
	errs := r.renewAll(ctx, lives, until)
	answered := false
	for _, err := range errs {
		answered = answered || storeAnswered(err)
	}
	r.heard(errOr(answered))
	failed := 0
	var firstErr error
	for i, l := range lives {
		err := errs[i]
		if err == nil {
			l.setLease(until)
			continue
		}
		if reason := fleet.LostReason(err); reason != "" {
			if l.isUnsettled() {
				// Fenced, maybe, by its own refused hibernation:
				// settle decides, and drops it if it is not ours.
				r.settle(ctx, l)
				continue
			}
			r.drop(l, reason, err)
			continue
		}
		failed++
		if firstErr == nil {
			firstErr = err
		}
	}
	if failed > 0 {
		r.logger.Warn("lease renewal failed; retrying next round", "reason", replay.ReasonUnavailable,
			"sessions", failed, "error", firstErr)
	}
}

// contactProbe is the token RenewLeases reads when it holds no session
// to renew, to learn whether the store answers; no session has it (a
// session token is 26 characters of base32, NewToken).
const contactProbe = "contact-probe"

// storeAnswered reports whether err, a store call's outcome, is the
// store's answer (a success, or a refusal such as store.ErrFenced or
// store.ErrNotFound) rather than a call it did not answer
// (store.ErrUnavailable, a timeout).
func storeAnswered(err error) bool {
	return !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, errUnanswered) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// errUnanswered stands for a round of calls none of which the store
// answered.
var errUnanswered = errors.New("session: the store answered no call")

func errOr(answered bool) error {
	if answered {
		return nil
	}
	return errUnanswered
}

// heard folds the outcome of a store call into what this registry has seen
// of its store (fleet.Leases.Heard), for the takeover rule. RenewLeases
// reports every round's outcome, so that the gaps between answers are
// the renew loop's, never a quiet spell of requests; other calls report
// only the calls the store left unanswered.
func (r *Registry) heard(err error) {
	now := r.opts.Now()
	r.contactMu.Lock()
	r.contact = r.lease.Heard(r.contact, storeAnswered(err), now)
	r.contactMu.Unlock()
}

// Answering returns, for the takeover rule (fleet.Leases.Remote), when
// the store answered this registry again after the last break it saw (a
// call it left unanswered, or more than a lease TTL without an answer):
// zero when it saw none, now while the break goes on. Until one lease TTL
// after it, a session whose owner's lease lapsed is still that owner's,
// which renews it once the store takes its renewals again (DESIGN.md,
// "Fleet mode"). The registry calls its store at least every
// RenewInterval (RenewLeases) to see breaks.
func (r *Registry) Answering(now time.Time) time.Time {
	r.contactMu.Lock()
	defer r.contactMu.Unlock()
	return r.contact.Answering(now)
}

// lostHereMax bounds Registry.lostHere: 4096 entries of a token and a
// generation, about 300 KiB, which names the reason of every re-creation
// after a store failure that ended the generations of up to 4096 sessions
// at once.
const lostHereMax = 4096

// drop ends l's hold on its session in this process, for reason (logged
// with err): it leaves the registry and its engine session closes, which
// stops its handlers and the connections serving its streams. The record
// and the log stay as they are: another owner holds them, or the session
// ended. The engine closes in the background, since drop may run on one
// of that engine's own goroutines (an append refused inside a handler).
// A Live that already left the registry (ended, re-created, closed) is
// closed without a log line: whoever removed it has said why.
func (r *Registry) drop(l *Live, reason replay.Reason, err error) {
	r.mu.Lock()
	held := false
	if r.removeLocked(l) {
		held = true
		if reason == replay.ReasonGenerationLost && len(r.lostHere) < lostHereMax {
			r.lostHere[l.token] = l.gen
		}
	}
	// After Close every engine session is closed or closing already.
	first := !l.dropped && !r.closed
	l.dropped = true
	if first {
		r.closing.Add(1)
	}
	r.mu.Unlock()
	if !first {
		return
	}
	if held {
		r.log.Forget(l.token)
		msg := "live state dropped: this process no longer owns the generation"
		attrs := []any{"reason", reason, "error", err}
		var ahead *aheadError
		switch {
		case errors.As(err, &ahead):
			// A client holds a cursor above the durable watermark, where
			// no event was ever sent: the store went back.
			msg = "live state dropped: the store lost events it had confirmed: restored from a backup? A client holds a cursor " +
				"above the high-water mark, where no event was ever sent, so this generation ends; the next request re-creates " +
				"the session at generation+1"
			if ahead.above {
				msg = "live state dropped: the store lost events it had confirmed: restored from a backup? A client holds a cursor " +
					"of a generation above this one, which the store never issued as it stands, so this generation ends; the next " +
					"request re-creates the session above the cursor's generation"
			}
			attrs = []any{"reason", reason, "cursor", ahead.cursor.String(), "hwm", ahead.hwm}
		case reason == replay.ReasonGenerationLost:
			// The store could not take an event: the generation ends here
			// although no other owner holds it, and the line says so.
			msg = "live state dropped: an event was not stored, or not confirmed stored, so this generation ends; the next request re-creates the session at generation+1"
		case reason == replay.ReasonSessionNotFound:
			// The store forgot the session (a restart without
			// persistence, FLUSHALL, an eviction) or ended it elsewhere.
			msg = "live state dropped: the store no longer holds the session (it is unknown, or ended elsewhere), so its requests answer 404 session_not_found"
		}
		if ahead != nil {
			r.warnAhead(l, ahead.above, msg, attrs...)
		} else {
			l.logger.Warn(msg, attrs...)
		}
	}
	go func() {
		defer r.closing.Done()
		l.close(reason)
	}()
}

// releaseLeases makes every lease this registry holds lapse now, so other
// replicas take the sessions over at once instead of after Lease. Close
// calls it; errors are ignored (the leases then lapse on their own).
func (r *Registry) releaseLeases(lives []*Live) {
	if r.opts.Lease <= 0 || len(lives) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.RenewInterval)
	defer cancel()
	r.renewAll(ctx, lives, r.lease.Release(r.opts.Now()))
}

// renewAll sets the lease of every generation in lives to lapse at until,
// in one round trip when the store supports it (fleet.Renew), and returns
// each one's error in the order of lives.
func (r *Registry) renewAll(ctx context.Context, lives []*Live, until time.Time) []error {
	tokens := make([]string, len(lives))
	gens := make([]uint64, len(lives))
	for i, l := range lives {
		tokens[i], gens[i] = l.token, l.gen
	}
	return fleet.Renew(ctx, r.st, r.opts.Owner, until, tokens, gens)
}

// lease returns when this process's lease on the generation lapses, by the
// last successful renewal (zero: no lease).
func (l *Live) lease() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leaseUntil
}

func (l *Live) setLease(until time.Time) {
	l.mu.Lock()
	if until.After(l.leaseUntil) {
		l.leaseUntil = until
	}
	l.mu.Unlock()
}
