// Package session keeps Tidemark's sessions: it creates them, looks them up,
// evicts them (idle TTL, capacity by least recent use, DELETE), keeps
// tombstones so a dead token answers 404, supersedes them, and re-creates
// their live state at generation+1 under the same token (DESIGN.md,
// "Generations").
//
// A Registry holds the sessions whose live state this process owns (Live);
// the records and event logs are in a store.Store, so a store that outlives
// the process lets a later process re-create them. Registries of a fleet
// share one store and hold their sessions under leases (Options.Lease,
// lease.go): a session another registry holds is reported as remote
// (ErrRemote) until that lease lapses.
package session

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// Defaults of Options.
const (
	DefaultIdleTTL      = 30 * time.Minute
	DefaultMaxSessions  = 10000
	DefaultTombstoneTTL = 24 * time.Hour
	// DefaultMaxCallsPerSession is the default of Options.MaxCallsPerSession.
	DefaultMaxCallsPerSession = 128
)

// Options configures a Registry. Zero values select the defaults.
type Options struct {
	// Owner identifies this process in session records (store.Record.Owner);
	// in a fleet it is the replica ID. A record owned by anyone else is
	// re-created at generation+1 by the first request that needs it, unless
	// that owner holds an unexpired lease (see Lease). Default: a random
	// boot ID, so a restarted process never mistakes a previous process's
	// sessions for its own.
	Owner string
	// Lease is how long this registry's claim on a session's live state
	// lasts unless renewed: Create, the take-over at generation+1 and every
	// renewal write LeaseUntil = now + Lease into the record. While another
	// owner's lease has not lapsed, Get returns a *RemoteError instead of
	// taking the session over (DESIGN.md, "Fleet mode"; see lease.go).
	// Default 0: no lease, records carry no expiry and every session this
	// registry does not hold is re-created at the next request, which is
	// right for one process on a memory or embedded store. A fleet on Redis
	// sets it (tidemark serve --lease-ttl, default 10 s).
	Lease time.Duration
	// RenewInterval is how often Run renews the lease of every session
	// this registry holds. It must be well below Lease: a renewal that
	// comes more than Lease after the previous one lets another replica
	// take the session over. Default (zero): Lease / 3. Ignored when Lease
	// is 0.
	RenewInterval time.Duration
	// IdleTTL evicts a session that has seen no request and had no open
	// stream for this long. Default 30 minutes; negative: never.
	IdleTTL time.Duration
	// MaxSessions is the most sessions whose live state this process holds;
	// creating one more evicts the least recently used session that has no
	// call in flight (its open streams end); when every session has a call
	// in flight, Create fails with engine.ErrCapacity. Default 10,000.
	MaxSessions int
	// MaxCallsPerSession is the most requests (calls with an id) one
	// session may have in flight at once; Live.OpenStream refuses more with
	// ErrTooManyCalls, so one client cannot make a session hold unbounded
	// state. Default 128.
	MaxCallsPerSession int
	// TombstoneTTL is how long an ended session's token keeps answering 404
	// as "ended" rather than "unknown". Default 24 hours.
	TombstoneTTL time.Duration
	// Logger receives one structured line per session event (created,
	// re-created, ended) with the session token prefix, generation and
	// reason. Default: slog.Default().
	Logger *slog.Logger
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// Errors of Registry methods; test with errors.Is.
var (
	// ErrNotFound: the token is unknown, or its tombstone expired.
	ErrNotFound = errors.New("session: not found")
	// ErrEnded: the token belongs to an evicted, deleted or superseded
	// session; the error is a *store.EndedError too.
	ErrEnded = store.ErrEnded
	// ErrForbidden: the session is bound to another user.
	ErrForbidden = errors.New("session: bound to another user")
	// ErrClosed: the registry is shut down.
	ErrClosed = errors.New("session: registry closed")
)

// Registry holds sessions. It is safe for concurrent use.
type Registry struct {
	st     store.Store
	log    *eventlog.Log
	engine engine.Engine
	opts   Options
	logger *slog.Logger

	// mu guards live, starting, reserved, lru, closed and each Live's
	// dropped, lruKey and lruIndex. Requests only read live (RLock);
	// recency is an atomic stamp on each Live (Live.used, from clock), so
	// a lookup writes nothing shared, and the least recently used session
	// is found in lru (lru.go), when one must go. A session whose engine
	// session died stays in live until Get, Sweep, an eviction or
	// RenewLeases meets it (no goroutine per session waits for the death);
	// none of them serves it.
	mu       sync.RWMutex
	live     map[string]*Live         // token → live state of this process
	starting map[string]chan struct{} // tokens being re-created
	reserved int                      // room taken by sessions being started (see reserve)
	lru      recency                  // the sessions in live with no call in flight known
	closed   bool
	clock    atomic.Uint64 // recency stamps: each use takes the next

	closing sync.WaitGroup // engine sessions closing after drop

	// oneEvent holds *[1]store.Event buffers for Live.append: the slice
	// an append hands to the store escapes (an interface call), and a
	// pooled array saves an allocation per event.
	oneEvent sync.Pool
}

// New returns a Registry over st, appending through log and starting live
// state with eng.
func New(st store.Store, log *eventlog.Log, eng engine.Engine, opts Options) *Registry {
	if opts.Owner == "" {
		opts.Owner = "boot-" + rand.Text()[:12]
	}
	if opts.IdleTTL == 0 {
		opts.IdleTTL = DefaultIdleTTL
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.TombstoneTTL <= 0 {
		opts.TombstoneTTL = DefaultTombstoneTTL
	}
	if opts.MaxCallsPerSession <= 0 {
		opts.MaxCallsPerSession = DefaultMaxCallsPerSession
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Lease > 0 && opts.RenewInterval <= 0 {
		opts.RenewInterval = opts.Lease / DefaultRenewDivisor
	}
	r := &Registry{
		st: st, log: log, engine: eng, opts: opts, logger: opts.Logger,
		live:     make(map[string]*Live),
		starting: make(map[string]chan struct{}),
	}
	log.SetEvict(r.evictOverBudget)
	return r
}

// evictOverBudget is the event log's evict function (eventlog.Log.SetEvict):
// it ends token's session, reason retention_budget, when its newest event
// no longer fits in the retention budget. The session ends on a goroutine
// of its own: the append that called it may be one of that session's
// handlers, whose return closing the session waits for.
func (r *Registry) evictOverBudget(token string) {
	r.closing.Go(func() { r.End(context.Background(), token, store.EndRetentionBudget) })
}

// Owner returns the identity this registry writes into records it owns.
func (r *Registry) Owner() string { return r.opts.Owner }

// Log returns the event log the registry appends through.
func (r *Registry) Log() *eventlog.Log { return r.log }

// NewToken returns a fresh session token: 130 bits from crypto/rand in
// base32 (26 characters), never reissued (DESIGN.md, Vocabulary).
func NewToken() string { return rand.Text() }

// Create starts a new session at generation 1 for userID ("" when
// unauthenticated), evicting the least recently used session if the
// registry is full. The caller delivers the client's initialize to it.
func (r *Registry) Create(ctx context.Context, userID string) (*Live, error) {
	if err := r.reserve(ctx); err != nil {
		return nil, err
	}
	now := r.opts.Now()
	rec := store.Record{
		Token: NewToken(), Generation: 1, Owner: r.opts.Owner, UserID: userID,
		LeaseUntil: r.leaseUntil(now), Created: now, LastSeen: now,
	}
	if err := r.st.Create(ctx, rec); err != nil {
		r.unreserve()
		return nil, fmt.Errorf("session: create: %w", err)
	}
	l, err := r.start(ctx, rec, nil, nil)
	if err != nil {
		r.st.End(context.WithoutCancel(ctx), rec.Token, store.EndDeleted, now.Add(r.opts.TombstoneTTL))
		return nil, err
	}
	l.logger.Info("session created")
	return l, nil
}

// reserve takes room for one more session, whose start follows (start
// gives the room back if it fails): when MaxSessions sessions are held or
// being started, it makes room first. A session whose engine session died
// leaves without ending (its next request re-creates it); otherwise the
// least recently used session with no call in flight is evicted (ended,
// store.EndCapacity). Ending a busy one would cut a client mid-call for
// another client's benefit: when every session is busy, reserve fails
// with engine.ErrCapacity. The victim leaves the registry, and its room
// passes to the caller, in one step under mu, so concurrent callers each
// evict a session of their own and the cap is never exceeded.
func (r *Registry) reserve(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if len(r.live)+r.reserved < r.opts.MaxSessions {
		r.reserved++
		r.mu.Unlock()
		return nil
	}
	victim, dead := r.lru.victim()
	if victim == nil {
		held, starting := len(r.live), r.reserved
		r.mu.Unlock()
		return fmt.Errorf("session: %w: all %d sessions have calls in flight, %d starting",
			engine.ErrCapacity, held, starting)
	}
	r.removeLocked(victim)
	r.reserved++
	r.mu.Unlock()
	if !dead {
		// The victim's token answers 404 at once; its engine session
		// closes in the background: the creator does not wait for another
		// session's teardown (a gateway's subprocess may take its stop
		// grace).
		r.endRecord(ctx, victim.token, store.EndCapacity)
		victim.logger.Info("session ended", "reason", string(store.EndCapacity))
		r.closeInBackground(victim)
	}
	return nil
}

// unreserve gives back room reserve took for a session that did not start.
func (r *Registry) unreserve() {
	r.mu.Lock()
	r.reserved--
	r.mu.Unlock()
}

// removeLocked takes l out of the registry if it is the live state held
// for its token. r.mu must be held.
func (r *Registry) removeLocked(l *Live) bool {
	if r.live[l.token] != l {
		return false
	}
	delete(r.live, l.token)
	r.lru.remove(l)
	return true
}

// unpark makes l a candidate for eviction again once its last call in
// flight ended (see recency), if the registry still holds it.
func (r *Registry) unpark(l *Live) {
	r.mu.Lock()
	if r.live[l.token] == l {
		r.lru.add(l)
	}
	r.mu.Unlock()
}

// start starts the live state of rec's generation and registers it, in the
// room reserve took (given back if the start fails).
func (r *Registry) start(ctx context.Context, rec store.Record, st *engine.State, prior []ledger) (*Live, error) {
	l := newLive(r, rec, st, prior)
	es, err := r.engine.Start(ctx, engine.Info{Token: rec.Token, Generation: rec.Generation, State: st, Logger: l.logger}, l)
	if err != nil {
		r.unreserve()
		return nil, fmt.Errorf("session %s gen %d: start engine: %w", store.Prefix(rec.Token), rec.Generation, err)
	}
	l.eng = es
	l.markUsed(r.clock.Add(1))
	r.mu.Lock()
	r.reserved--
	if r.closed {
		r.mu.Unlock()
		es.Close()
		return nil, ErrClosed
	}
	r.live[rec.Token] = l
	r.lru.add(l)
	r.mu.Unlock()
	return l, nil
}

// Get returns the live session of token for a request by userID,
// re-creating its live state at generation+1 if no live process holds it
// (after a restart on a durable store, after the engine session ended, or
// after the lease of another replica lapsed). Errors: ErrNotFound, ErrEnded
// (also a *store.EndedError), ErrForbidden, ErrClosed, a *RemoteError
// (ErrRemote) when another owner holds the session under a lease that has
// not lapsed, and the store's errors (store.ErrUnavailable).
func (r *Registry) Get(ctx context.Context, token, userID string) (*Live, error) {
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
			if l.userID != "" && l.userID != userID {
				return nil, fmt.Errorf("%w: session %s", ErrForbidden, store.Prefix(token))
			}
			if err := r.checkLease(ctx, l); err != nil {
				if errors.Is(err, errLeaseLost) {
					continue // look the session up again
				}
				return nil, err
			}
			l.Touch()
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
			engineEnded = true
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

		l, err := r.recreate(ctx, token, userID, engineEnded)
		r.mu.Lock()
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
// another owner holds it under a lease that has not lapsed (*RemoteError).
// engineEnded says this process saw the previous generation's engine
// session end on its own (a gateway's subprocess exited), which the log
// line gives as the reason.
func (r *Registry) recreate(ctx context.Context, token, userID string, engineEnded bool) (*Live, error) {
	rec, err := r.st.Get(ctx, token)
	if err != nil {
		return nil, r.storeErr(token, err)
	}
	if rec.UserID != "" && rec.UserID != userID {
		return nil, fmt.Errorf("%w: session %s", ErrForbidden, store.Prefix(token))
	}
	for attempt := 1; ; attempt++ {
		now := r.opts.Now()
		// A live owner decides about idleness itself: it sees every request.
		if err := r.remote(rec, now); err != nil {
			return nil, err
		}
		if r.opts.IdleTTL > 0 && now.Sub(rec.LastSeen) > r.opts.IdleTTL {
			r.End(ctx, token, store.EndIdle)
			return nil, &store.EndedError{Token: token, Reason: store.EndIdle}
		}
		st, prior, err := decodeState(rec.State)
		if err != nil {
			return nil, fmt.Errorf("session %s gen %d: %w", store.Prefix(token), rec.Generation, err)
		}
		if err := r.reserve(ctx); err != nil {
			return nil, err
		}
		from, prevOwner := rec.Generation, rec.Owner
		// The claim discards generation from's events: read which requests
		// its streams carried first.
		sum, sumErr := r.summarizeLog(ctx, token, from)
		claimed, err := r.st.Claim(ctx, token, r.opts.Owner, from, r.leaseUntil(now))
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
		r.log.Forget(token)
		if sumErr == nil && len(sum.Streams) > 0 {
			prior = withPrior(prior, sum)
			r.savePrior(ctx, claimed, st, prior)
		}
		l, err := r.start(ctx, claimed, st, prior)
		if err != nil {
			return nil, err
		}
		// Why the previous generation is over, for the log (regression: a
		// gateway subprocess's exit was logged as owner_gone).
		reason := "owner_gone"
		switch {
		case engineEnded:
			reason = "engine_ended"
		case prevOwner != r.opts.Owner && !rec.LeaseUntil.IsZero():
			reason = "lease_expired"
		}
		l.logger.Info("session re-created", "previous_generation", from, "previous_owner", prevOwner, "reason", reason)
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
		l.eng.Close()
	} else {
		r.mu.Unlock()
	}
	rec, err := r.st.Get(ctx, token)
	if err != nil {
		return nil, r.storeErr(token, err)
	}
	return r.Get(ctx, token, rec.UserID)
}

// End ends token's session with reason: its live state is closed, its
// record and event log are removed, and a tombstone answers for the token
// for TombstoneTTL. Connections tailing it see the end and close.
func (r *Registry) End(ctx context.Context, token string, reason store.EndReason) error {
	r.mu.Lock()
	l := r.live[token]
	if l != nil {
		r.removeLocked(l)
	}
	r.mu.Unlock()
	return r.ended(ctx, token, l, reason)
}

// ended ends token's session in the store with reason and closes l, its
// live state in this process (nil when there is none), which has left the
// registry already.
func (r *Registry) ended(ctx context.Context, token string, l *Live, reason store.EndReason) error {
	err := r.endRecord(ctx, token, reason)
	if l != nil {
		l.eng.Close()
		l.logger.Info("session ended", "reason", string(reason))
	}
	return err
}

// endRecord ends token's session in the store with reason, keeping a
// tombstone for TombstoneTTL, and forgets its event log's accounting.
func (r *Registry) endRecord(ctx context.Context, token string, reason store.EndReason) error {
	err := r.st.End(context.WithoutCancel(ctx), token, reason, r.opts.Now().Add(r.opts.TombstoneTTL))
	r.log.Forget(token)
	if err != nil {
		return r.storeErr(token, err)
	}
	return nil
}

// closeInBackground closes l's engine session on a goroutine of its own,
// which Close waits for; once the registry is closed, it closes it at once.
func (r *Registry) closeInBackground(l *Live) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		l.eng.Close()
		return
	}
	r.closing.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.closing.Done()
		l.eng.Close()
	}()
}

// Status returns what the registry knows of token for the replay decision,
// without starting anything: Live with the record's generation, Evicted or
// Superseded for a tombstone, Unknown otherwise.
func (r *Registry) Status(ctx context.Context, token string) (replay.Status, store.Record, error) {
	rec, err := r.st.Get(ctx, token)
	var ended *store.EndedError
	switch {
	case err == nil:
		return replay.Live, rec, nil
	case errors.As(err, &ended):
		if ended.Reason == store.EndSuperseded {
			return replay.Superseded, rec, nil
		}
		return replay.Evicted, rec, nil
	case errors.Is(err, store.ErrNotFound):
		return replay.Unknown, rec, nil
	default:
		return replay.Unknown, rec, err
	}
}

// Sweep evicts the sessions idle for longer than IdleTTL, lets go of the
// sessions whose engine session died (their next request re-creates them),
// and applies the event log's age limit. Run calls it periodically.
func (r *Registry) Sweep(ctx context.Context) {
	r.removeDead()
	if r.opts.IdleTTL > 0 {
		cutoff := r.opts.Now().Add(-r.opts.IdleTTL)
		var idle []string
		r.mu.RLock()
		for _, l := range r.live {
			if l.idleSince().Before(cutoff) {
				idle = append(idle, l.token)
			}
		}
		r.mu.RUnlock()
		for _, tok := range idle {
			r.End(ctx, tok, store.EndIdle)
		}
	}
	r.log.Sweep(ctx)
}

// removeDead removes the sessions whose engine session died on its own
// from the registry, without ending them.
func (r *Registry) removeDead() {
	r.mu.Lock()
	for _, l := range r.live {
		if l.dead() {
			r.removeLocked(l)
		}
	}
	r.mu.Unlock()
}

// Run sweeps every interval and, when Options.Lease > 0, renews the
// leases of the sessions this registry holds every RenewInterval (see
// RenewLeases), until ctx is done. Renewals run on their own goroutine, so
// a long sweep cannot delay them past the lease.
func (r *Registry) Run(ctx context.Context, interval time.Duration) {
	var renewing sync.WaitGroup
	if r.opts.Lease > 0 {
		renewing.Go(func() { r.renewLoop(ctx) })
	}
	defer renewing.Wait()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Sweep(ctx)
		}
	}
}

// CallsInFlight returns the number of calls (requests with an id) in
// flight on the sessions whose live state this process holds.
func (r *Registry) CallsInFlight() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, l := range r.live {
		if !l.dead() {
			n += l.callsInFlight()
		}
	}
	return n
}

// Len returns the number of sessions whose live state this process holds
// (whose engine session is alive).
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, l := range r.live {
		if !l.dead() {
			n++
		}
	}
	return n
}

// Close closes every live session's engine state and refuses new work. It
// does not end the sessions in the store: a durable store keeps them for
// the next process. With leases (Options.Lease > 0) it makes the leases
// it held lapse at once, so that other replicas take those sessions over
// at the next request instead of after the lease.
func (r *Registry) Close() error {
	r.mu.Lock()
	r.closed = true
	var all []*Live
	for _, l := range r.live {
		if !l.dead() {
			all = append(all, l)
		}
	}
	r.live = make(map[string]*Live)
	for _, l := range r.lru {
		l.lruIndex = -1
	}
	r.lru = nil
	r.mu.Unlock()
	for _, l := range all {
		l.eng.Close()
	}
	r.releaseLeases(all)
	r.closing.Wait()
	return nil
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// storeErr maps a store error to the registry's errors.
func (r *Registry) storeErr(token string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: session %s", ErrNotFound, store.Prefix(token))
	}
	return err
}
