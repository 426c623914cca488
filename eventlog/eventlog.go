// Package eventlog is the one path every event takes: appended to the
// session's log first (DESIGN.md, "Delivery rules"), then read by
// whichever connection serves its stream, live or resuming, by tailing the
// same log (one path). It applies retention on top of a store.Log: per
// session by events, bytes and age, and per process by a byte budget.
// Retention raises the replay floor; it never leaves a gap below a reader
// unnoticed (the reader fails with ErrCompacted).
package eventlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/agequeue"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/store"
)

// Default retention limits; see Options.
const (
	DefaultMaxEvents = 10000
	DefaultMaxBytes  = 8 << 20
	DefaultMaxAge    = time.Hour
	DefaultBudget    = 512 << 20
)

// Options configures a Log. Zero values select the defaults; a negative value
// disables a limit.
type Options struct {
	// MaxEvents is the most events retained per session. Default 10,000.
	MaxEvents int
	// MaxBytes is the most bytes (store.Event.Size) retained per session.
	// Default 8 MiB.
	MaxBytes int64
	// MaxAge is how long an event is retained, except a session's newest
	// event, which is kept whatever its age (a caught-up client cites it).
	// Default 1 hour.
	MaxAge time.Duration
	// Budget is the most bytes retained across all sessions this process
	// appended to. Over it, the oldest retained events of the process go
	// first, until the total is Budget less a sixteenth: trimmed from their
	// session, except a session's newest event; a session whose newest
	// event is the oldest one left is evicted through the function given
	// to SetEvict (session.Registry ends it, reason retention_budget), or,
	// with none, kept, and the budget exceeded by the newest events.
	// Default 512 MiB. Meant for stores that live in this process's
	// memory; disable it (-1) for shared stores.
	Budget int64
	// Now returns the current time. Default time.Now.
	Now func() time.Time
	// Metrics records events appended and trimmed (package metrics).
	// Default: metrics.Discard.
	Metrics metrics.Log
}

// ErrCompacted is returned by Reader.Next when retention removed events the
// reader had not read yet: the stream can no longer be delivered without a
// gap, so the connection must end (a resume then answers 409).
var ErrCompacted = errors.New("eventlog: events after the reader's position were compacted")

// ErrGenerationChanged is returned by Reader.Next when the session was
// re-created: the reader's generation is over and nothing of it can follow.
var ErrGenerationChanged = errors.New("eventlog: session generation changed")

// Log appends and reads session events with retention. It is safe for
// concurrent use.
//
// Appends to different sessions share nothing here but an atomic add to
// the process-wide total: each session's usage has its own lock, found
// without a lock in a sync.Map (written once per session, read on every
// append); the budget's queue of sessions by age is written when a session
// first retains an event, and otherwise only once the total is over the
// budget (budget.go).
type Log struct {
	st   store.Log
	opts Options

	usage   sync.Map      // session token → *usage, for the budget and Sweep
	total   atomic.Int64  // sum of the usages' bytes
	forgets atomic.Uint64 // Forget calls so far (see recheck)

	evict     atomic.Pointer[func(token string)] // see SetEvict
	enforcing sync.Mutex                         // one budget enforcement at a time
	ageMu     sync.Mutex                         // guards byAge
	byAge     agequeue.Queue[*usage]             // sessions retaining events, by their oldest
}

// New returns a Log over st.
func New(st store.Log, opts Options) *Log {
	if opts.MaxEvents == 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Budget == 0 {
		opts.Budget = DefaultBudget
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.Discard
	}
	return &Log{st: st, opts: opts}
}

// Store returns the underlying store.Log.
func (l *Log) Store() store.Log { return l.st }

// Append stamps evs with the current time, appends them under generation gen
// and applies retention. On success each event's Seq and Generation are set;
// a pipelined store may not have stored them yet (readers see them once it
// has: store.Log). Errors are the store's (*store.FencedError when gen is
// stale, store.ErrEnded, store.ErrNotFound, store.ErrUnavailable,
// *store.LostError), wrapped with the session and generation; nothing was
// appended when an error is returned.
func (l *Log) Append(ctx context.Context, token string, gen uint64, evs ...store.Event) error {
	now := l.opts.Now()
	for i := range evs {
		evs[i].Time = now
	}
	forgets := l.forgets.Load()
	b, err := l.st.Append(ctx, token, gen, evs)
	if err != nil {
		return fmt.Errorf("eventlog: append session %s gen %d: %w", store.Prefix(token), gen, err)
	}
	l.opts.Metrics.Appended(len(evs))
	b = l.retain(ctx, token, b, now)
	l.account(token, b)
	if l.forgets.Load() != forgets {
		l.recheck(ctx, token)
	}
	l.enforceBudget(ctx)
	return nil
}

// retain applies the per-session limits to a session whose bounds are b and
// returns the bounds after trimming. Trimming failures are not the append's
// failure: the events are stored; the limits are applied again next time.
func (l *Log) retain(ctx context.Context, token string, b store.Bounds, now time.Time) store.Bounds {
	floor := b.Floor
	if l.opts.MaxEvents > 0 && b.Events > l.opts.MaxEvents {
		floor = b.HWM - uint64(l.opts.MaxEvents) + 1
	}
	overBytes := l.opts.MaxBytes > 0 && b.Bytes > l.opts.MaxBytes
	tooOld := l.opts.MaxAge > 0 && b.Events > 1 && !b.Oldest.IsZero() && now.Sub(b.Oldest) > l.opts.MaxAge
	if overBytes || tooOld {
		floor = max(floor, l.cutPoint(ctx, token, b, now))
	}
	if floor <= b.Floor {
		return b
	}
	nb, err := l.trim(ctx, token, b, floor)
	if err != nil {
		return b
	}
	return nb
}

// trim raises the floor of a session whose bounds are b to floor, and
// records the events it removed.
func (l *Log) trim(ctx context.Context, token string, b store.Bounds, floor uint64) (store.Bounds, error) {
	nb, err := l.st.Trim(ctx, token, b.Generation, floor)
	if err == nil && nb.Floor > b.Floor {
		l.opts.Metrics.Trimmed(int(nb.Floor - b.Floor))
	}
	return nb, err
}

// cutPoint walks the log from the floor and returns the lowest sequence that
// can stay under the byte and age limits. Over the byte limit it trims down
// to 15/16 of it, so that a session at its limit trims once every several
// appends instead of on each one. No limit removes the newest event: a
// single message larger than MaxBytes must still reach the reader waiting
// for it (a response trimmed on arrival would leave its call unanswered),
// and a client that has seen everything cites the newest event's cursor,
// which must stay answerable (200, nothing to replay) however long the
// session has been quiet: a call silent for longer than MaxAge, or a GET
// stream whose priming event is the newest (TestAgeKeepsTheNewestEvent).
func (l *Log) cutPoint(ctx context.Context, token string, b store.Bounds, now time.Time) uint64 {
	excess := int64(0)
	if l.opts.MaxBytes > 0 && b.Bytes > l.opts.MaxBytes {
		excess = b.Bytes - l.opts.MaxBytes + l.opts.MaxBytes/16
	}
	cutoff := time.Time{}
	if l.opts.MaxAge > 0 {
		cutoff = now.Add(-l.opts.MaxAge)
	}
	// Read only about as many events as the excess needs, by their
	// average size, when age is not what is over.
	batch := 512
	if excess > 0 && b.Events > 0 && !b.Oldest.Before(cutoff) {
		batch = int(min(512, excess/max(1, b.Bytes/int64(b.Events))+2))
	}
	after := b.Floor - 1
	for {
		evs, _, err := l.st.Read(ctx, token, after, batch)
		if err != nil || len(evs) == 0 {
			return after + 1
		}
		for _, e := range evs {
			if e.Seq == b.HWM || (excess <= 0 && !e.Time.Before(cutoff)) {
				return e.Seq
			}
			excess -= e.Size()
			after = e.Seq
		}
	}
}

// Sweep applies the age limit to every session this Log accounts for, so
// that quiet sessions release old events too. Call it periodically.
func (l *Log) Sweep(ctx context.Context) {
	if l.opts.MaxAge <= 0 {
		return
	}
	now := l.opts.Now()
	cutoff := now.Add(-l.opts.MaxAge)
	var old []string
	l.usage.Range(func(k, v any) bool {
		u := v.(*usage)
		u.mu.Lock()
		// A session down to its newest event keeps it (see cutPoint).
		if u.events > 1 && !u.oldest.IsZero() && u.oldest.Before(cutoff) {
			old = append(old, k.(string))
		}
		u.mu.Unlock()
		return true
	})
	for _, tok := range old {
		b, err := l.st.Bounds(ctx, tok)
		if err != nil {
			l.Forget(tok)
			continue
		}
		l.account(tok, l.retain(ctx, tok, b, now))
	}
}

// Sync returns once the events appended to the session so far are stored,
// or with the store's *store.LostError when they could not be
// (store.Log.Sync).
func (l *Log) Sync(ctx context.Context, token string) error {
	return l.st.Sync(ctx, token)
}

// Bounds returns the session's bounds from the store.
func (l *Log) Bounds(ctx context.Context, token string) (store.Bounds, error) {
	return l.st.Bounds(ctx, token)
}

// At returns the event at sequence seq of the current generation, and
// whether it is retained.
func (l *Log) At(ctx context.Context, token string, seq uint64) (store.Event, bool, error) {
	evs, _, err := l.st.Read(ctx, token, seq-1, 1)
	if err != nil {
		return store.Event{}, false, err
	}
	if len(evs) == 0 || evs[0].Seq != seq {
		return store.Event{}, false, nil
	}
	return evs[0], true, nil
}
