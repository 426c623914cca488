// Package observed wraps a store.Store so that every call is timed and
// counted (metrics.Store: duration by store and operation, failures, fenced
// writes) and every write gets a span (tracing), without the backends
// knowing. The layers above call the wrapper as they would the store.
package observed

import (
	"context"
	"errors"
	"time"

	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// Store is a store.Store that records the calls of the store it wraps.
// It also provides the optional batch methods the layers above look for
// (RenewMany, ReadAppend), with the wrapped store's when it has them and
// the equivalent single calls otherwise.
type Store struct {
	st     store.Store
	name   string
	rec    metrics.Store
	tracer *tracing.Tracer
}

// New returns st observed: name is the backend's label (metrics.StoreMemory,
// StoreDurable, StoreRedis), rec records each call (nil: metrics.Discard),
// tracer starts a span per write (nil: none); New tells rec that name
// serves (metrics.Store.StoreOpened). Close closes st.
func New(st store.Store, name string, rec metrics.Store, tracer *tracing.Tracer) *Store {
	if rec == nil {
		rec = metrics.Discard
	}
	rec.StoreOpened(name)
	return &Store{st: st, name: name, rec: rec, tracer: tracer}
}

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() store.Store { return s.st }

// done records one call of op that began at start and returned err.
func (s *Store) done(op string, start time.Time, err error) {
	s.rec.StoreOperation(s.name, op, time.Since(start), failed(err))
	if errors.Is(err, store.ErrFenced) {
		s.rec.Fenced(op)
	}
}

// failed reports whether err is a fault rather than one of the answers
// the store contract defines.
func failed(err error) bool {
	return err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrEnded) &&
		!errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrFenced) &&
		!errors.Is(err, context.Canceled)
}

// write runs one write of op under a span and records it.
func (s *Store) write(ctx context.Context, op, token string, gen uint64, f func(context.Context) error) error {
	start := time.Now()
	ctx, span := s.tracer.StartStoreWrite(ctx, s.name, op, token, gen)
	err := f(ctx)
	span.End(err)
	s.done(op, start, err)
	return err
}

// Create implements store.Sessions.
func (s *Store) Create(ctx context.Context, rec store.Record) error {
	return s.write(ctx, metrics.OpCreate, rec.Token, rec.Generation, func(ctx context.Context) error {
		return s.st.Create(ctx, rec)
	})
}

// Get implements store.Sessions.
func (s *Store) Get(ctx context.Context, token string) (store.Record, error) {
	start := time.Now()
	rec, err := s.st.Get(ctx, token)
	s.done(metrics.OpGet, start, err)
	return rec, err
}

// Claim implements store.Sessions.
func (s *Store) Claim(ctx context.Context, token, owner string, from uint64, leaseUntil time.Time) (store.Record, error) {
	var rec store.Record
	err := s.write(ctx, metrics.OpClaim, token, from, func(ctx context.Context) (err error) {
		rec, err = s.st.Claim(ctx, token, owner, from, leaseUntil)
		return err
	})
	return rec, err
}

// Renew implements store.Sessions.
func (s *Store) Renew(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) error {
	return s.write(ctx, metrics.OpRenew, token, gen, func(ctx context.Context) error {
		return s.st.Renew(ctx, token, owner, gen, leaseUntil)
	})
}

// SaveState implements store.Sessions.
func (s *Store) SaveState(ctx context.Context, token string, gen uint64, state []byte) error {
	return s.write(ctx, metrics.OpSaveState, token, gen, func(ctx context.Context) error {
		return s.st.SaveState(ctx, token, gen, state)
	})
}

// Hibernate implements store.Sessions.
func (s *Store) Hibernate(ctx context.Context, token, owner string, gen uint64, state []byte) error {
	return s.write(ctx, metrics.OpHibernate, token, gen, func(ctx context.Context) error {
		return s.st.Hibernate(ctx, token, owner, gen, state)
	})
}

// Wake implements store.Sessions.
func (s *Store) Wake(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) (store.Record, error) {
	var rec store.Record
	err := s.write(ctx, metrics.OpWake, token, gen, func(ctx context.Context) (err error) {
		rec, err = s.st.Wake(ctx, token, owner, gen, leaseUntil)
		return err
	})
	return rec, err
}

// Touch implements store.Sessions. It records no span: it runs on every
// request and changes nothing a client can observe.
func (s *Store) Touch(ctx context.Context, token string, at time.Time) error {
	start := time.Now()
	err := s.st.Touch(ctx, token, at)
	s.done(metrics.OpTouch, start, err)
	return err
}

// End implements store.Sessions.
func (s *Store) End(ctx context.Context, token string, reason store.EndReason, tombstoneUntil time.Time) error {
	return s.write(ctx, metrics.OpEnd, token, 0, func(ctx context.Context) error {
		return s.st.End(ctx, token, reason, tombstoneUntil)
	})
}

// Append implements store.Log.
func (s *Store) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	var b store.Bounds
	err := s.write(ctx, metrics.OpAppend, token, gen, func(ctx context.Context) (err error) {
		b, err = s.st.Append(ctx, token, gen, evs)
		return err
	})
	return b, err
}

// Read implements store.Log.
func (s *Store) Read(ctx context.Context, token string, after uint64, max int) ([]store.Event, store.Bounds, error) {
	start := time.Now()
	evs, b, err := s.st.Read(ctx, token, after, max)
	s.done(metrics.OpRead, start, err)
	return evs, b, err
}

// readAppender is the optional method of store/memory that reads into a
// caller's buffer (eventlog's readers look for it).
type readAppender interface {
	ReadAppend(ctx context.Context, token string, after uint64, max int, dst []store.Event) ([]store.Event, store.Bounds, error)
}

// ReadAppend appends what Read returns to dst, with the wrapped store's
// ReadAppend when it has one.
func (s *Store) ReadAppend(ctx context.Context, token string, after uint64, max int, dst []store.Event) ([]store.Event, store.Bounds, error) {
	start := time.Now()
	var b store.Bounds
	var err error
	if ra, ok := s.st.(readAppender); ok {
		dst, b, err = ra.ReadAppend(ctx, token, after, max, dst)
	} else {
		var evs []store.Event
		evs, b, err = s.st.Read(ctx, token, after, max)
		dst = append(dst, evs...)
	}
	s.done(metrics.OpRead, start, err)
	return dst, b, err
}

// Sync implements store.Log; it is timed: it lasts as long as the
// wrapped store takes to store what was appended (a commit).
func (s *Store) Sync(ctx context.Context, token string) error {
	start := time.Now()
	err := s.st.Sync(ctx, token)
	s.done(metrics.OpSync, start, err)
	return err
}

// NotifyLost implements store.LossNotifier with the wrapped store's, when
// it has one; otherwise no generation is ever lost and f is never called.
func (s *Store) NotifyLost(f func(token string, gen uint64, err error)) {
	if n, ok := s.st.(store.LossNotifier); ok {
		n.NotifyLost(f)
	}
}

// NotifyEnded implements store.EndNotifier with the wrapped store's, when
// it has one; otherwise the store ends no session by itself and f is
// never called.
func (s *Store) NotifyEnded(f func(rec store.Record)) {
	if n, ok := s.st.(store.EndNotifier); ok {
		n.NotifyEnded(f)
	}
}

// Wait implements store.Log; waiting is not timed (it lasts until an
// event comes).
func (s *Store) Wait(ctx context.Context, token string, after uint64) error {
	return s.st.Wait(ctx, token, after)
}

// Trim implements store.Log.
func (s *Store) Trim(ctx context.Context, token string, gen uint64, floor uint64) (store.Bounds, error) {
	var b store.Bounds
	err := s.write(ctx, metrics.OpTrim, token, gen, func(ctx context.Context) (err error) {
		b, err = s.st.Trim(ctx, token, gen, floor)
		return err
	})
	return b, err
}

// Bounds implements store.Log.
func (s *Store) Bounds(ctx context.Context, token string) (store.Bounds, error) {
	start := time.Now()
	b, err := s.st.Bounds(ctx, token)
	s.done(metrics.OpBounds, start, err)
	return b, err
}

// RenewMany renews the leases of tokens at gens, with the wrapped store's
// RenewMany when it has one (fleet.Renewer), else one Renew each; errs[i]
// is tokens[i]'s outcome. The batch counts as one renew call, failed when
// any renewal failed.
func (s *Store) RenewMany(ctx context.Context, owner string, leaseUntil time.Time, tokens []string, gens []uint64) []error {
	start := time.Now()
	errs := fleet.Renew(ctx, s.st, owner, leaseUntil, tokens, gens)
	anyFailed := false
	for _, err := range errs {
		anyFailed = anyFailed || failed(err)
		if errors.Is(err, store.ErrFenced) {
			s.rec.Fenced(metrics.OpRenew)
		}
	}
	s.rec.StoreOperation(s.name, metrics.OpRenew, time.Since(start), anyFailed)
	return errs
}

// Close implements store.Store: it closes the wrapped store.
func (s *Store) Close() error { return s.st.Close() }
