// Package memory is Tidemark's default store: session records and event logs
// in the process's memory. Everything is lost when the process exits, which is
// safe: a client of a lost session gets 404 and initializes again. Its
// durability promise is the process's lifetime.
package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Now returns the current time; it decides when tombstones expire.
	// Default: time.Now.
	Now func() time.Time
}

// Store is an in-memory store.Store. It is safe for concurrent use; calls for
// different sessions do not contend beyond a short map lookup.
type Store struct {
	now func() time.Time

	mu       sync.RWMutex
	sessions map[string]*session
	tombs    map[string]tomb
	ends     int // End calls since the last tombstone sweep
	closed   bool
}

type tomb struct {
	reason store.EndReason
	until  time.Time
}

type session struct {
	mu     sync.Mutex
	rec    store.Record
	events events // retained events, Seq contiguous from floor
	floor  uint64
	hwm    uint64
	bytes  int64
	ended  error // non-nil once End removed the session
	// notify is closed and cleared when waiters must look again; nil while
	// nobody waits, so that an append with no waiter allocates nothing.
	notify chan struct{}
}

// New returns an empty Store.
func New(opts Options) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, sessions: make(map[string]*session), tombs: make(map[string]tomb)}
}

var _ store.Store = (*Store)(nil)

// lookup returns the live session of token, or the error Get reports.
func (s *Store) lookup(token string) (*session, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("memory store: %w: closed", store.ErrUnavailable)
	}
	if ss, ok := s.sessions[token]; ok {
		return ss, nil
	}
	return nil, s.missingLocked(token)
}

// missingLocked returns the error for a token that has no live session.
func (s *Store) missingLocked(token string) error {
	if t, ok := s.tombs[token]; ok && s.now().Before(t.until) {
		return &store.EndedError{Token: token, Reason: t.reason}
	}
	return fmt.Errorf("memory store: session %s: %w", store.Prefix(token), store.ErrNotFound)
}

// Create implements store.Sessions.
func (s *Store) Create(ctx context.Context, rec store.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory store: %w: closed", store.ErrUnavailable)
	}
	if _, ok := s.sessions[rec.Token]; ok {
		return fmt.Errorf("memory store: create %s: %w", store.Prefix(rec.Token), store.ErrExists)
	}
	if _, ok := s.tombs[rec.Token]; ok {
		return fmt.Errorf("memory store: create %s: %w (tombstoned)", store.Prefix(rec.Token), store.ErrExists)
	}
	rec.State = clone(rec.State)
	s.sessions[rec.Token] = &session{rec: rec, floor: 1}
	return nil
}

// Get implements store.Sessions.
func (s *Store) Get(ctx context.Context, token string) (store.Record, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Record{}, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return store.Record{}, ss.ended
	}
	rec := ss.rec
	rec.State = clone(rec.State)
	return rec, nil
}

// Claim implements store.Sessions.
func (s *Store) Claim(ctx context.Context, token, owner string, from uint64, leaseUntil time.Time) (store.Record, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Record{}, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return store.Record{}, ss.ended
	}
	if ss.rec.Generation != from {
		return store.Record{}, &store.FencedError{Token: token, Op: "claim", Have: from, Want: ss.rec.Generation}
	}
	ss.rec.Generation = from + 1
	ss.rec.Owner = owner
	ss.rec.LeaseUntil = leaseUntil
	// Events of older generations can never be replayed again.
	ss.events = events{}
	ss.bytes = 0
	ss.floor = ss.hwm + 1
	ss.wakeLocked()
	rec := ss.rec
	rec.State = clone(rec.State)
	return rec, nil
}

// Renew implements store.Sessions.
func (s *Store) Renew(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) error {
	return s.fenced(token, "renew", gen, func(ss *session) error {
		if ss.rec.Owner != owner {
			return &store.FencedError{Token: token, Op: "renew", Have: gen, Want: ss.rec.Generation}
		}
		ss.rec.LeaseUntil = leaseUntil
		return nil
	})
}

// SaveState implements store.Sessions.
func (s *Store) SaveState(ctx context.Context, token string, gen uint64, state []byte) error {
	return s.fenced(token, "save state", gen, func(ss *session) error {
		ss.rec.State = clone(state)
		return nil
	})
}

// fenced runs f on the session of token under its lock if gen is current.
func (s *Store) fenced(token, op string, gen uint64, f func(*session) error) error {
	ss, err := s.lookup(token)
	if err != nil {
		return err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return ss.ended
	}
	if ss.rec.Generation != gen {
		return &store.FencedError{Token: token, Op: op, Have: gen, Want: ss.rec.Generation}
	}
	return f(ss)
}

// Touch implements store.Sessions.
func (s *Store) Touch(ctx context.Context, token string, at time.Time) error {
	ss, err := s.lookup(token)
	if err != nil {
		return err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return ss.ended
	}
	if at.After(ss.rec.LastSeen) {
		ss.rec.LastSeen = at
	}
	return nil
}

// End implements store.Sessions.
func (s *Store) End(ctx context.Context, token string, reason store.EndReason, until time.Time) error {
	s.mu.Lock()
	ss, ok := s.sessions[token]
	if !ok {
		err := s.missingLocked(token)
		s.mu.Unlock()
		if _, ended := err.(*store.EndedError); ended {
			return nil
		}
		return err
	}
	delete(s.sessions, token)
	s.tombs[token] = tomb{reason: reason, until: until}
	s.ends++
	if s.ends >= 1024 {
		s.ends = 0
		now := s.now()
		for t, tb := range s.tombs {
			if !now.Before(tb.until) {
				delete(s.tombs, t)
			}
		}
	}
	s.mu.Unlock()

	ss.mu.Lock()
	ss.ended = &store.EndedError{Token: token, Reason: reason}
	ss.events = events{}
	ss.bytes = 0
	ss.wakeLocked()
	ss.mu.Unlock()
	return nil
}

// Append implements store.Log.
func (s *Store) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Bounds{}, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return store.Bounds{}, ss.ended
	}
	if ss.rec.Generation != gen {
		return store.Bounds{}, &store.FencedError{Token: token, Op: "append", Have: gen, Want: ss.rec.Generation}
	}
	for i := range evs {
		ss.hwm++
		evs[i].Seq = ss.hwm
		evs[i].Generation = gen
		if evs[i].Stream == store.NewStream {
			evs[i].Stream = ss.hwm
		}
		ss.bytes += evs[i].Size()
	}
	ss.events.push(evs)
	ss.wakeLocked()
	return ss.boundsLocked(), nil
}

// Read implements store.Log.
func (s *Store) Read(ctx context.Context, token string, after uint64, max int) ([]store.Event, store.Bounds, error) {
	return s.ReadAppend(ctx, token, after, max, nil)
}

// ReadAppend is Read that appends the events to dst and returns the
// extended slice, so that a reader that keeps one buffer (eventlog.Reader)
// does not allocate a slice per read. Its results and errors are Read's;
// on an error dst is returned unchanged.
func (s *Store) ReadAppend(ctx context.Context, token string, after uint64, max int, dst []store.Event) ([]store.Event, store.Bounds, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return dst, store.Bounds{}, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return dst, store.Bounds{}, ss.ended
	}
	b := ss.boundsLocked()
	start := 0
	if after >= ss.floor {
		start = int(min(after-ss.floor+1, uint64(ss.events.n)))
	}
	if start >= ss.events.n || max <= 0 {
		return dst, b, nil
	}
	if dst == nil {
		dst = make([]store.Event, 0, min(ss.events.n-start, max))
	}
	return ss.events.appendTo(dst, start, max), b, nil
}

// Wait implements store.Log.
func (s *Store) Wait(ctx context.Context, token string, after uint64) error {
	ss, err := s.lookup(token)
	if err != nil {
		return err
	}
	ss.mu.Lock()
	if ss.ended != nil {
		ss.mu.Unlock()
		return ss.ended
	}
	if ss.hwm > after || ss.floor > after+1 {
		ss.mu.Unlock()
		return nil
	}
	ch := ss.waitChanLocked()
	gen := ss.rec.Generation
	ss.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
		ss.mu.Lock()
		switch {
		case ss.ended != nil:
			ss.mu.Unlock()
			return ss.ended
		case ss.hwm > after || ss.floor > after+1 || ss.rec.Generation != gen:
			ss.mu.Unlock()
			return nil
		}
		ch = ss.waitChanLocked()
		ss.mu.Unlock()
	}
}

// Trim implements store.Log.
func (s *Store) Trim(ctx context.Context, token string, gen uint64, floor uint64) (store.Bounds, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Bounds{}, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return store.Bounds{}, ss.ended
	}
	if ss.rec.Generation != gen {
		return store.Bounds{}, &store.FencedError{Token: token, Op: "trim", Have: gen, Want: ss.rec.Generation}
	}
	floor = min(floor, ss.hwm+1)
	if floor <= ss.floor {
		return ss.boundsLocked(), nil
	}
	ss.bytes -= ss.events.trim(int(floor - ss.floor))
	ss.floor = floor
	ss.wakeLocked()
	return ss.boundsLocked(), nil
}

// Bounds implements store.Log.
func (s *Store) Bounds(ctx context.Context, token string) (store.Bounds, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Bounds{}, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return store.Bounds{}, ss.ended
	}
	return ss.boundsLocked(), nil
}

// Close implements store.Store: later calls fail with ErrUnavailable.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (ss *session) boundsLocked() store.Bounds {
	b := store.Bounds{
		Generation: ss.rec.Generation,
		Floor:      ss.floor,
		HWM:        ss.hwm,
		Events:     ss.events.n,
		Bytes:      ss.bytes,
	}
	if e := ss.events.oldest(); e != nil {
		b.Oldest = e.Time
	}
	return b
}

// wakeLocked wakes every Wait on the session.
func (ss *session) wakeLocked() {
	if ss.notify != nil {
		close(ss.notify)
		ss.notify = nil
	}
}

// waitChanLocked returns the channel wakeLocked closes next.
func (ss *session) waitChanLocked() chan struct{} {
	if ss.notify == nil {
		ss.notify = make(chan struct{})
	}
	return ss.notify
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
