// recreate.go holds looking a session up for a request, which re-creates
// its live state at generation+1 when no process holds it (DESIGN.md,
// "Generations").

package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// Get returns the live session of token for a request by userID,
// re-creating its live state at generation+1 if no live process holds it
// (after a restart on a durable store, after the engine session ended, or
// after the lease of another replica lapsed). Errors: ErrNotFound, ErrEnded
// (also a *store.EndedError; from the moment the session's end begins,
// see End), ErrForbidden, ErrClosed, a *fleet.RemoteError
// (fleet.ErrRemote) when another owner holds the session under a lease
// that has not lapsed, and the store's errors (store.ErrUnavailable). A
// session of another user is ErrForbidden, live or ended (endedFor).
func (r *Registry) Get(ctx context.Context, token, userID string) (*Live, error) {
	return r.GetChecked(ctx, token, userID, nil)
}

// GetChecked is Get, which calls check (when not nil) with the session's
// record before it starts the session's live state from it (a wake from
// hibernation, or a re-creation at generation+1), after every error of
// its own (not found, ended, another user's, another owner's lease, idle
// beyond IdleTTL): an error of check is returned as it is, and nothing is
// started. A request whose refusal the record alone decides (a protocol
// version that contradicts the one the session negotiated, a cursor of
// another session) is then refused without waking a hibernated session
// (DESIGN.md, "Hibernation"). check is not called when the live state is
// held here already; the caller judges the request on it then.
func (r *Registry) GetChecked(ctx context.Context, token, userID string, check func(store.Record) error) (*Live, error) {
	l, err := r.get(ctx, token, userID, check)
	return l, endedFor(err, token, userID)
}

// get is Get, whose errors may name another user's ended session.
func (r *Registry) get(ctx context.Context, token, userID string, check func(store.Record) error) (*Live, error) {
	for {
		r.mu.RLock()
		shut := r.closed
		l := r.live[token]
		r.mu.RUnlock()
		if shut {
			return nil, ErrClosed
		}
		if l != nil && !l.dead() {
			l.markUsed(r.clock.Add(1))
			if l.userID != userID {
				return nil, fmt.Errorf("%w: session %s", ErrForbidden, store.Prefix(token))
			}
			if err := r.settle(ctx, l); err != nil {
				if errors.Is(err, errLeaseLost) {
					continue // look the session up again
				}
				return nil, err
			}
			if err := r.checkLease(ctx, l); err != nil {
				if errors.Is(err, errLeaseLost) {
					continue // look the session up again
				}
				return nil, err
			}
			if !l.holdFor(ctx) {
				continue // hibernating: wait for it, then wake it
			}
			return l, nil
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, ErrClosed
		}
		engineEnded := false
		if cur := r.live[token]; cur != nil {
			if !cur.dead() {
				r.mu.Unlock()
				continue // started meanwhile
			}
			// The engine session died on its own: the next generation
			// takes its place.
			r.removeLocked(cur)
			defer cur.releaseSpans(replay.ReasonEngineEnded) // once mu is released
			engineEnded = true
		}
		if ended, ok := r.endingReason(token); ok {
			r.mu.Unlock()
			return nil, ended // its end has begun: never re-created
		}
		if wait, ok := r.starting[token]; ok {
			r.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		r.starting[token] = done
		r.mu.Unlock()

		l, err := r.recreate(ctx, token, userID, engineEnded, check)
		r.mu.Lock()
		if err == nil {
			r.hibernated.del(token)
		}
		delete(r.starting, token)
		close(done)
		r.mu.Unlock()
		return l, err
	}
}

// claimAttempts bounds how often recreate tries to claim a session whose
// generation keeps moving under it (other replicas claiming it at once).
const claimAttempts = 3

// recreate loads token's record and claims a new generation of it, unless
// another owner holds it under a lease that has not lapsed
// (*fleet.RemoteError).
// engineEnded says this process saw the previous generation's engine
// session end on its own (a gateway's subprocess exited), which the log
// line gives as the reason. check, when not nil, judges the record before
// anything starts (GetChecked); the wake that needs no read of the record
// (wakeIndexed) is then not taken, since check needs the record.
func (r *Registry) recreate(ctx context.Context, token, userID string, engineEnded bool, check func(store.Record) error) (*Live, error) {
	if check == nil {
		if l, done, err := r.wakeIndexed(ctx, token, userID); done {
			return l, err
		}
	}
	rec, err := r.st.Get(ctx, token)
	if !storeAnswered(err) {
		// A break seen here counts at once; the answers that end it are
		// the renew loop's, which calls the store at a steady pace.
		r.heard(err)
	}
	if err != nil {
		return nil, r.storeErr(token, err)
	}
	if rec.UserID != userID {
		return nil, fmt.Errorf("%w: session %s", ErrForbidden, store.Prefix(token))
	}
	for attempt := 1; ; attempt++ {
		now := r.opts.Now()
		// A live owner decides about idleness itself: it sees every
		// request. An owner whose lease lapsed while the store did not
		// answer keeps the session until it could renew (Answering).
		if re := r.lease.Remote(rec, now, r.Answering(now)); re != nil {
			return nil, re
		}
		if r.opts.IdleTTL > 0 && now.Sub(rec.LastSeen) > r.opts.IdleTTL {
			r.mu.Lock()
			r.endLocked(ctx, token, store.EndIdle, rec)
			return nil, &store.EndedError{Token: token, Reason: store.EndIdle, UserID: rec.UserID}
		}
		if check != nil {
			if err := check(rec); err != nil {
				return nil, err
			}
		}
		st, prior, err := decodeState(rec.State)
		if err != nil {
			return nil, fmt.Errorf("session %s gen %d: %w", store.Prefix(token), rec.Generation, err)
		}
		if st != nil && rec.Owner != "" {
			// Reattached by the owner that woke it, whose generation this
			// one takes over: never shared with it.
			st.Suspended = nil
		}
		if err := r.reserve(ctx); err != nil {
			return nil, err
		}
		if wakesAtSameGeneration(rec.Owner, hibernatedExact(rec.State), r.hib) {
			// Hibernated with nothing lost: the same generation goes on.
			l, err := r.wake(ctx, rec, st, prior)
			if errors.Is(err, store.ErrFenced) && attempt < claimAttempts {
				if rec, err = r.st.Get(ctx, token); err != nil {
					return nil, r.storeErr(token, err)
				}
				continue
			}
			if err != nil {
				return nil, r.storeErr(token, err)
			}
			r.opts.Metrics.SessionWoke(true)
			return l, nil
		}
		from, prevOwner := rec.Generation, rec.Owner
		// The claim discards generation from's events: read which requests
		// its streams carried first.
		sum, sumErr := r.summarizeLog(ctx, rec, from)
		// A hibernation of generation from saved its ledger: the log may
		// have lost responses to retention since, or all its events to
		// the hibernation (a lossy one drops them).
		_, saved := hibernatedLive(rec.State, from)
		sum.merge(saved)
		claimed, err := r.st.Claim(ctx, token, r.opts.Owner, from, r.lease.Grant(now))
		if err != nil {
			r.unreserve()
		}
		if errors.Is(err, store.ErrFenced) && attempt < claimAttempts {
			// Another replica claimed it first: serve through the winner if
			// its lease holds, else try again on the newer generation.
			if rec, err = r.st.Get(ctx, token); err != nil {
				return nil, r.storeErr(token, err)
			}
			continue
		}
		if err != nil {
			return nil, r.storeErr(token, err)
		}
		if claimed, err = r.claimAbove(ctx, claimed, r.lease.Grant(now)); err != nil {
			r.unreserve()
			return nil, r.storeErr(token, err)
		}
		r.log.Forget(token)
		if sumErr == nil && len(sum.Streams) > 0 {
			prior = withPrior(prior, sum)
			r.savePrior(ctx, claimed, st, prior)
		}
		l, err := r.start(ctx, claimed, st, prior, false)
		if err != nil {
			return nil, err
		}
		endedHere := replay.Reason("")
		r.mu.Lock()
		if gen, ok := r.lostHere[token]; ok {
			delete(r.lostHere, token)
			if gen == from && prevOwner == r.opts.Owner {
				endedHere = replay.ReasonGenerationLost
			}
		}
		r.mu.Unlock()
		if engineEnded {
			endedHere = replay.ReasonEngineEnded
		}
		reason := r.lease.TakeoverReason(rec, endedHere)
		if prevOwner == "" {
			// Only Hibernate leaves a record without an owner.
			reason = replay.ReasonHibernated
			r.opts.Metrics.SessionWoke(false)
		}
		l.logger.Info("session re-created", "previous_generation", from, "previous_owner", prevOwner, "reason", reason)
		r.opts.Metrics.GenerationCreated(reason)
		return l, nil
	}
}

// savePrior stores prior, the ledgers of the generations before
// rec.Generation, with the session's state st, so that a resume refused
// after another restart or takeover can still name its lost requests. A
// failure is logged and not the re-creation's: the new generation keeps
// prior in memory, and its next state change stores it.
func (r *Registry) savePrior(ctx context.Context, rec store.Record, st *engine.State, prior []ledger) {
	b, err := encodeState(st, prior)
	if err == nil {
		err = r.st.SaveState(ctx, rec.Token, rec.Generation, b)
	}
	if err != nil {
		r.logger.Warn("saving the previous generation's requests failed; resumes of its streams may not name their lost requests",
			"session", store.Prefix(rec.Token), "generation", rec.Generation, "reason", replay.ReasonStoreError, "error", err)
	}
}

// Recreate ends the live state of token's current generation, if this
// process holds it, and starts generation+1 from the saved state. Streams of
// the old generation then answer 409 generation_mismatch on resume.
func (r *Registry) Recreate(ctx context.Context, token string) (*Live, error) {
	r.mu.Lock()
	if l, ok := r.live[token]; ok && r.removeLocked(l) {
		r.mu.Unlock()
		l.close(replay.ReasonEngineEnded)
	} else {
		r.mu.Unlock()
	}
	rec, err := r.st.Get(ctx, token)
	if err != nil {
		return nil, r.storeErr(token, err)
	}
	return r.Get(ctx, token, rec.UserID)
}
