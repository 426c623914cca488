package eventlog

// This file holds the process budget (Options.Budget): what each session
// retains, the queue of sessions by the age of their oldest event, and
// which events or sessions go when the total exceeds the budget.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/agequeue"
	"github.com/tidemark-mcp/tidemark/store"
)

// usage is what one session's log retains, as of its latest append.
type usage struct {
	token string
	age   *agequeue.Item[*usage] // guarded by Log.ageMu

	mu      sync.Mutex
	gone    bool   // Forget removed it from Log.usage: account through a new one
	evicted bool   // handed to the evict function; its bytes left the total
	out     bool   // not in Log.byAge: the next account that finds events puts it there
	spared  uint64 // with no evict function, the HWM at which its newest event was kept over the budget
	bytes   int64
	events  int // events retained; a session down to 1 has nothing to age
	hwm     uint64
	oldest  time.Time
}

// SetEvict gives the Log the function that evicts a session whose newest
// event no longer fits in the budget (see Options.Budget). The Log stops
// counting the session's events, then calls evict from the Append that
// went over the budget, which may be another session's, while other
// appends over the budget wait for it: evict must return at once, without
// waiting for the session's calls, and the session must then end and be
// forgotten (Forget); session.Registry ends it on a goroutine of its own.
// A nil evict keeps such sessions. Set it before the first Append.
func (l *Log) SetEvict(evict func(token string)) {
	if evict == nil {
		l.evict.Store(nil)
		return
	}
	l.evict.Store(&evict)
}

// account records b as what token's log retains, and queues the session
// by the age of its oldest event once it retains events.
func (l *Log) account(token string, b store.Bounds) {
	for {
		v, ok := l.usage.Load(token)
		if !ok {
			u := &usage{token: token, out: true}
			u.age = agequeue.NewItem(u)
			v, _ = l.usage.LoadOrStore(token, u)
		}
		u := v.(*usage)
		u.mu.Lock()
		if u.gone {
			u.mu.Unlock()
			continue // forgotten meanwhile: its bytes left the total with it
		}
		if u.evicted {
			u.mu.Unlock()
			return // its session is ending; its bytes left the total
		}
		l.total.Add(b.Bytes - u.bytes)
		u.bytes, u.events, u.hwm, u.oldest = b.Bytes, b.Events, b.HWM, b.Oldest
		queue := u.out && b.Events > 0 && b.HWM != u.spared
		if queue {
			u.out = false
		}
		oldest := u.oldest
		u.mu.Unlock()
		if queue {
			l.ageMu.Lock()
			l.byAge.Set(u.age, oldest)
			l.ageMu.Unlock()
		}
		return
	}
}

// Forget drops the accounting of a session that ended or was re-created; the
// next append accounts for it again.
func (l *Log) Forget(token string) {
	l.forgets.Add(1)
	v, ok := l.usage.LoadAndDelete(token)
	if !ok {
		return
	}
	u := v.(*usage)
	u.mu.Lock()
	u.gone = true
	l.total.Add(-u.bytes)
	u.bytes = 0
	u.mu.Unlock()
	l.ageMu.Lock()
	l.byAge.Remove(u.age)
	l.ageMu.Unlock()
}

// Drop lets go of every event token's log retains in generation gen, and
// of its accounting (Forget), for a generation whose events no cursor can
// replay: one that hibernates to wake at generation+1, whose claim raises
// the floor past them (DESIGN.md, "Hibernation"). The floor becomes HWM+1
// and the high-water mark stays, so the bounds are those the claim would
// leave. Errors are the store's (store.Log.Bounds and Trim: a
// *store.FencedError when gen is not current, store.ErrNotFound,
// store.ErrEnded, store.ErrUnavailable); the accounting goes in any case.
func (l *Log) Drop(ctx context.Context, token string, gen uint64) error {
	defer l.Forget(token)
	b, err := l.st.Bounds(ctx, token)
	if err != nil || b.Events == 0 {
		return err
	}
	_, err = l.st.Trim(ctx, token, gen, b.HWM+1)
	return err
}

// recheck forgets token again if its session ended: an Append that saw a
// Forget run meanwhile may have accounted, after it, for a session that
// ended between its store write and its accounting.
func (l *Log) recheck(ctx context.Context, token string) {
	if _, err := l.st.Bounds(ctx, token); errors.Is(err, store.ErrEnded) || errors.Is(err, store.ErrNotFound) {
		l.Forget(token)
	}
}

// Budgeted reports whether the Log enforces a process budget
// (Options.Budget is not negative): then it must keep accounting for
// every session whose events the store holds.
func (l *Log) Budgeted() bool { return l.opts.Budget >= 0 }

// Usage returns the bytes this Log accounts for across all sessions.
func (l *Log) Usage() int64 {
	return l.total.Load()
}

// enforceBudget brings the total down to the budget less a sixteenth once
// it exceeds the budget (so that a process at its budget enforces it once
// per many appends, not on each), the oldest events of the process first:
// the session holding the oldest event loses its oldest events, never its
// newest, until the bytes are freed or another session holds the oldest
// event; a session whose newest event is the oldest left is evicted (see
// Options.Budget). Under the budget it costs one atomic load; over it,
// O(log sessions) per session trimmed or evicted plus the events removed.
func (l *Log) enforceBudget(ctx context.Context) {
	if l.opts.Budget < 0 || l.total.Load() <= l.opts.Budget {
		return
	}
	l.enforcing.Lock()
	defer l.enforcing.Unlock()
	target := l.opts.Budget - l.opts.Budget/16
	for l.total.Load() > target {
		u, next, hasNext := l.oldestUsage()
		if u == nil {
			return
		}
		u.mu.Lock()
		events := u.events
		u.mu.Unlock()
		if events < 2 {
			l.dropNewest(u)
			continue
		}
		if !l.trimOldest(ctx, u, l.total.Load()-target, next, hasNext) {
			return // the store refused (fenced, unavailable): the next append tries again
		}
	}
}

// oldestUsage returns the queued session with the oldest retained event,
// after taking out of the queue those that retain nothing or are gone and
// moving those whose oldest event is newer than their place says; and the
// time of the next oldest session's oldest event, if any.
func (l *Log) oldestUsage() (u *usage, next time.Time, hasNext bool) {
	l.ageMu.Lock()
	defer l.ageMu.Unlock()
	for {
		it := l.byAge.Oldest()
		if it == nil {
			return nil, time.Time{}, false
		}
		u := it.Value
		u.mu.Lock()
		drop := u.gone || u.evicted || u.events == 0
		if drop && !u.gone {
			u.out = true
		}
		moved := !drop && u.oldest.After(it.At())
		oldest := u.oldest
		u.mu.Unlock()
		switch {
		case drop:
			l.byAge.Remove(it)
		case moved:
			l.byAge.Set(it, oldest)
		default:
			next, hasNext = l.byAge.Second()
			return u, next, hasNext
		}
	}
}

// trimOldest removes u's oldest events, never its newest: at least one,
// then more until need bytes are gone or, when hasNext, until the next
// event is later than next (another session then holds the oldest event).
// It reads about as many events as it removes, and reports whether u's
// accounting changed (false: the store refused the trim).
func (l *Log) trimOldest(ctx context.Context, u *usage, need int64, next time.Time, hasNext bool) bool {
	b, err := l.st.Bounds(ctx, u.token)
	if err != nil {
		l.Forget(u.token)
		return true
	}
	if b.Events < 2 {
		l.account(u.token, b)
		l.requeue(u)
		return true
	}
	batch := int(min(512, need/max(1, b.Bytes/int64(b.Events))+2))
	floor, freed := b.Floor, int64(0)
	for floor < b.HWM && freed < need {
		evs, _, err := l.st.Read(ctx, u.token, floor-1, batch)
		if err != nil || len(evs) == 0 {
			break
		}
		stop := false
		for _, e := range evs {
			if e.Seq >= b.HWM || freed >= need || (hasNext && floor > b.Floor && e.Time.After(next)) {
				stop = true
				break
			}
			freed += e.Size()
			floor = e.Seq + 1
		}
		if stop {
			break
		}
	}
	nb, err := l.trim(ctx, u.token, b, floor)
	if err != nil || nb.Floor <= b.Floor {
		return false
	}
	l.account(u.token, nb)
	l.requeue(u)
	return true
}

// requeue moves u, if it is queued, to the time of its oldest event.
func (l *Log) requeue(u *usage) {
	u.mu.Lock()
	oldest := u.oldest
	u.mu.Unlock()
	l.ageMu.Lock()
	if u.age.Queued() {
		l.byAge.Set(u.age, oldest)
	}
	l.ageMu.Unlock()
}

// dropNewest takes out of the budget a session down to its newest event,
// which is the oldest event left: it is evicted, or, with no evict
// function, kept until its next append.
func (l *Log) dropNewest(u *usage) {
	evict := l.evict.Load()
	u.mu.Lock()
	if u.gone || u.evicted {
		u.mu.Unlock()
		return
	}
	if evict != nil {
		u.evicted = true
		l.total.Add(-u.bytes)
		u.bytes = 0
	} else {
		u.spared, u.out = u.hwm, true
	}
	u.mu.Unlock()
	l.ageMu.Lock()
	l.byAge.Remove(u.age)
	l.ageMu.Unlock()
	if evict != nil {
		(*evict)(u.token)
	}
}
