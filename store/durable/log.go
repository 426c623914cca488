package durable

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-mcp/tidemark/store"
)

// Append implements store.Log. The events and the new log meta are one
// batch, committed with the group's fsync; only then are they visible to
// Read and Wait. When the retained bytes exceed Options.MaxBytes
// afterwards, the oldest events of the store are trimmed (see Options).
// Besides the contract's errors it fails with an error wrapping both
// store.ErrUnavailable and ErrNoSpace when the file system is low on space;
// nothing is appended then.
func (s *Store) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	var out store.Bounds
	err := s.fenced("append", token, gen, func(ss *sess) error {
		ss.Lock()
		m := ss.metaLocked()
		ss.Unlock()
		if len(evs) == 0 {
			ss.Lock()
			out = ss.BoundsLocked()
			ss.Unlock()
			return nil
		}
		// Sequences are set in a copy: the caller's slice changes only
		// once the events are durable.
		stamped := make([]store.Event, len(evs))
		b := s.db.NewBatch()
		var added int64
		for i := range evs {
			e := evs[i]
			e.Seq, e.Generation = m.hwm+1+uint64(i), gen
			if e.Stream == store.NewStream {
				e.Stream = e.Seq
			}
			stamped[i] = e
			b.Set(eventKey(token, e.Seq), encodeEvent(&e), nil)
			added += e.Size()
		}
		n := m
		n.hwm += uint64(len(evs))
		n.bytes += added
		if m.hwm < m.floor { // the log was empty: the first event is the oldest
			n.oldest = evs[0].Time
		}
		b.Set(tokenKey(kindMeta, token), encodeMeta(n), nil)
		if err := s.commit(b, true); err != nil {
			return fmt.Errorf("durable store: append session %s gen %d: %w", store.Prefix(token), gen, err)
		}
		for i := range evs {
			evs[i].Seq, evs[i].Generation, evs[i].Stream = stamped[i].Seq, gen, stamped[i].Stream
		}
		ss.Lock()
		ss.HWM, ss.Bytes, ss.Oldest = n.hwm, n.bytes, n.oldest
		ss.WakeLocked()
		out = ss.BoundsLocked()
		ss.Unlock()
		s.total.Add(added)
		if m.hwm <= m.floor { // it held at most one event: it may now be trimmed
			s.requeue(ss)
		}
		return nil
	})
	if err != nil {
		return store.Bounds{}, err
	}
	if s.needsTrim(s.total.Load()) {
		s.enforceBound(ctx)
		if b, err := s.Bounds(ctx, token); err == nil {
			out = b
		}
	}
	return out, nil
}

// Read implements store.Log.
func (s *Store) Read(ctx context.Context, token string, after uint64, max int) ([]store.Event, store.Bounds, error) {
	if err := s.shared("read"); err != nil {
		return nil, store.Bounds{}, err
	}
	defer s.rw.RUnlock()
	ss, err := s.lookup(token)
	if err != nil {
		return nil, store.Bounds{}, err
	}
	for attempt := 0; ; attempt++ {
		ss.Lock()
		if ss.Ended != nil {
			ss.Unlock()
			return nil, store.Bounds{}, ss.Ended
		}
		b := ss.BoundsLocked()
		ss.Unlock()
		start := max1(after+1, b.Floor)
		if max <= 0 || start > b.HWM {
			return nil, b, nil
		}
		want := int(min(uint64(max), b.HWM-start+1))
		evs, err := s.readRange(token, start, want)
		if err != nil {
			return nil, store.Bounds{}, err
		}
		if len(evs) == want {
			return evs, b, nil
		}
		// A Claim or an End committed between the snapshot of the bounds
		// and the read: look at the bounds again. Trim raises the floor in
		// memory before deleting, so it cannot cause this.
		if attempt >= 3 {
			return nil, store.Bounds{}, fmt.Errorf("durable store: read session %s: %w: events %d to %d: found %d of %d",
				store.Prefix(token), ErrCorrupt, start, start+uint64(want)-1, len(evs), want)
		}
	}
}

func max1(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// readRange reads up to want events from start on, stopping at the first
// missing sequence.
func (s *Store) readRange(token string, start uint64, want int) ([]store.Event, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(token, start), UpperBound: eventKey(token, start+uint64(want))})
	if err != nil {
		return nil, fmt.Errorf("durable store: read session %s: %w: %v", store.Prefix(token), store.ErrUnavailable, err)
	}
	evs := make([]store.Event, 0, want)
	next := start
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		seq := seqOf(k)
		if seq != next {
			break
		}
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("durable store: read session %s event %d: %w: %v", store.Prefix(token), seq, ErrCorrupt, err)
		}
		e, err := decodeEvent(seq, v)
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("durable store: read session %s event %d: %w: %v", store.Prefix(token), seq, ErrCorrupt, err)
		}
		evs = append(evs, e)
		next++
		if len(evs) == want {
			// Stepping on would load the block after the last event
			// read, which may hold another session's large event.
			break
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("durable store: read session %s: %w: %v", store.Prefix(token), ErrCorrupt, err)
	}
	return evs, nil
}

func seqOf(key []byte) uint64 {
	if len(key) < 8 {
		return 0
	}
	k := key[len(key)-8:]
	return uint64(k[0])<<56 | uint64(k[1])<<48 | uint64(k[2])<<40 | uint64(k[3])<<32 |
		uint64(k[4])<<24 | uint64(k[5])<<16 | uint64(k[6])<<8 | uint64(k[7])
}

// Wait implements store.Log. It also returns store.ErrUnavailable when the
// Store is closed while waiting.
func (s *Store) Wait(ctx context.Context, token string, after uint64) error {
	if err := s.shared("wait"); err != nil {
		return err
	}
	ss, err := s.lookup(token)
	s.rw.RUnlock()
	if err != nil {
		return err
	}
	return ss.Wait(ctx, after, s.closing, func() error { return s.unavailable("wait") })
}

// Trim implements store.Log. The floor rises in memory before the events
// are deleted, so no Read returns events below it meanwhile; if the
// deletion fails, the events stay on disk until a later Trim, Claim or End.
func (s *Store) Trim(ctx context.Context, token string, gen uint64, floor uint64) (store.Bounds, error) {
	var out store.Bounds
	err := s.fenced("trim", token, gen, func(ss *sess) error {
		var err error
		out, err = s.trim(ss, floor)
		return err
	})
	return out, err
}

// trim raises ss's floor to floor (at most HWM+1); the caller holds ss.wmu
// and s.rw shared, and has checked the generation.
func (s *Store) trim(ss *sess, floor uint64) (store.Bounds, error) {
	return s.cut(ss, func(seq uint64, _ []byte) bool { return seq < floor })
}

// cut removes ss's events from its floor up while more, given each event's
// sequence and stored value in turn, returns true; the event at which it
// returns false becomes the floor. The floor rises in memory before the
// events are deleted, so no Read returns events below it meanwhile; if the
// deletion fails, the events stay on disk until a later Trim, Claim or End.
// The caller holds ss.wmu and s.rw shared.
func (s *Store) cut(ss *sess, more func(seq uint64, v []byte) bool) (store.Bounds, error) {
	token := ss.token
	ss.Lock()
	m := ss.metaLocked()
	ss.Unlock()
	if m.hwm < m.floor {
		ss.Lock()
		defer ss.Unlock()
		return ss.BoundsLocked(), nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(token, m.floor), UpperBound: eventKey(token, m.hwm+1)})
	if err != nil {
		return store.Bounds{}, fmt.Errorf("durable store: trim session %s: %w: %v", store.Prefix(token), store.ErrUnavailable, err)
	}
	var removed int64
	n := m
	n.floor, n.oldest = m.hwm+1, time.Time{}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return store.Bounds{}, fmt.Errorf("durable store: trim session %s: %w: %v", store.Prefix(token), ErrCorrupt, err)
		}
		seq := seqOf(it.Key())
		if !more(seq, v) {
			n.floor, n.oldest = seq, eventTime(v)
			break
		}
		removed += eventSize(v)
		if seq == m.hwm {
			break // as readRange: not a step past the session's events
		}
	}
	it.Close()
	if n.floor <= m.floor {
		ss.Lock()
		defer ss.Unlock()
		return ss.BoundsLocked(), nil
	}
	n.bytes -= removed
	ss.Lock()
	ss.Floor, ss.Bytes, ss.Oldest = n.floor, n.bytes, n.oldest
	ss.WakeLocked()
	out := ss.BoundsLocked()
	ss.Unlock()
	s.total.Add(-removed)
	s.requeue(ss)

	b := s.db.NewBatch()
	b.DeleteRange(eventKey(token, m.floor), eventKey(token, n.floor), nil)
	b.Set(tokenKey(kindMeta, token), encodeMeta(n), nil)
	if err := s.commit(b, false); err != nil {
		return store.Bounds{}, fmt.Errorf("durable store: trim session %s to %d: %w", store.Prefix(token), n.floor, err)
	}
	return out, nil
}

// Bounds implements store.Log.
func (s *Store) Bounds(ctx context.Context, token string) (store.Bounds, error) {
	if err := s.shared("bounds"); err != nil {
		return store.Bounds{}, err
	}
	defer s.rw.RUnlock()
	ss, err := s.lookup(token)
	if err != nil {
		return store.Bounds{}, err
	}
	return ss.Bounds()
}
