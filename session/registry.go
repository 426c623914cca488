// registry.go holds Registry, its options and errors, and the life of a
// session in it: creating it, ending it, and what the registry reports
// about it.

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
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/internal/warngate"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// Defaults of Options.
const (
	DefaultIdleTTL      = 30 * time.Minute
	DefaultMaxSessions  = 10000
	DefaultTombstoneTTL = 24 * time.Hour
	// DefaultMaxCallsPerSession is the default of Options.MaxCallsPerSession.
	DefaultMaxCallsPerSession = 128
	// DefaultHibernateAfter is the default of Options.HibernateAfter: long
	// enough that a person using a session interactively (a pause to
	// read, to think, to fetch coffee) never pays a wake, short enough
	// that most of a session's idle half hour before eviction (IdleTTL)
	// is spent holding nothing but its record.
	DefaultHibernateAfter = 10 * time.Minute
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
	// owner's lease has not lapsed, Get returns a *fleet.RemoteError instead
	// of taking the session over (DESIGN.md, "Fleet mode"; the rules are
	// package fleet's Leases).
	// Default 0: no lease, records carry no expiry and every session this
	// registry does not hold is re-created at the next request, which is
	// right for one process on a memory or embedded store. A fleet on Redis
	// sets it (tidemark serve --lease-ttl, default 10 s).
	Lease time.Duration
	// RenewInterval is how often Run renews the lease of every session
	// this registry holds. It must be well below Lease: a renewal that
	// comes more than Lease after the previous one lets another replica
	// take the session over. Default (zero): Lease / 3
	// (fleet.DefaultRenewDivisor). Ignored when Lease is 0.
	RenewInterval time.Duration
	// IdleTTL evicts a session that has seen no request and had no open
	// stream for this long. Default 30 minutes; negative: never.
	IdleTTL time.Duration
	// HibernateAfter hibernates a session that has seen no request, had
	// no open stream and had no call in flight for this long: its engine
	// session and its live state here end, its record stays in the store,
	// and the next request wakes it (DESIGN.md, "Hibernation"). It wakes
	// at the same generation when the engine restores its state exactly
	// (engine.HibernateExact), else at generation+1; an engine that keeps
	// its sessions (engine.HibernateNever, the default of an engine that
	// says nothing) never hibernates them. Hibernation comes before idle
	// eviction only when HibernateAfter is below IdleTTL. Default (zero)
	// DefaultHibernateAfter, 10 minutes; negative: never.
	HibernateAfter time.Duration
	// HandOver says the store outlives this process (a data directory,
	// Redis), so that a graceful shutdown may hand its sessions over at
	// their generation (Registry.HandOver) for the next process, or
	// another replica, to wake exactly. Independent of HibernateAfter.
	// Default false: HandOver does nothing, as it must with a store that
	// ends with the process (store/memory), whose sessions have no next
	// process to wake in.
	HandOver bool
	// ReleaseOnClose says the store's records end with the process (the
	// memory store), so that Close hands what each session this registry
	// hibernated keeps outside the process to the engine
	// (engine.Releaser), as the session's end would: no later process can
	// wake such a session, and a gateway's upstream session gets its
	// DELETE at once rather than at the upstream's idle timeout.
	// tidemark.NewHandler sets it for a memory.Store. Default false: the
	// kept state waits in the store for the next process.
	ReleaseOnClose bool
	// MaxSessions is the most sessions whose live state this process holds;
	// creating or waking one more hibernates the least recently used
	// session that is not busy, or evicts it (its open streams end) when
	// sessions do not hibernate. Busy is a call in flight, and, when
	// sessions hibernate, also an answer being stored, an open stream or a
	// request being served: a busy session is never taken. When every
	// session is busy, Create (and the wake) fails with
	// engine.ErrCapacity. Default 10,000.
	MaxSessions int
	// MaxCallsPerSession is the most requests (calls with an id) one
	// session may have in flight at once; Live.OpenStream refuses more with
	// ErrTooManyCalls, so one client cannot make a session hold unbounded
	// state. It also bounds the messages of one JSON-RPC batch (package
	// transport refuses more with 400 batch_too_large). Default 128.
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
	// Metrics records sessions created and ended, generations created,
	// and each request answered (package metrics). Default:
	// metrics.Discard.
	Metrics metrics.Sessions
	// Tracer starts a server span per request, ended with its response
	// (package tracing). Default: none.
	Tracer *tracing.Tracer
	// Swept, when set, is called once at the end of every Sweep, on the
	// sweeping goroutine, with the number of sessions that sweep
	// hibernated (0 when none): their engine sessions and live state
	// became garbage, which a process may give back to the operating
	// system (tidemark serve does, runtime/debug.FreeOSMemory). Sessions
	// hibernated to make room (MaxSessions) are not counted. Default:
	// none.
	Swept func(hibernated int)
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
	lease  fleet.Leases
	logger *slog.Logger
	hib    engine.Hibernation // what eng says of hibernation
	// hibWarns gates the WARN lines of failed hibernations
	// (warnHibFailure).
	hibWarns *warngate.Gate[hibFailure]
	// aheadWarns gates the WARN lines of generations that a cursor above
	// the store's ended (warnAhead), keyed by whether its generation was
	// above.
	aheadWarns *warngate.Gate[bool]

	// mu guards live, starting, ending, hibernated, reserved, lru, closed and each Live's
	// dropped, lruKey and lruIndex. Requests only read live (RLock);
	// recency is an atomic stamp on each Live (Live.used, from clock), so
	// a lookup writes nothing shared, and the least recently used session
	// is found in lru (room.go), when one must go. A session whose engine
	// session died stays in live until Get, Sweep, an eviction or
	// RenewLeases meets it (no goroutine per session waits for the death);
	// none of them serves it.
	mu       sync.RWMutex
	live     map[string]*Live         // token → live state of this process
	liveMax  int                      // the most entries live has held since it was made (compact)
	starting map[string]chan struct{} // tokens being re-created
	// ending holds the tokens whose end has begun, with its reason and the
	// user the session belongs to, until the store has ended their
	// records: the session has left live, and its record is still live in
	// the store, so Get and Status answer from here that it ended instead
	// of reading (and re-creating) it, to its user only (endedFor).
	ending map[string]*store.EndedError
	// hibernated indexes the sessions this process hibernated, so Sweep
	// ends those idle for IdleTTL and a request wakes them with one store
	// operation: nothing else of them is held here (hibernate.go).
	hibernated hibIndex
	// lostHere holds the generation of each session whose live state this
	// registry dropped because its events were not stored
	// (ReasonGenerationLost), until the session is re-created or ends, so
	// that the re-creation says so rather than owner_gone: the record
	// still names this registry as its owner. At most lostHereMax
	// entries; a session past them is re-created as owner_gone.
	lostHere map[string]uint64
	// above holds, for each session whose generation a resume ended by
	// naming a generation above it (Live.EndAbove), that cursor's
	// generation, until the re-creation claims past it (claimAbove). At
	// most lostHereMax entries.
	above    map[string]uint64
	reserved int     // room taken by sessions being started (see reserve)
	lru      recency // eviction order of the sessions in live not known to be busy (room.go)
	closed   bool
	clock    atomic.Uint64 // recency stamps: each use takes the next

	closing sync.WaitGroup // engine sessions closing after drop

	// contact is what this registry has seen of its store's answers, for
	// the takeover rule (Answering); contactMu guards it.
	contactMu sync.Mutex
	contact   fleet.Contact

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
	if opts.Metrics == nil {
		opts.Metrics = metrics.Discard
	}
	if opts.HibernateAfter == 0 {
		opts.HibernateAfter = DefaultHibernateAfter
	}
	if opts.Lease > 0 && opts.RenewInterval <= 0 {
		opts.RenewInterval = opts.Lease / fleet.DefaultRenewDivisor
	}
	r := &Registry{
		st: st, log: log, engine: eng, opts: opts, logger: opts.Logger,
		lease:      fleet.Leases{Owner: opts.Owner, TTL: opts.Lease},
		live:       make(map[string]*Live),
		starting:   make(map[string]chan struct{}),
		ending:     make(map[string]*store.EndedError),
		hibernated: newHibIndex(),
		lostHere:   make(map[string]uint64),
		above:      make(map[string]uint64),
		hib:        engine.HibernationOf(eng),
		hibWarns:   warngate.New[hibFailure](hibWarnInterval, opts.Now),
		aheadWarns: warngate.New[bool](aheadWarnInterval, opts.Now),
	}
	log.SetEvict(r.evictOverBudget)
	if n, ok := st.(store.LossNotifier); ok {
		n.NotifyLost(r.lost)
	}
	if n, ok := st.(store.EndNotifier); ok {
		if _, releases := eng.(engine.Releaser); releases {
			n.NotifyEnded(r.releaseKept)
		}
	}
	return r
}

// lost is the store's LossNotifier callback: generation gen of token's
// session could not store events it had accepted, so this process drops
// it (its streams close, its handlers stop), and the next request claims
// generation+1, or answers 503 while the store is unavailable. Resuming a
// stream of the lost generation then answers 409 generation_mismatch.
func (r *Registry) lost(token string, gen uint64, err error) {
	r.mu.RLock()
	l := r.live[token]
	r.mu.RUnlock()
	if l != nil && l.gen == gen {
		r.drop(l, fleet.LostReason(err), err)
	}
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

// Leases returns the lease rules this registry follows: its Owner and
// Options.Lease (fleet.Router decides by them too).
func (r *Registry) Leases() fleet.Leases { return r.lease }

// MaxCallsPerSession returns Options.MaxCallsPerSession with its default
// applied: the most calls one session may have in flight, which is also
// the most messages one JSON-RPC batch may hold (package transport).
func (r *Registry) MaxCallsPerSession() int { return r.opts.MaxCallsPerSession }

// Log returns the event log the registry appends through.
func (r *Registry) Log() *eventlog.Log { return r.log }

// NewToken returns a fresh session token: 130 bits from crypto/rand in
// base32 (26 characters), never reissued (DESIGN.md, "Vocabulary").
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
		LeaseUntil: r.lease.Grant(now), Created: now, LastSeen: now,
	}
	if err := r.st.Create(ctx, rec); err != nil {
		r.unreserve()
		return nil, fmt.Errorf("session: create: %w", err)
	}
	l, err := r.start(ctx, rec, nil, nil, false)
	if err != nil {
		r.st.End(context.WithoutCancel(ctx), rec.Token, store.EndDeleted, now.Add(r.opts.TombstoneTTL))
		return nil, err
	}
	l.logger.Info("session created")
	r.opts.Metrics.SessionStarted()
	return l, nil
}

// start starts the live state of rec's generation and registers it, in the
// room reserve took (given back if the start fails), held for the request
// ctx belongs to (holdFor). woken says rec is a record woken at its
// generation (store.Sessions.Wake), whose resumed streams are numbered on
// from the count its hibernation stored (Live.NextResume).
func (r *Registry) start(ctx context.Context, rec store.Record, st *engine.State, prior []ledger, woken bool) (*Live, error) {
	l := newLive(r, rec, st, prior, woken)
	es, err := r.engine.Start(ctx, engine.Info{Token: rec.Token, Generation: rec.Generation, State: st, Logger: l.logger}, (*outbox)(l))
	if err != nil {
		r.unreserve()
		return nil, fmt.Errorf("session %s gen %d: start engine: %w", store.Prefix(rec.Token), rec.Generation, err)
	}
	l.eng = es
	l.markUsed(r.clock.Add(1))
	// The request that starts the session holds it before any sweep or
	// reserve can see it: from then on nothing hibernates it under that
	// request (holdFor), which would find its engine session closed.
	l.holdFor(ctx)
	r.mu.Lock()
	r.reserved--
	if r.closed {
		r.mu.Unlock()
		es.Close()
		return nil, ErrClosed
	}
	r.live[rec.Token] = l
	r.liveMax = max(r.liveMax, len(r.live))
	r.lru.add(l)
	r.mu.Unlock()
	return l, nil
}

// End ends token's session with reason: its live state is closed, its
// record and event log are removed, and a tombstone answers for the token
// for TombstoneTTL. Connections tailing it see the end and close. From the
// moment End begins, Get and Status answer that the session ended with
// reason, and no request re-creates it; a re-creation of the token already
// under way is waited for, then ended. Ending a session whose end has
// begun already returns a *store.EndedError with that end's reason. A
// session whose live state this process does not hold has its record
// read first, for the user it belongs to (ErrNotFound when there is none).
func (r *Registry) End(ctx context.Context, token string, reason store.EndReason) error {
	rec, err := r.recordOf(ctx, token)
	if err != nil {
		return err
	}
	r.mu.Lock()
	for {
		wait, ok := r.starting[token]
		if !ok {
			break
		}
		r.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.mu.Lock()
	}
	return r.endLocked(ctx, token, reason, rec)
}

// recordOf returns what End needs of token's session: the user it
// belongs to ("" when unauthenticated), its generation and when it was
// created. They are its live state's when this process holds it, the
// ending's (the user alone) when its end has begun, else its record's, as
// the store holds it (a tombstone's user for an ended session). Errors:
// ErrNotFound, the store's.
func (r *Registry) recordOf(ctx context.Context, token string) (store.Record, error) {
	r.mu.RLock()
	l, ending := r.live[token], r.ending[token]
	r.mu.RUnlock()
	switch {
	case l != nil:
		return store.Record{Token: token, Generation: l.gen, UserID: l.userID, Created: l.created}, nil
	case ending != nil:
		return store.Record{Token: token, UserID: ending.UserID}, nil
	}
	rec, err := r.st.Get(ctx, token)
	var ended *store.EndedError
	switch {
	case errors.As(err, &ended):
		return store.Record{Token: token, UserID: ended.UserID}, nil
	case err != nil:
		return store.Record{}, r.storeErr(token, err)
	}
	return rec, nil
}

// endLocked ends token's session as End does, without waiting for a
// re-creation of it under way (recreate calls it for the token it is
// re-creating). rec is the session's record as recordOf returns it, for
// the user it belongs to and, when this process holds no live state of
// it, the log line and the metric of its end. r.mu must be held; endLocked
// releases it.
func (r *Registry) endLocked(ctx context.Context, token string, reason store.EndReason, rec store.Record) error {
	if ended, ok := r.endingReason(token); ok {
		r.mu.Unlock()
		return ended
	}
	l := r.live[token]
	userID := rec.UserID
	if l != nil {
		r.removeLocked(l)
		userID = l.userID
	}
	r.hibernated.del(token)
	delete(r.lostHere, token)
	delete(r.above, token)
	r.ending[token] = &store.EndedError{Token: token, Reason: reason, UserID: userID}
	r.mu.Unlock()
	defer r.endDone(token)
	return r.ended(ctx, token, l, reason, rec)
}

// endingReason reports whether token's end has begun and not yet
// completed in the store, and how: its reason and the user the session
// belongs to. r.mu must be held (read or write).
func (r *Registry) endingReason(token string) (*store.EndedError, bool) {
	e, ok := r.ending[token]
	if !ok {
		return nil, false
	}
	ended := *e
	return &ended, true
}

// endedFor returns err, an error of a lookup of token by userID, as that
// user may see it: an ended session (a *store.EndedError) that belonged
// to another user becomes ErrForbidden, which answers exactly as a token
// that never existed, so that its tombstone tells nobody else that the
// session existed or why it ended (DESIGN.md, "Session lifecycle").
func endedFor(err error, token, userID string) error {
	var ended *store.EndedError
	if errors.As(err, &ended) && ended.UserID != userID {
		return fmt.Errorf("%w: session %s", ErrForbidden, store.Prefix(token))
	}
	return err
}

// endDone forgets that token's end is under way, once the store has
// ended its record (or failed to).
func (r *Registry) endDone(token string) {
	r.mu.Lock()
	delete(r.ending, token)
	r.mu.Unlock()
}

// ended ends token's session in the store with reason and closes l, its
// live state in this process (nil when there is none), which has left the
// registry already. A session ended without live state here (hibernated,
// or held by no process) is logged and measured from rec, its record, and
// what its hibernated engine session kept outside the process is released
// once the record has ended (engine.Releaser).
func (r *Registry) ended(ctx context.Context, token string, l *Live, reason store.EndReason, rec store.Record) error {
	err := r.endRecord(ctx, token, reason)
	if err == nil && l == nil {
		r.release(rec)
	}
	switch {
	case l != nil:
		l.close(replay.Reason(reason))
		l.logger.Info("session ended", "reason", string(reason))
		if err == nil {
			r.recordEnded(l, reason)
		}
	case err == nil && !rec.Created.IsZero():
		r.logger.Info("session ended", "session", store.Prefix(token), "generation", rec.Generation,
			"reason", string(reason), "live", false)
		r.opts.Metrics.SessionEnded(replay.Reason(reason), r.opts.Now().Sub(rec.Created))
	}
	return err
}

// recordEnded records l's session ended with reason, after the time it
// lived (mcp.server.session.duration).
func (r *Registry) recordEnded(l *Live, reason store.EndReason) {
	r.opts.Metrics.SessionEnded(replay.Reason(reason), r.opts.Now().Sub(l.created))
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
// which Close waits for, and ends the spans of its calls in flight with
// reason; once the registry is closed, it closes it at once.
func (r *Registry) closeInBackground(l *Live, reason replay.Reason) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		l.close(reason)
		return
	}
	r.closing.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.closing.Done()
		l.close(reason)
	}()
}

// Status returns what the registry knows of token for the replay decision,
// without starting anything: Live with the record's generation, Deleted,
// Evicted or Superseded for a tombstone or a session whose end has begun (End),
// Unknown otherwise (see StatusOf). The record of an ended session holds
// its token and the user it belonged to (UserID), for the caller to check
// the binding before it tells the status. Errors are the store's
// (store.ErrUnavailable).
func (r *Registry) Status(ctx context.Context, token string) (replay.Status, store.Record, error) {
	r.mu.RLock()
	ended, ending := r.endingReason(token)
	r.mu.RUnlock()
	if ending {
		st, _ := StatusOf(ended)
		return st, store.Record{Token: token, UserID: ended.UserID}, nil
	}
	rec, err := r.st.Get(ctx, token)
	if errors.As(err, &ended) {
		rec = store.Record{Token: token, UserID: ended.UserID}
	}
	if st, ok := StatusOf(err); ok {
		return st, rec, nil
	}
	return replay.Unknown, rec, err
}

// StatusOf returns the session status (replay.Status, row 2 of the table;
// DESIGN.md, "The replay decision") that an error of Get or Status means:
// nil is Live, ErrNotFound (or store.ErrNotFound) is Unknown, and an ended
// session (ErrEnded, a *store.EndedError) is what its end reason means
// (replay.EndedStatus: Deleted, Superseded or Evicted). For any other error
// (ErrForbidden, ErrClosed, a *fleet.RemoteError, the store's errors) ok is
// false: it says nothing of the session, and the caller reports it as it
// is.
func StatusOf(err error) (st replay.Status, ok bool) {
	var ended *store.EndedError
	switch {
	case err == nil:
		return replay.Live, true
	case errors.As(err, &ended):
		return replay.EndedStatus(replay.Reason(ended.Reason)), true
	case errors.Is(err, store.ErrEnded):
		return replay.Evicted, true // ended, and the error does not say why
	case errors.Is(err, ErrNotFound), errors.Is(err, store.ErrNotFound):
		return replay.Unknown, true
	}
	return replay.Unknown, false
}

// CallsInFlight returns the number of calls (requests with an id) in
// flight on the sessions whose live state this process holds. A call is
// in flight until its response is stored in the event log (made durable,
// on a store that promises it), so once none is, the high-water mark
// covers every answer.
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
// the next process. With Options.ReleaseOnClose it releases what the
// sessions it hibernated keep outside the process (engine.Releaser). With leases (Options.Lease > 0) it makes the leases
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
	var hibernated []string
	if _, releases := r.engine.(engine.Releaser); releases && r.opts.ReleaseOnClose {
		// A read of each hibernated record, at shutdown, only for an
		// engine that has something to release.
		hibernated = r.hibernatedTokensLocked()
	}
	r.mu.Unlock()
	for _, l := range all {
		l.close(replay.ReasonShutdown)
	}
	r.releaseLeases(all)
	r.closing.Wait()
	for _, token := range hibernated {
		if rec, err := r.st.Get(context.Background(), token); err == nil {
			r.release(rec)
		}
	}
	return nil
}

// storeErr maps a store error to the registry's errors.
func (r *Registry) storeErr(token string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: session %s", ErrNotFound, store.Prefix(token))
	}
	return err
}
