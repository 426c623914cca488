// Package eventlog is the one path every event takes: appended to the
// session's log first (DESIGN.md, "Delivery rules": log first), then read by
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
	"time"

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
	// MaxAge is how long an event is retained. Default 1 hour.
	MaxAge time.Duration
	// Budget is the most bytes retained across all sessions this process
	// appended to; over it, the session holding the oldest event loses half
	// of its events, repeatedly. Default 512 MiB. Meant for stores that
	// live in this process's memory; disable it (-1) for shared stores.
	Budget int64
	// Now returns the current time. Default time.Now.
	Now func() time.Time
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
type Log struct {
	st   store.Log
	opts Options

	mu    sync.Mutex
	usage map[string]usage // by session token, for the budget
	total int64
}

type usage struct {
	gen    uint64
	bytes  int64
	oldest time.Time
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
	return &Log{st: st, opts: opts, usage: make(map[string]usage)}
}

// Store returns the underlying store.Log.
func (l *Log) Store() store.Log { return l.st }

// Append stamps evs with the current time, appends them under generation gen
// and applies retention. On success each event's Seq and Generation are set.
// Errors are the store's (*store.FencedError when gen is stale,
// store.ErrEnded, store.ErrNotFound, store.ErrUnavailable), wrapped with the
// session and generation; nothing was appended when an error is returned.
func (l *Log) Append(ctx context.Context, token string, gen uint64, evs ...store.Event) error {
	now := l.opts.Now()
	for i := range evs {
		evs[i].Time = now
	}
	b, err := l.st.Append(ctx, token, gen, evs)
	if err != nil {
		return fmt.Errorf("eventlog: append session %s gen %d: %w", store.Prefix(token), gen, err)
	}
	b = l.retain(ctx, token, b, now)
	l.account(token, b)
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
	tooOld := l.opts.MaxAge > 0 && !b.Oldest.IsZero() && now.Sub(b.Oldest) > l.opts.MaxAge
	if overBytes || tooOld {
		floor = max(floor, l.cutPoint(ctx, token, b, now))
	}
	if floor <= b.Floor {
		return b
	}
	nb, err := l.st.Trim(ctx, token, b.Generation, floor)
	if err != nil {
		return b
	}
	return nb
}

// cutPoint walks the log from the floor and returns the lowest sequence that
// can stay under the byte and age limits. Over the byte limit it trims down
// to 15/16 of it, so that a session at its limit trims once every several
// appends instead of on each one.
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
			if excess <= 0 && !e.Time.Before(cutoff) {
				return e.Seq
			}
			excess -= e.Size()
			after = e.Seq
		}
	}
}

func (l *Log) account(token string, b store.Bounds) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.usage[token]
	l.total += b.Bytes - old.bytes
	l.usage[token] = usage{gen: b.Generation, bytes: b.Bytes, oldest: b.Oldest}
}

// Forget drops the accounting of a session that ended or was re-created; the
// next append accounts for it again.
func (l *Log) Forget(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total -= l.usage[token].bytes
	delete(l.usage, token)
}

// enforceBudget trims the session with the oldest retained event, by half,
// until the process-wide budget holds.
func (l *Log) enforceBudget(ctx context.Context) {
	if l.opts.Budget < 0 {
		return
	}
	for range 64 {
		l.mu.Lock()
		if l.total <= l.opts.Budget {
			l.mu.Unlock()
			return
		}
		victim, u := "", usage{}
		for tok, x := range l.usage {
			if x.bytes > 0 && (victim == "" || x.oldest.Before(u.oldest)) {
				victim, u = tok, x
			}
		}
		l.mu.Unlock()
		if victim == "" {
			return
		}
		b, err := l.st.Bounds(ctx, victim)
		if err != nil {
			l.Forget(victim)
			continue
		}
		floor := b.Floor + uint64(max(1, b.Events/2))
		if nb, err := l.st.Trim(ctx, victim, b.Generation, floor); err == nil {
			b = nb
		}
		l.account(victim, b)
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
	l.mu.Lock()
	var old []string
	for tok, u := range l.usage {
		if !u.oldest.IsZero() && u.oldest.Before(cutoff) {
			old = append(old, tok)
		}
	}
	l.mu.Unlock()
	for _, tok := range old {
		b, err := l.st.Bounds(ctx, tok)
		if err != nil {
			l.Forget(tok)
			continue
		}
		l.account(tok, l.retain(ctx, tok, b, now))
	}
}

// Usage returns the bytes this Log accounts for across all sessions.
func (l *Log) Usage() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
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
