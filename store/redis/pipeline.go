package redis

// This file holds the pipelined Append (DESIGN.md, "Delivery rules"): an append assigns the
// sequences at once, queues the events and returns; one committer
// goroutine per Store sends each session's queued events as one append
// script call (one round trip, and with appendfsync always one fsync
// inside Redis, for many events), the calls of all sessions pipelined in
// one round trip, while producers append into the next batch. Readers read
// Redis, which holds only what its scripts stored and replies to no reader
// before its append-only file is written, so an event is visible only once
// Redis acknowledged it, and on a primary with replicas only once they
// hold it and its publication (roundtrip.go). Fencing stays in the script: each call checks the
// generation, and also that its first sequence is HWM+1, so no batch is
// ever stored after a gap.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/internal/pending"
)

// Bounds on one round trip, so that each stays well within
// Options.Timeout however much is queued: at most maxCallEvents events or
// maxCallBytes bytes per session's script call, and maxRoundTripBytes
// over all the calls of a round trip; the rest waits for the next one.
const (
	maxCallEvents     = 512
	maxCallBytes      = 1 << 20
	maxRoundTripBytes = 4 << 20
)

// A batch that Redis never ran (unexecuted: the primary it went to was
// replaced, or could not be reached) goes again in a later round trip, as
// long as resendWindow has not passed since the session's first such
// failure: a failover that is over by then costs no generation, while a
// primary that stays down ends the generation about as soon as an
// unpipelined append's 503 would. The committer pauses before each such
// round trip, resendPause and then twice the pause before, so that a
// store that stays down gets a few dials (go-redis's pool stops dialling
// for up to a second after as many failed dials as it has connections).
const (
	resendPause  = 50 * time.Millisecond
	resendWindow = time.Second
)

// sessIdle is how long a session's pipeline state outlives its last
// append; its next append after that learns the HWM from Redis again.
const sessIdle = time.Minute

// appendAtLua is the append script with one more check, after the
// generation and the failover guard (so that a primary that lost
// acknowledged events moves the session to a new generation rather than
// refusing the batch): ARGV's last element is the sequence the caller
// assigned to the first event, and anything but HWM+1 is refused with
// "gap" HWM.
var appendAtLua = func() string {
	const after = "if lost then return lost end\n"
	if !strings.Contains(appendLua, after) {
		panic("redis store: appendLua has no failover guard to place the gap check after")
	}
	return strings.Replace(appendLua, after, after+`local at = redis.call('HGET', rec, 'hwm')
if tonumber(at) + 1 ~= tonumber(ARGV[#ARGV]) then return {'gap', at} end
`, 1)
}()

// pipeline is the Store's pipelined append state.
type pipeline struct {
	script *goredis.Script
	limits pending.Limits
	linger time.Duration // Options.Linger, defaulted; negative: none
	// down is set while the last round trip to Redis failed: appends are
	// then stored before they return (appendFirst), so that during an
	// outage an append fails with ErrUnavailable and loses nothing,
	// instead of being accepted and losing its generation. The first
	// append that Redis stores clears it.
	down   atomic.Bool
	onLost func(token string, gen uint64, err error)
	// pause is the committer's next pause before a resend (resendPause);
	// zero after a round trip that resent nothing. The committer's alone.
	pause time.Duration

	mu    sync.Mutex
	sess  map[string]*psess
	dirty map[*psess]bool // sessions with queued events
	kick  chan struct{}   // cap 1: the committer has work
	done  chan struct{}   // closed when the committer has stopped
}

// psess is one session's pipeline state in this process.
type psess struct {
	token string
	// wmu serializes the session's Appends, Claim and End in this process.
	wmu sync.Mutex

	// Guarded by pipeline.mu:
	gen   uint64       // generation of next; 0: unknown
	next  uint64       // highest sequence assigned
	b     store.Bounds // bounds as Redis last reported them
	queue []store.Event
	lost  *store.LostError
	used  time.Time
	// resendBy is when a batch Redis never ran stops being sent again
	// (resendWindow after the first); zero while none is waiting.
	resendBy time.Time
	lostCx   context.Context // cancelled when the generation is lost
	loseFn   context.CancelFunc
	// settled, made by a Wait that waits for this process's own queued
	// events (waitQueued), is closed (and cleared) when a round trip
	// settles a batch of the session, or its pipeline state is forgotten.
	settled chan struct{}

	pend pending.Count
}

// init prepares the pipeline; header is the Store's expiry header
// (expiry.go), which starts every session script.
func (p *pipeline) init(limits pending.Limits, linger time.Duration, header string) {
	p.script = goredis.NewScript(header + appendAtLua)
	p.limits = limits.OrDefault()
	p.linger = linger
	if linger == 0 {
		p.linger = store.LingerMax
	}
	p.sess = make(map[string]*psess)
	p.dirty = make(map[*psess]bool)
	p.kick = make(chan struct{}, 1)
	p.done = make(chan struct{})
}

// get returns token's pipeline state, made when create is set (else nil).
func (p *pipeline) get(token string, create bool) *psess {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.sess[token]
	if ps == nil && create {
		ps = &psess{token: token}
		ps.lostCx, ps.loseFn = context.WithCancel(context.Background())
		p.sess[token] = ps
	}
	return ps
}

// Append implements store.Log, pipelined (see the file's comment). A
// session's first append in this process, or its first of a generation,
// is stored before it returns, to learn the HWM. It waits while the
// session's queued events exceed Options.MaxPendingEvents or
// MaxPendingBytes.
func (s *Store) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	p := &s.pl
	var ps *psess
	for {
		ps = p.get(token, true)
		ps.wmu.Lock()
		p.mu.Lock()
		current := p.sess[token] == ps
		p.mu.Unlock()
		if current {
			break
		}
		ps.wmu.Unlock() // forgotten by a Claim or End meanwhile (barrier)
	}
	defer ps.wmu.Unlock()
	p.mu.Lock()
	known, lost := ps.gen == gen && ps.gen != 0, ps.lost
	p.mu.Unlock()
	if known && lost != nil {
		return store.Bounds{}, lost
	}
	if !known || p.down.Load() {
		return s.appendFirst(ctx, ps, gen, evs)
	}
	var bytes int64
	for i := range evs {
		bytes += evs[i].Size()
	}
	if err := ps.pend.Reserve(ctx, len(evs), bytes, p.limits); err != nil {
		return store.Bounds{}, fmt.Errorf("redis store: append session %s gen %d: waiting for room: %w", store.Prefix(token), gen, err)
	}
	p.mu.Lock()
	if ps.lost != nil { // lost while this append waited for room
		lost := ps.lost
		p.mu.Unlock()
		ps.pend.Release(len(evs), bytes)
		return store.Bounds{}, lost
	}
	if s.closing.Err() != nil {
		p.mu.Unlock()
		ps.pend.Release(len(evs), bytes)
		return store.Bounds{}, fmt.Errorf("redis store: append session %s: %w: store closed", store.Prefix(token), store.ErrUnavailable)
	}
	for i := range evs {
		e := &evs[i]
		ps.next++
		e.Seq, e.Generation = ps.next, gen
		if e.Stream == store.NewStream {
			e.Stream = e.Seq
		}
		ps.queue = append(ps.queue, *e)
	}
	ps.used = s.now()
	p.dirty[ps] = true
	out := ps.b
	_, queued := ps.pend.Len()
	out.HWM, out.Bytes = ps.next, out.Bytes+queued
	if out.HWM >= out.Floor {
		out.Events = int(out.HWM - out.Floor + 1)
	}
	p.mu.Unlock()
	if p.linger > 0 && pending.Lingers(evs) {
		// Sent with the session's next append, or with any other
		// session's round trip, or after Options.Linger.
		time.AfterFunc(p.linger, p.wake)
	} else {
		p.wake()
	}
	return out, nil
}

// wake tells the committer that events are queued.
func (p *pipeline) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// appendFirst stores evs at once (appendNow) after the session's queued
// events, and makes its result the pipeline state of generation gen. It
// fails with the *store.LostError of gen when its queued events were lost.
func (s *Store) appendFirst(ctx context.Context, ps *psess, gen uint64, evs []store.Event) (store.Bounds, error) {
	if err := ps.pend.Drain(ctx); err != nil {
		return store.Bounds{}, err
	}
	s.pl.mu.Lock()
	lost := ps.lost
	if ps.gen != gen {
		lost = nil
	}
	s.pl.mu.Unlock()
	if lost != nil {
		return store.Bounds{}, lost
	}
	b, err := s.appendNow(ctx, ps.token, gen, evs)
	if err != nil {
		if errors.Is(err, store.ErrUnavailable) {
			s.pl.down.Store(true)
		}
		return b, err
	}
	s.pl.down.Store(false)
	s.pl.mu.Lock()
	ps.gen, ps.next, ps.b, ps.lost, ps.used = gen, b.HWM, b, nil, s.now()
	if ps.loseFn != nil && ps.lostCx.Err() != nil {
		ps.lostCx, ps.loseFn = context.WithCancel(context.Background())
	}
	s.pl.mu.Unlock()
	return b, nil
}

// Sync implements store.Log.
func (s *Store) Sync(ctx context.Context, token string) error {
	if ps := s.pl.get(token, false); ps != nil {
		if err := ps.pend.Drain(ctx); err != nil {
			return err
		}
		s.pl.mu.Lock()
		lost := ps.lost
		s.pl.mu.Unlock()
		if lost != nil {
			return lost
		}
	}
	_, err := s.Bounds(ctx, token)
	return err
}

// NotifyLost implements store.LossNotifier.
func (s *Store) NotifyLost(f func(token string, gen uint64, err error)) {
	s.pl.mu.Lock()
	s.pl.onLost = f
	s.pl.mu.Unlock()
}

// barrier waits, for Claim, Hibernate and End, until token's queued events are
// stored or lost, and holds the session's appends until the returned
// function runs, which forgets the pipeline state: the next append learns
// the new HWM and generation from Redis.
func (s *Store) barrier(ctx context.Context, token string) func() {
	ps := s.pl.get(token, false)
	if ps == nil {
		return func() {}
	}
	ps.wmu.Lock()
	ps.pend.Drain(ctx)
	return func() {
		s.pl.mu.Lock()
		ps.gen = 0
		ps.signal()
		if s.pl.sess[token] == ps {
			delete(s.pl.sess, token)
		}
		s.pl.mu.Unlock()
		ps.wmu.Unlock()
	}
}

// lostContext returns a context cancelled when generation gen of token is
// lost in this process (never, when nothing is known of it), and the
// *LostError then.
func (s *Store) lostContext(token string, gen uint64) (context.Context, func() error) {
	ps := s.pl.get(token, false)
	if ps == nil {
		return context.Background(), func() error { return nil }
	}
	s.pl.mu.Lock()
	defer s.pl.mu.Unlock()
	if ps.gen != gen {
		return context.Background(), func() error { return nil }
	}
	return ps.lostCx, func() error {
		s.pl.mu.Lock()
		defer s.pl.mu.Unlock()
		if ps.lost != nil {
			return ps.lost
		}
		return nil
	}
}

// batch is one session's part of a round trip.
type batch struct {
	ps  *psess
	gen uint64
	evs []store.Event
	n   int
	b   int64
	// Set by send: the bounds Redis reported (the reply after "ok"),
	// or why the batch was not stored and acknowledged, and whether
	// Redis never ran its script (unexecuted).
	rest   []any
	err    error
	unsent bool
	// Set by settle: the batch is queued again (see resendWindow), or
	// its room in the session's pending count was given back.
	resend, released bool
}

// commitLoop is the committer: it sends what is queued, one round trip
// at a time, until the Store closes, then sends what is left.
func (s *Store) commitLoop() {
	defer close(s.pl.done)
	sweep := time.NewTicker(sessIdle)
	defer sweep.Stop()
	for {
		select {
		case <-s.pl.kick:
			s.commitOnce()
		case <-sweep.C:
			s.sweepIdle()
		case <-s.closing.Done():
			s.commitOnce()
			return
		}
	}
}

// commitOnce sends every session's queued events, one script call per
// session, pipelined, and records the outcome; it repeats while more was
// queued meanwhile.
func (s *Store) commitOnce() {
	for {
		p := &s.pl
		p.mu.Lock()
		var bs []*batch
		var total int64
		for ps := range p.dirty {
			if total >= maxRoundTripBytes {
				break // the rest goes in the next round trip
			}
			if len(ps.queue) > 0 && ps.lost == nil {
				b := &batch{ps: ps, gen: ps.gen}
				for b.n < len(ps.queue) && b.n < maxCallEvents && b.b < maxCallBytes {
					b.b += ps.queue[b.n].Size()
					b.n++
				}
				b.evs = ps.queue[:b.n:b.n]
				ps.queue = ps.queue[b.n:]
				total += b.b
				bs = append(bs, b)
			}
			if len(ps.queue) == 0 || ps.lost != nil {
				ps.queue = nil
				delete(p.dirty, ps)
			}
		}
		p.mu.Unlock()
		if len(bs) == 0 {
			return
		}
		s.send(bs)
	}
}

// settle records b's outcome: the bounds Redis reported, or the loss of
// its generation (then its later queued events are dropped).
func (s *Store) settle(b *batch) *store.LostError {
	rest, err := b.rest, b.err
	if endsWrites(err) {
		s.marks.Delete(b.ps.token)
	}
	p := &s.pl
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := b.ps
	defer ps.signal()
	if err == nil {
		if ps.gen == b.gen {
			ps.b = decBounds(rest)
			ps.resendBy = time.Time{}
		}
		// In the same step as the bounds, which now count these events:
		// an Append in between would count them twice (bounds + pending).
		ps.pend.Release(b.n, b.b)
		b.released = true
		return nil
	}
	if ps.gen != b.gen || ps.lost != nil {
		return nil
	}
	if now := time.Now(); b.unsent && s.closing.Err() == nil && (ps.resendBy.IsZero() || now.Before(ps.resendBy)) {
		if ps.resendBy.IsZero() {
			ps.resendBy = now.Add(resendWindow)
		}
		q := make([]store.Event, 0, len(b.evs)+len(ps.queue))
		ps.queue = append(append(q, b.evs...), ps.queue...)
		p.dirty[ps] = true
		b.resend = true
		return nil
	}
	ps.lost = &store.LostError{Token: ps.token, Generation: b.gen, Seq: b.evs[0].Seq, Err: err}
	ps.loseFn()
	dropped := ps.queue
	ps.queue = nil
	var bytes int64
	for i := range dropped {
		bytes += dropped[i].Size()
	}
	if len(dropped) > 0 {
		// Released here, not by send: these events were never sent.
		defer ps.pend.Release(len(dropped), bytes)
	}
	return ps.lost
}

// sweepIdle forgets the pipeline state of sessions with nothing queued
// and no append for sessIdle.
func (s *Store) sweepIdle() {
	cutoff := s.now().Add(-sessIdle)
	p := &s.pl
	p.mu.Lock()
	defer p.mu.Unlock()
	for tok, ps := range p.sess {
		if len(ps.queue) == 0 && ps.used.Before(cutoff) && ps.wmu.TryLock() {
			if n, _ := ps.pend.Len(); n == 0 {
				ps.gen = 0
				ps.signal()
				delete(p.sess, tok)
			}
			ps.wmu.Unlock()
		}
	}
}

// signal wakes the Waits that wait for ps's queued events (waitQueued).
// The caller holds pipeline.mu.
func (ps *psess) signal() {
	if ps.settled != nil {
		close(ps.settled)
		ps.settled = nil
	}
}

// ownState is what this process knows of a session's events above a
// cursor (pipeline.own).
type ownState int

const (
	// notOwn: none of them is this process's queued or in-flight append
	// (or its pipeline state is forgotten): Redis answers.
	notOwn ownState = iota
	// ownLost: the generation that appended them is lost.
	ownLost
	// ownVisible: Redis acknowledged an event above the cursor.
	ownVisible
	// ownPending: the next events above the cursor are this process's
	// appends, queued or in flight, and none above it is visible yet.
	ownPending
)

// own returns what this process knows of token's events above after,
// with the lost generation's error for ownLost, under one lock. For a
// caller that will wait (wait set) and ownPending, it also returns the
// channel that settle closes next (psess.settled).
func (p *pipeline) own(token string, after uint64, wait bool) (ownState, *store.LostError, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.sess[token]
	if ps == nil {
		return notOwn, nil, nil
	}
	inFlight, _ := ps.pend.Len()
	switch {
	case ps.gen == 0 || ps.next <= after:
		return notOwn, nil, nil
	case ps.lost != nil:
		return ownLost, ps.lost, nil
	case ps.b.HWM > after:
		return ownVisible, nil, nil
	case inFlight == 0:
		return notOwn, nil, nil // nothing queued or in flight will move the HWM here
	}
	if !wait {
		return ownPending, nil, nil
	}
	if ps.settled == nil {
		ps.settled = make(chan struct{})
	}
	return ownPending, nil, ps.settled
}

// Queued reports, without a round trip, whether the next events of token
// above after are this process's own appends, queued or in flight, with
// none above after visible yet (ownPending): a Read would find nothing,
// and a Wait waits for this process's own round trip (waitQueued). A
// reader (eventlog.Reader) then waits before it reads. False when this
// process knows nothing of the session's appends (another process's
// appends are read from Redis).
func (s *Store) Queued(token string, after uint64) bool {
	st, _, _ := s.pl.own(token, after, false)
	return st == ownPending
}

// waitQueued is Wait for a session to which this process has appended
// events above after that are not visible yet: their round trip, not
// Redis, says when they are, so it waits for the committer to settle the
// session's batches instead of reading the session's bounds and blocking
// on its streams (three round trips each time a live reader catches up
// with its own process's appends). It reports whether it handled the
// Wait, and then returns what Wait returns: nil once the visible HWM
// Redis reported exceeds after, the generation's *store.LostError, or
// ctx.Err(). It does not handle (false) a session with no such events
// (notOwn: none queued or in flight, or its pipeline state forgotten by a
// Claim or End in this process), or a closing Store: Redis answers for
// those.
func (s *Store) waitQueued(ctx context.Context, token string, after uint64) (bool, error) {
	for {
		st, lost, settled := s.pl.own(token, after, true)
		switch st {
		case notOwn:
			return false, nil
		case ownLost:
			return true, lost
		case ownVisible:
			return true, nil
		}
		select {
		case <-settled:
		case <-ctx.Done():
			return true, ctx.Err()
		case <-s.closing.Done():
			return false, nil
		}
	}
}
