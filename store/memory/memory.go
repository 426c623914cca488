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
	"github.com/tidemark-mcp/tidemark/store/internal/image"
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

	tasks taskTable
}

type tomb struct {
	reason store.EndReason
	userID string // the ended record's UserID
	until  time.Time
}

// session is a live session: its image, and the events its log retains,
// Seq contiguous from the image's Floor. The events are nil while the log
// retains none, as after a claim or a trim to HWM+1 (a session that
// hibernates to wake at generation+1 has its log emptied so), and the
// struct is then 280 bytes (the 288-byte size class), with nothing else
// allocated for the log (TestSessionSize).
type session struct {
	image.Image
	events *events
}

// held returns the number of events the log retains.
func (ss *session) held() int {
	if ss.events == nil {
		return 0
	}
	return ss.events.n
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
		return &store.EndedError{Token: token, Reason: t.reason, UserID: t.userID}
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
	rec.State, rec.Openings = image.Clone(rec.State), nil
	s.sessions[rec.Token] = &session{Image: image.Image{Rec: rec, Floor: 1}}
	return nil
}

// Get implements store.Sessions.
func (s *Store) Get(ctx context.Context, token string) (store.Record, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Record{}, err
	}
	return ss.Record()
}

// Claim implements store.Sessions.
func (s *Store) Claim(ctx context.Context, token, owner string, from uint64, leaseUntil time.Time) (store.Record, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Record{}, err
	}
	ss.Lock()
	defer ss.Unlock()
	if err := ss.CheckLocked("claim", from); err != nil {
		return store.Record{}, err
	}
	rec := ss.Rec
	rec.Generation, rec.Owner, rec.LeaseUntil, rec.Openings = from+1, owner, leaseUntil, nil
	ss.ClaimLocked(rec)
	ss.events = nil
	return ss.RecordLocked()
}

// Renew implements store.Sessions.
func (s *Store) Renew(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) error {
	return s.fenced(token, "renew", gen, func(ss *session) error {
		if ss.Rec.Owner != owner {
			return &store.FencedError{Token: token, Op: "renew", Have: gen, Want: ss.Rec.Generation}
		}
		ss.Rec.LeaseUntil = leaseUntil
		return nil
	})
}

// SaveState implements store.Sessions.
func (s *Store) SaveState(ctx context.Context, token string, gen uint64, state []byte) error {
	return s.fenced(token, "save state", gen, func(ss *session) error {
		ss.Rec.State = image.Clone(state)
		return nil
	})
}

// Hibernate implements store.Sessions.
func (s *Store) Hibernate(ctx context.Context, token, owner string, gen uint64, state []byte) error {
	return s.fenced(token, "hibernate", gen, func(ss *session) error {
		if ss.Rec.Owner != owner {
			return &store.FencedError{Token: token, Op: "hibernate", Have: gen, Want: ss.Rec.Generation}
		}
		ss.Rec.State = image.Clone(state)
		ss.Rec.Owner, ss.Rec.LeaseUntil = "", time.Time{}
		if ss.events != nil {
			ss.events.freeze()
		}
		return nil
	})
}

// Wake implements store.Sessions.
func (s *Store) Wake(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) (store.Record, error) {
	var rec store.Record
	err := s.fenced(token, "wake", gen, func(ss *session) error {
		if ss.Rec.Owner != "" {
			return &store.FencedError{Token: token, Op: "wake", Have: gen, Want: ss.Rec.Generation}
		}
		if ss.Lost != nil {
			return ss.Lost
		}
		ss.Rec.Owner, ss.Rec.LeaseUntil = owner, leaseUntil
		var err error
		rec, err = ss.RecordLocked()
		return err
	})
	return rec, err
}

// fenced runs f on the session of token under its lock if gen is current.
func (s *Store) fenced(token, op string, gen uint64, f func(*session) error) error {
	ss, err := s.lookup(token)
	if err != nil {
		return err
	}
	ss.Lock()
	defer ss.Unlock()
	if err := ss.CheckLocked(op, gen); err != nil {
		return err
	}
	return f(ss)
}

// Touch implements store.Sessions.
func (s *Store) Touch(ctx context.Context, token string, at time.Time) error {
	ss, err := s.lookup(token)
	if err != nil {
		return err
	}
	ss.Lock()
	defer ss.Unlock()
	if ss.Ended != nil {
		return ss.Ended
	}
	if at.After(ss.Rec.LastSeen) {
		ss.Rec.LastSeen = at
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
	ss.Lock() // s.mu before a session's lock: no path takes them the other way
	user := ss.Rec.UserID
	ss.Unlock()
	s.tombs[token] = tomb{reason: reason, userID: user, until: until}
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

	ss.Lock()
	ss.EndLocked(reason)
	ss.events = nil
	ss.Unlock()
	return nil
}

// Append implements store.Log.
func (s *Store) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Bounds{}, err
	}
	ss.Lock()
	defer ss.Unlock()
	if err := ss.CheckLocked("append", gen); err != nil {
		return store.Bounds{}, err
	}
	if len(evs) > 0 && ss.held() == 0 {
		ss.Oldest = evs[0].Time
	}
	for i := range evs {
		ss.HWM++
		evs[i].Seq = ss.HWM
		evs[i].Generation = gen
		if evs[i].Stream == store.NewStream {
			evs[i].Stream = ss.HWM
		}
		evs[i].Linger = false // stored at once: nothing to hold back
		ss.Bytes += evs[i].Size()
	}
	if len(evs) > 0 {
		if ss.events == nil {
			ss.events = new(events)
		}
		ss.events.push(evs)
	}
	ss.WakeLocked()
	return ss.BoundsLocked(), nil
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
	ss.Lock()
	defer ss.Unlock()
	if ss.Ended != nil {
		return dst, store.Bounds{}, ss.Ended
	}
	b := ss.BoundsLocked()
	n := ss.held()
	start := 0
	if after >= ss.Floor {
		start = int(min(after-ss.Floor+1, uint64(n)))
	}
	if start >= n || max <= 0 {
		return dst, b, nil
	}
	if dst == nil {
		dst = make([]store.Event, 0, min(n-start, max))
	}
	return ss.events.appendTo(dst, start, max), b, nil
}

// Wait implements store.Log.
func (s *Store) Wait(ctx context.Context, token string, after uint64) error {
	ss, err := s.lookup(token)
	if err != nil {
		return err
	}
	return ss.Wait(ctx, after, nil, nil)
}

// Trim implements store.Log.
func (s *Store) Trim(ctx context.Context, token string, gen uint64, floor uint64) (store.Bounds, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Bounds{}, err
	}
	ss.Lock()
	defer ss.Unlock()
	if err := ss.CheckLocked("trim", gen); err != nil {
		return store.Bounds{}, err
	}
	floor = min(floor, ss.HWM+1)
	if floor <= ss.Floor {
		return ss.BoundsLocked(), nil
	}
	ss.Oldest = time.Time{}
	if ss.events != nil {
		k := int(floor - ss.Floor)
		ss.events.thaw()
		for i := range k {
			e := ss.events.at(i)
			ss.Rec.Openings, _ = ss.Rec.Openings.Trimmed(e.Seq, e.Stream, e.Kind, e.End, e.Data)
		}
		ss.Bytes -= ss.events.trim(k)
		if e := ss.events.oldest(); e != nil {
			ss.Oldest = e.Time
		} else {
			ss.events = nil
		}
	}
	ss.Floor = floor
	ss.WakeLocked()
	return ss.BoundsLocked(), nil
}

// Bounds implements store.Log.
func (s *Store) Bounds(ctx context.Context, token string) (store.Bounds, error) {
	ss, err := s.lookup(token)
	if err != nil {
		return store.Bounds{}, err
	}
	return ss.Bounds()
}

// Sync implements store.Log: Append stores before it returns, so there is
// nothing to wait for; it reports the errors of Bounds.
func (s *Store) Sync(ctx context.Context, token string) error {
	_, err := s.Bounds(ctx, token)
	return err
}

// Close implements store.Store: later calls fail with ErrUnavailable.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
