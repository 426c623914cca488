// hibernate.go holds hibernation (DESIGN.md, "Hibernation"): a session
// idle for Options.HibernateAfter gives up its engine session and its
// live state here, keeping only its record in the store, and the next
// request wakes it, at the same generation when the engine restores its
// state exactly, else at generation+1.

package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// exactKey is the member of a hibernated record's State that says the
// session hibernated with nothing in flight and its events stored, under
// an engine that restores its state exactly (engine.HibernateExact): only
// then may a wake keep the generation. Hibernate always writes the State
// anew, and only a record nobody holds (Owner empty) is woken, so the
// member says nothing once the session is held again.
const exactKey = "hibernatedExact"

// hibernatedExact reports whether a record's State carries exactKey.
func hibernatedExact(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	var m struct {
		Exact bool `json:"hibernatedExact"`
	}
	return json.Unmarshal(b, &m) == nil && m.Exact
}

// resumesKey is the member of an exactly hibernated record's State that
// holds how many streams of its generation have been resumed
// (Live.NextResume), absent when none: the wake keeps the generation, so
// the live state it starts, in whichever process, numbers the priming
// events of resumed streams on from there instead of from 1 again, and no
// priming event id of the generation is sent twice (DESIGN.md, "Cursors").
const resumesKey = "hibernatedResumes"

// hibernatedLive returns what a record's State carries for the live
// state that a wake at its generation, gen, starts: the number under
// resumesKey (0 when it carries none) and the ledger under ledgerKey
// (savedLedgerOf), both zero when the State cannot be read. One pass
// over the State reads both: a wake reads it whole several times already.
func hibernatedLive(b []byte, gen uint64) (resumes uint64, live ledger) {
	var m struct {
		Resumes uint64          `json:"hibernatedResumes"`
		Ledger  json.RawMessage `json:"hibernatedLedger"`
	}
	if len(b) == 0 || json.Unmarshal(b, &m) != nil {
		return 0, ledger{Generation: gen}
	}
	return m.Resumes, savedLedgerOf(m.Ledger, gen)
}

// encodeHibernated is encodeState with live, the ledger of the generation
// that hibernates, under ledgerKey when it has streams, and, when exact,
// exactKey set and then resumes, the streams of the generation resumed so
// far, under resumesKey when there were any. A hibernation that is not
// exact keeps no count: its wake starts generation+1, whose priming event
// ids differ from every earlier one in their generation part
// (replay.Cursor).
func encodeHibernated(st *engine.State, prior []ledger, live ledger, exact bool, resumes uint64) ([]byte, error) {
	b, err := encodeState(st, prior)
	if err != nil || (!exact && len(live.Streams) == 0) {
		return b, err
	}
	m := map[string]json.RawMessage{}
	if len(b) > 0 && string(b) != "null" {
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
	}
	if len(live.Streams) > 0 {
		if m[ledgerKey], err = json.Marshal(savedLedger(live)); err != nil {
			return nil, err
		}
	}
	if exact {
		m[exactKey] = json.RawMessage("true")
		if resumes > 0 {
			m[resumesKey] = strconv.AppendUint(nil, resumes, 10)
		}
	}
	return json.Marshal(m)
}

// hibernates reports whether this registry hibernates idle sessions.
func (r *Registry) hibernates() bool {
	return r.hib != engine.HibernateNever && r.opts.HibernateAfter > 0
}

// hibernateBatch is the most sessions hibernateIdle takes out of the
// registry at once: the starting map grows to hold them, and a Go map
// keeps its size once grown.
const hibernateBatch = 256

// hibernateIdle hibernates every session of lives (Registry.lives) that
// has been idle since before cutoff (Options.HibernateAfter ago), with no
// call in flight and no connection attached. It returns the number of
// sessions whose hibernation the store kept.
func (r *Registry) hibernateIdle(ctx context.Context, lives []*Live) int {
	if !r.hibernates() {
		return 0
	}
	now := r.opts.Now()
	cutoff := now.Add(-r.opts.HibernateAfter)
	var idle []*Live
	for _, l := range lives {
		if l.idleSince().Before(cutoff) {
			idle = append(idle, l)
		}
	}
	return r.hibernateAll(ctx, idle, now, hibIdle)
}

// hibernateAll hibernates those of lives that may hibernate at now for
// cause (beginHibernate), hibernateBatch at a time. Each leaves the
// registry in the same step under mu as it is chosen, and its token is
// marked as starting, so a request that arrives meanwhile waits and then
// wakes it from the record. No batch starts once ctx is done. It returns
// the number of sessions whose hibernation the store kept.
func (r *Registry) hibernateAll(ctx context.Context, lives []*Live, now time.Time, cause hibCause) int {
	var stored atomic.Int64
	for len(lives) > 0 && ctx.Err() == nil {
		n := min(len(lives), hibernateBatch)
		batch := lives[:n]
		lives = lives[n:]
		chosen := batch[:0]
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return int(stored.Load())
		}
		for _, l := range batch {
			if _, busy := r.starting[l.token]; busy || r.live[l.token] != l || l.dead() || !l.beginHibernate(now, cause) {
				continue
			}
			r.removeLocked(l)
			r.starting[l.token] = make(chan struct{})
			chosen = append(chosen, l)
		}
		r.mu.Unlock()
		// A request for a chosen session waits until its hibernation is
		// stored: hibernate the batch a few at once, so that neither that
		// wait nor the sweep is a batch of store round trips in a row.
		sem := make(chan struct{}, hibernateParallel)
		var wg sync.WaitGroup
		for _, l := range chosen {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if ok, _ := r.hibernate(ctx, l, cause); ok {
					stored.Add(1)
				}
			})
		}
		wg.Wait()
	}
	r.mu.Lock()
	r.compactLocked()
	r.mu.Unlock()
	return int(stored.Load())
}

// compactLocked makes live and the eviction order anew at their size
// once they hold under a quarter of the most they held: a Go map, and a
// slice's array, keep the room of the most they held, which would
// otherwise stay with each session that hibernated. Its cost, one copy
// of what remains, is paid once per fourfold shrink. The caller holds
// r.mu.
func (r *Registry) compactLocked() {
	n := len(r.live)
	if r.liveMax < 64 || n >= r.liveMax/4 {
		return
	}
	live := make(map[string]*Live, n)
	maps.Copy(live, r.live)
	r.live, r.liveMax = live, n
	if cap(r.lru) > 2*len(r.lru) {
		r.lru = slices.Clone(r.lru)
	}
}

// hibernateParallel is how many sessions of a batch hibernateIdle
// hibernates at once: each is a log sync and a store write, round trips
// to Redis or a group commit of the durable store, which overlap.
const hibernateParallel = 16

// hibCause is why the registry hibernates a session (beginHibernate).
type hibCause int

const (
	// hibIdle: the sweep, for a session idle for longer than
	// HibernateAfter.
	hibIdle hibCause = iota
	// hibRoom: another session needs its room (Options.MaxSessions).
	hibRoom
	// hibHandOver: the process shuts down (Registry.HandOver).
	hibHandOver
)

// logLevel is the level of the "session hibernated" line of a session
// hibernated for c: Debug at a handover, which hibernates every idle
// session in the last seconds of the process and whose caller logs one
// line for them all (tidemark serve's "sessions handed over"), Info for
// the sweep and for making room.
func (c hibCause) logLevel() slog.Level {
	if c == hibHandOver {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// beginHibernate marks l hibernating if it may hibernate at now for
// cause (mayHibernate): its initialize succeeded, and it has had no call
// in flight, no response being stored, no connection attached and no
// request being served (holdFor), for longer than HibernateAfter unless
// its room is needed or the process hands it over. Get's hold and this
// check exclude each other under l.mu, so a request that found l before
// it left the registry either holds it first or finds it hibernating and
// looks it up again.
func (l *Live) beginHibernate(now time.Time, cause hibCause) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.beginHibernateLocked(now, cause)
}

// beginHibernateLocked is beginHibernate with l.mu held.
func (l *Live) beginHibernateLocked(now time.Time, cause hibCause) bool {
	if l.hibernating || !mayHibernate(idleness{
		initialized:  !l.initFailed && len(l.state.InitializeParams) > 0,
		busy:         len(l.calls) + l.storing + l.attached + len(l.holds),
		served:       l.servedHoldsLocked(),
		idle:         now.Sub(l.lastSeen),
		after:        l.reg.opts.HibernateAfter,
		engine:       l.reg.hib,
		room:         cause == hibRoom,
		handover:     cause == hibHandOver,
		failures:     l.hibFailures,
		sinceFailure: now.Sub(l.hibFailed),
	}) {
		return false
	}
	l.hibernating = true
	return true
}

// holdFor records activity now, as Touch does, and keeps l from
// hibernating until ctx is done (the request that looked it up is being
// served: an http.Request's context ends when its handler returns),
// unless l is hibernating already: then it reports false, and the caller
// looks the session up again. A ctx that never ends (Done is nil) holds
// nothing.
func (l *Live) holdFor(ctx context.Context) bool {
	l.mu.Lock()
	if l.hibernating {
		l.mu.Unlock()
		return false
	}
	hold := ctx.Done() != nil && (l.reg.hibernates() || l.reg.handsOver())
	if hold {
		l.holds = append(l.holds, ctx)
	}
	l.mu.Unlock()
	if hold {
		context.AfterFunc(ctx, l.unhold)
	}
	l.Touch()
	return true
}

// unhold ends a hold of holdFor, whose context is done; the session's
// idle time starts then, and it may give its room to another session
// again (unparkLocked). It removes one hold whose context is done, not
// necessarily its own: each such hold's unhold removes one, so the holds
// left are those whose unhold has not run.
func (l *Live) unhold() {
	now := l.reg.opts.Now()
	l.mu.Lock()
	for i, ctx := range l.holds {
		if ctx.Err() != nil {
			last := len(l.holds) - 1
			l.holds[i] = l.holds[last]
			l.holds[last] = nil // the slot keeps no request's context
			l.holds = l.holds[:last]
			break
		}
	}
	if now.After(l.lastSeen) {
		l.lastSeen = now
	}
	unpark := l.unparkLocked()
	l.mu.Unlock()
	if unpark {
		l.reg.unpark(l)
	}
}

// servedHoldsLocked returns the number of l's holds whose request has
// been served (its context is done) and whose unhold has not run yet:
// context.AfterFunc runs it in a goroutine of its own, which may run after
// the handler's return has been seen elsewhere (http.Server.Shutdown
// returns once the connection is idle). l.mu must be held.
func (l *Live) servedHoldsLocked() int {
	n := 0
	for _, ctx := range l.holds {
		if ctx.Err() != nil {
			n++
		}
	}
	return n
}

// hibernate stores l's session state, with what its engine session keeps
// outside the process (engine.Suspender), and lets go of its generation
// (store.Sessions.Hibernate), then closes its engine session; stored
// reports that the store kept it, which it logs at cause's level
// (hibCause.logLevel). A hibernation the store refused while
// unavailable (keepsAwake) puts l back in the registry, awake at its
// generation, and returns the store's error (awake): the sweep tries again
// after hibernateRetry, and making room refuses the room instead of
// ending a session its client still uses. Any other refusal ends the
// generation here (stored false, awake nil): the next request claims
// generation+1. The record says the hibernation is exact when the engine
// restores state exactly and every event l appended is stored (the log
// is synced first), so a kill -9 after it loses nothing a wake at the
// same generation would need (DESIGN.md, "Hibernation").
func (r *Registry) hibernate(ctx context.Context, l *Live, cause hibCause) (stored bool, awake error) {
	err := r.settle(ctx, l)
	if errors.Is(err, errLeaseLost) {
		// Not this process's generation any more: settle dropped it.
		r.doneStarting(l.token)
		return false, nil
	}
	attempted, exact := false, r.hib == engine.HibernateExact
	l.mu.Lock()
	// No call is in flight once l is hibernating (beginHibernate): the
	// ledger's streams change no more.
	st, seen, live := l.state, l.lastSeen, l.ledger
	l.mu.Unlock()
	sp, keeps := l.eng.(engine.Suspender)
	if err == nil {
		err = r.log.Sync(ctx, l.token)
	}
	var b []byte
	if err == nil {
		if keeps {
			st.Suspended = sp.Suspension()
		}
		// No request is served from l once it is hibernating
		// (beginHibernate): the count is final.
		b, err = encodeHibernated(&st, l.prior, live, exact, l.resumes.Load())
	}
	if err == nil {
		// The store's LastSeen decides idle eviction of the record from
		// now on (recreate, the durable store's sweep).
		r.st.Touch(ctx, l.token, seen)
		attempted = true
		err = r.st.Hibernate(ctx, l.token, r.opts.Owner, l.gen, b)
	}
	if err == nil && !exact {
		// Its wake claims generation+1, whose floor is past every event
		// it retains: no cursor can replay them, so they go now rather
		// than stay for as long as it hibernates. Only once the store kept
		// the hibernation: a session the store refused stays awake at its
		// generation, every cursor still replaying. The session is still
		// starting here, so no request of this process claims it first; a
		// failed trim keeps the events until that claim.
		r.log.Drop(ctx, l.token, l.gen)
	}
	if err == nil && exact && !r.log.Budgeted() {
		// Without a process budget the log's accounting of the session
		// serves only the age limit, which its next append applies.
		r.log.Forget(l.token)
	}
	if err == nil && keeps && st.Suspended != nil {
		sp.Keep() // stored: the Close below lets go of it without ending it
	}
	if err != nil && keepsAwake(err) && r.keepAwake(l, attempted) {
		l.mu.Lock()
		n := l.hibFailures
		l.mu.Unlock()
		reason := storeReason(err)
		r.warnHibFailure(l, hibFailure{awake: true, reason: reason},
			"hibernation failed; the session stays awake at its generation, and the sweep tries again later",
			"reason", reason, "failures", n, "retry_in", hibernateRetry(n, r.opts.HibernateAfter), "error", err)
		return false, err
	}
	r.mu.Lock()
	if err == nil && !r.closed {
		h := hibernation{seen: seen.UnixNano()}
		if exact {
			h.gen = l.gen
		}
		r.hibernated.set(l.token, h)
	}
	r.doneStartingLocked(l.token)
	r.mu.Unlock()
	if err != nil {
		reason := storeReason(err)
		r.warnHibFailure(l, hibFailure{reason: reason},
			"hibernation failed: this generation ends here; the next request re-creates the session at generation+1",
			"reason", reason, "error", err)
	} else {
		l.logger.Log(context.Background(), cause.logLevel(), "session hibernated", "exact", exact)
		r.opts.Metrics.SessionHibernated()
	}
	r.closeInBackground(l, replay.ReasonHibernated)
	return err == nil, nil
}

// hibWarnInterval is the least time between two WARN lines of one kind
// of hibernation failure (hibFailure): a store outage fails the
// hibernation of every idle session at every sweep, the same way.
const hibWarnInterval = time.Second

// hibFailure is a kind of hibernation failure, the key of
// Registry.hibWarns: whether the session stays awake (keepsAwake) or its
// generation ends, whether it was a wake's letting go of the session
// again (letGo), and the store's reason (storeReason).
type hibFailure struct {
	awake  bool
	letGo  bool
	reason replay.Reason
}

// warnHibFailure logs msg with attrs on l's logger, which adds its
// session token prefix and generation: at WARN when the gate lets a line
// of kind through (one per hibWarnInterval), with suppressed, the number
// of that kind's lines held back since the last one, when there were
// any; at DEBUG otherwise.
func (r *Registry) warnHibFailure(l *Live, kind hibFailure, msg string, attrs ...any) {
	r.gatedWarn(l.logger, kind, msg, attrs...)
}

// gatedWarn is warnHibFailure on logger.
func (r *Registry) gatedWarn(logger *slog.Logger, kind hibFailure, msg string, attrs ...any) {
	level := slog.LevelDebug
	if ok, n := r.hibWarns.Pass(kind); ok {
		level = slog.LevelWarn
		if n > 0 {
			attrs = append(attrs, "suppressed", n)
		}
	}
	logger.Log(context.Background(), level, msg, attrs...)
}

// keepAwake puts l, whose hibernation the store refused, back in the
// registry as it was before the sweep chose it, and records the failure
// (the sweep's backoff); attempted says the refused write reached the
// store, whose record may then have no owner (settle). It reports false,
// changing nothing, when the registry has closed meanwhile.
func (r *Registry) keepAwake(l *Live, attempted bool) bool {
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	l.mu.Lock()
	l.hibernating = false
	l.hibFailures++
	l.hibFailed = now
	l.unsettled = l.unsettled || attempted
	l.mu.Unlock()
	r.live[l.token] = l
	r.liveMax = max(r.liveMax, len(r.live))
	r.lru.add(l)
	r.doneStartingLocked(l.token)
	return true
}

// doneStarting ends the mark of token as starting, which requests for it
// wait on.
func (r *Registry) doneStarting(token string) {
	r.mu.Lock()
	r.doneStartingLocked(token)
	r.mu.Unlock()
}

// doneStartingLocked is doneStarting with r.mu held.
func (r *Registry) doneStartingLocked(token string) {
	if done, ok := r.starting[token]; ok {
		delete(r.starting, token)
		close(done)
	}
}

// isUnsettled reports l.unsettled (settle).
func (l *Live) isUnsettled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unsettled
}

// settle confirms that l, after a hibernation the store refused although
// its write may have happened (l.unsettled), still holds its generation
// in the store, before l serves again or hibernates: a record left with
// no owner at l's generation is taken again (store.Sessions.Wake), so
// no other process wakes it while l serves; a record that l's owner still
// holds at l's generation is as it was. Either way nothing a client holds
// changed: the generation, its floor and its events are l's. A record
// another owner holds, or a session ended, is not l's: l is dropped and
// the error wraps errLeaseLost. A store that fails leaves l unsettled and
// returns its error (store.ErrUnavailable: the request answers 503).
func (r *Registry) settle(ctx context.Context, l *Live) error {
	if !l.isUnsettled() {
		return nil
	}
	until := r.lease.Grant(r.opts.Now())
	_, err := r.st.Wake(ctx, l.token, r.opts.Owner, l.gen, until)
	woke := err == nil
	if errors.Is(err, store.ErrFenced) {
		// Held: by this process if the refused write never happened.
		rec, gerr := r.st.Get(ctx, l.token)
		switch {
		case gerr != nil:
			err = gerr
		case rec.Generation == l.gen && rec.Owner == r.opts.Owner:
			err = nil
		}
	}
	if reason := fleet.LostReason(err); reason != "" {
		r.drop(l, reason, err)
		return fmt.Errorf("%w: %w", errLeaseLost, err)
	}
	if err != nil {
		return fmt.Errorf("session %s gen %d: confirm the record after a failed hibernation: %w", store.Prefix(l.token), l.gen, err)
	}
	if woke {
		l.setLease(until)
	}
	l.mu.Lock()
	l.unsettled = false
	l.mu.Unlock()
	return nil
}

// endIdleHibernated ends the hibernated sessions this process indexes
// as last used before cutoff (IdleTTL ago), as store.EndIdle, each only
// if its record agrees (endIdleRecord).
func (r *Registry) endIdleHibernated(ctx context.Context, cutoff time.Time) {
	c := cutoff.UnixNano()
	var idle []string
	r.mu.RLock()
	r.hibernated.each(func(k tokenKey, long string, h hibernation) bool {
		if h.seen < c {
			if long == "" {
				long = k.String()
			}
			idle = append(idle, long)
		}
		return true
	})
	r.mu.RUnlock()
	for _, tok := range idle {
		r.endIdleRecord(ctx, tok, cutoff)
	}
}

// endIdleRecord ends token's session as idle if its record is still
// hibernated (no owner) and unused since before cutoff. The index entry
// this process keeps says only what was true when it hibernated the
// session: in a fleet another replica may have woken it since (it is
// then that replica's to end: the entry goes) or used it and hibernated
// it again (LastSeen moved: the entry moves with it). The record is taken
// at its generation (store.Sessions.Wake) before it ends, so that a
// replica waking it at the same moment is fenced out rather than ended
// under. A store that fails leaves the entry for the next sweep.
func (r *Registry) endIdleRecord(ctx context.Context, token string, cutoff time.Time) {
	rec, err := r.st.Get(ctx, token)
	var ended *store.EndedError
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.As(err, &ended):
		r.unindex(token, 0)
		return
	case err != nil:
		return
	case rec.Owner != "":
		r.unindex(token, 0)
		return
	case !rec.LastSeen.Before(cutoff):
		r.unindex(token, rec.LastSeen.UnixNano())
		return
	}
	if _, err := r.st.Wake(ctx, token, r.opts.Owner, rec.Generation, r.lease.Grant(r.opts.Now())); err != nil {
		var fe *store.FencedError
		if errors.As(err, &fe) || errors.Is(err, store.ErrNotFound) || errors.As(err, &ended) {
			r.unindex(token, 0)
		}
		return
	}
	r.End(ctx, token, store.EndIdle)
}

// unindex drops token from the index of sessions this process hibernated
// (seen 0), or moves its last use to seen.
func (r *Registry) unindex(token string, seen int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.hibernated.get(token)
	if !ok {
		return
	}
	if seen == 0 {
		r.hibernated.del(token)
	} else {
		h.seen = seen
		r.hibernated.set(token, h)
	}
}

// Hibernated returns the number of sessions this process hibernated since
// it started and has not seen woken or ended since: the index is in
// memory, so a session hibernated before a restart is not counted.
func (r *Registry) Hibernated() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.hibernated.len()
}

// hibernation is the registry's index entry of a session it hibernated.
type hibernation struct {
	// seen is when the session was last used (Unix nanoseconds), for the
	// idle TTL.
	seen int64
	// gen is the generation it hibernated at when it hibernated exactly
	// (its record carries exactKey), 0 otherwise.
	gen uint64
}

// wake takes rec, a session hibernated exactly at its generation, back
// at that generation (store.Sessions.Wake) and starts its live state
// from st, keeping the event log, so every cursor a client holds of the
// generation still resumes. The room it starts in was reserved by the
// caller (start gives it back on failure). Errors are the store's:
// a *store.FencedError when another process woke or claimed it first.
func (r *Registry) wake(ctx context.Context, rec store.Record, st *engine.State, prior []ledger) (*Live, error) {
	woken, err := r.st.Wake(ctx, rec.Token, r.opts.Owner, rec.Generation, r.lease.Grant(r.opts.Now()))
	if err != nil {
		r.unreserve()
		return nil, err
	}
	return r.startWoken(ctx, woken, st, prior)
}

// startWoken starts the live state of woken, the record Wake returned,
// from st, numbering its resumed streams on from the count the
// hibernation stored (resumesKey). On failure it lets go of the session again, as it was, so a
// later request may wake it at this generation still (an engine at
// capacity now, say).
func (r *Registry) startWoken(ctx context.Context, woken store.Record, st *engine.State, prior []ledger) (*Live, error) {
	l, err := r.start(ctx, woken, st, prior, true)
	if err != nil {
		r.letGo(ctx, woken)
		return nil, err
	}
	l.logger.Info("session woke")
	return l, nil
}

// saveWake makes the wake that started l durable, if l woke at its
// generation and nothing has yet: it stores l's state (a synced write,
// fenced by the generation), so that from then on a crash leaves the
// record held by this process, whose successor claims generation+1,
// rather than hibernated as the wake found it (a durable wake is not
// synced; DESIGN.md, "Hibernation"). Concurrent callers wait for the one
// write; a failed write is tried again by the next caller.
func (l *Live) saveWake(ctx context.Context) error {
	l.wakeMu.Lock()
	defer l.wakeMu.Unlock()
	if !l.wakeUnsaved {
		return nil
	}
	if err := l.saveState(ctx, l.State()); err != nil {
		return err
	}
	l.wakeUnsaved = false
	return nil
}

// letGo hibernates woken again, with the state it woke with, after a wake
// that does not go on.
func (r *Registry) letGo(ctx context.Context, woken store.Record) {
	if herr := r.st.Hibernate(context.WithoutCancel(ctx), woken.Token, r.opts.Owner, woken.Generation, woken.State); herr != nil {
		reason := storeReason(herr)
		r.gatedWarn(r.logger, hibFailure{letGo: true, reason: reason},
			"waking failed, and letting go of the session again failed too; the next request re-creates it at generation+1",
			"session", store.Prefix(woken.Token), "generation", woken.Generation, "reason", reason, "error", herr)
	}
}

// wakeIndexed wakes token for userID when this registry's index says it
// hibernated it exactly, with store.Sessions.Wake alone (one store
// operation: the record comes back with it) instead of a read of the
// record and then Wake. It reports done false, having changed nothing,
// when the index does not say so or the store's record is not that any
// more (woken or claimed elsewhere, ended, of another user, idle beyond
// IdleTTL, not exact): the caller then decides from the record
// (recreate).
func (r *Registry) wakeIndexed(ctx context.Context, token, userID string) (l *Live, done bool, err error) {
	r.mu.RLock()
	h, _ := r.hibernated.get(token)
	r.mu.RUnlock()
	if h.gen == 0 || r.hib != engine.HibernateExact {
		return nil, false, nil
	}
	if err := r.reserve(ctx); err != nil {
		return nil, true, err
	}
	now := r.opts.Now()
	woken, err := r.st.Wake(ctx, token, r.opts.Owner, h.gen, r.lease.Grant(now))
	if err != nil {
		r.unreserve()
		if errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrEnded) {
			return nil, false, nil
		}
		return nil, true, r.storeErr(token, err)
	}
	st, prior, derr := decodeState(woken.State)
	idle := r.opts.IdleTTL > 0 && now.Sub(woken.LastSeen) > r.opts.IdleTTL
	if derr != nil || idle || woken.UserID != userID || !hibernatedExact(woken.State) {
		r.letGo(ctx, woken)
		r.unreserve()
		return nil, false, nil
	}
	if l, err = r.startWoken(ctx, woken, st, prior); err != nil {
		return nil, true, r.storeErr(token, err)
	}
	r.opts.Metrics.SessionWoke(true)
	return l, true, nil
}
