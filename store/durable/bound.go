package durable

// This file holds the directory bound (Options.MaxBytes): which events go
// when the retained bytes exceed it, and the log lines that report it.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/agequeue"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// boundReportEvery is the least time between two log lines that report
// trimming for the bound; what happens in between is counted in the next.
const boundReportEvery = time.Minute

// bound is the state of the directory bound.
type bound struct {
	// enforcing is held by the one Append that trims for the bound; the
	// others go on (the one trimming brings the total down for all).
	enforcing sync.Mutex

	mu sync.Mutex
	// q holds the sessions that retain two events or more, by the time of
	// their oldest: the sessions whose oldest events may go, parked ones
	// included (by token). A session down to its newest event is not in it
	// (that event is never trimmed).
	q agequeue.Queue[string]

	// stuck is set while the newest events alone keep the store above
	// the bound (reported once, as a WARN), so that Append reports the
	// return under it.
	stuck atomic.Bool
	// retryAt is, while stuck, the total above which trimming is tried
	// again: a sixteenth of the bound above the total the last try left.
	retryAt atomic.Int64

	// The rest is guarded by enforcing.
	reported time.Time // when trimming was last reported
	trimmed  trimCount // trimmed since that report
}

// trimCount counts what the bound trimmed.
type trimCount struct {
	sessions, events int
	bytes            int64
}

// requeue puts ss in the bound's queue at its oldest event if it retains
// two events or more, and takes it out otherwise. The caller holds ss.wmu,
// so that the bounds it reads are the ones it leaves behind.
func (s *Store) requeue(ss *sess) {
	ss.Lock()
	b := ss.BoundsLocked()
	ended := ss.Ended != nil && !isParked(ss.Ended)
	ss.Unlock()
	s.bound.mu.Lock()
	if b.Events >= 2 && !ended {
		s.bound.q.Set(ss.age, b.Oldest)
	} else {
		s.bound.q.Remove(ss.age)
	}
	s.bound.mu.Unlock()
}

// enforceBound trims, once the retained bytes exceed MaxBytes, the oldest
// events of the store, session by session in the order of their oldest
// event, until the total is MaxBytes less a sixteenth (so that a store at
// its bound trims once per many appends, not on each). It never trims a
// session's newest event: a caught-up client must be able to cite it
// (docs/operating.md, "Retention and memory"). When the newest events alone exceed the
// bound it stops, and the bound is exceeded until sessions end. Its cost is
// O(log sessions) per session trimmed plus the events it removes; with
// nothing to trim it returns at once.
func (s *Store) enforceBound(ctx context.Context) {
	if s.opts.MaxBytes <= 0 || !s.bound.enforcing.TryLock() {
		return
	}
	defer s.bound.enforcing.Unlock()
	target := s.opts.MaxBytes - s.opts.MaxBytes/16
	for s.total.Load() > target {
		s.bound.mu.Lock()
		it := s.bound.q.Oldest()
		var next time.Time
		var hasNext bool
		if it != nil {
			next, hasNext = s.bound.q.Second()
		}
		s.bound.mu.Unlock()
		if it == nil {
			break
		}
		need := s.total.Load() - target
		var c trimCount
		err := s.write("trim", it.Value, func(ss *sess) error {
			var err error
			c, err = s.trimOldest(ss, need, next, hasNext)
			return err
		})
		if errors.Is(err, store.ErrEnded) || errors.Is(err, store.ErrNotFound) {
			s.bound.mu.Lock()
			s.bound.q.Remove(it)
			s.bound.mu.Unlock()
			continue
		}
		if err != nil {
			s.logger.Warn("trimming for the data directory bound failed; the next append tries again",
				"session", store.Prefix(it.Value), "reason", replay.ReasonMaxBytes, "error", err)
			break
		}
		s.bound.trimmed.add(c)
	}
	if total := s.total.Load(); total > target {
		s.bound.retryAt.Store(total + s.opts.MaxBytes/16)
	}
	s.reportBound()
}

// needsTrim reports whether an Append that left total retained bytes
// calls enforceBound: over the bound, unless the newest events alone keep
// the store over it and it has grown by less than a sixteenth of the bound
// since the last try; and under it once more, to report the return.
func (s *Store) needsTrim(total int64) bool {
	if s.opts.MaxBytes <= 0 {
		return false
	}
	if !s.bound.stuck.Load() {
		return total > s.opts.MaxBytes
	}
	return total <= s.opts.MaxBytes || total > s.bound.retryAt.Load()
}

// trimOldest removes ss's oldest events, never its newest: at least one,
// then more until need bytes are gone or, when hasNext, until the next
// event is later than next (another session then holds the oldest event).
// The caller holds ss.wmu and s.rw shared.
func (s *Store) trimOldest(ss *sess, need int64, next time.Time, hasNext bool) (trimCount, error) {
	ss.Lock()
	hwm := ss.HWM
	ss.Unlock()
	var c trimCount
	_, err := s.cut(ss, func(seq uint64, v []byte) bool {
		if seq >= hwm || (c.events > 0 && (c.bytes >= need || (hasNext && eventTime(v).After(next)))) {
			return false
		}
		c.events++
		c.bytes += eventSize(v)
		return true
	})
	if c.events > 0 {
		c.sessions = 1
	}
	return c, err
}

func (c *trimCount) add(o trimCount) {
	c.sessions += o.sessions
	c.events += o.events
	c.bytes += o.bytes
}

// reportBound logs what enforceBound did, once per change of condition
// and at most every boundReportEvery while trimming goes on: a line when
// the newest events alone keep the store above its bound (WARN), one when
// it is back under it, and between them the counts of what was trimmed.
// The caller holds s.bound.enforcing.
func (s *Store) reportBound() {
	bd := &s.bound
	total := s.total.Load()
	now := s.opts.Now()
	attrs := func() []any {
		return []any{"reason", replay.ReasonMaxBytes, "retained_bytes", total, "max_bytes", s.opts.MaxBytes,
			"trimmed_sessions", bd.trimmed.sessions, "trimmed_events", bd.trimmed.events, "trimmed_bytes", bd.trimmed.bytes}
	}
	over := total > s.opts.MaxBytes
	switch {
	case over && !bd.stuck.Load():
		s.logger.Warn("data directory over its bound by the sessions' newest events alone, which are never trimmed; it stays over until sessions end", attrs()...)
		bd.stuck.Store(true)
	case !over && bd.stuck.Load():
		s.logger.Info("data directory back under its bound", attrs()...)
		bd.stuck.Store(false)
	case bd.trimmed.events > 0 && now.Sub(bd.reported) >= boundReportEvery:
		s.logger.Info("data directory at its bound: trimmed the oldest events", attrs()...)
	default:
		return
	}
	bd.reported, bd.trimmed = now, trimCount{}
}
