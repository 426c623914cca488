package durable

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/internal/pending"
)

// Append implements store.Log, pipelined: it assigns the sequences, hands
// the events to the committer and returns; the committer stores them with
// the next group's fsync, and only then are they visible to Read and Wait
// (durable.go, "Durability and group commit"). It waits first while the
// session's events not yet stored exceed Options.MaxPendingEvents or
// MaxPendingBytes. When the retained bytes exceed Options.MaxBytes
// afterwards, the oldest events of the store are trimmed (see Options).
// Besides the contract's errors it fails with a *store.LostError once a
// group holding the generation's events could not be stored (the file
// system low on space: its cause wraps both store.ErrUnavailable and
// ErrNoSpace), and, while the last group that added data or the last
// Check found the space low or the data directory gone and it still is,
// at once with an error wrapping store.ErrUnavailable (and ErrNoSpace
// for the space), appending nothing (the generation goes on once the
// store takes data again).
func (s *Store) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	var out store.Bounds
	err := s.fenced("append", token, gen, func(ss *sess) error {
		ss.Lock()
		lost := ss.Lost
		ss.Unlock()
		if lost != nil {
			return lost
		}
		if s.low.Load() {
			if err := s.refusal(); err != nil {
				return fmt.Errorf("durable store: append session %s gen %d: %w", store.Prefix(token), gen, err)
			}
			s.low.Store(false)
		}
		if len(evs) == 0 {
			out = s.assignedBounds(ss)
			return nil
		}
		var added int64
		for i := range evs {
			added += evs[i].Size()
		}
		if err := ss.pend.Reserve(ctx, len(evs), added, s.pendLimits); err != nil {
			return fmt.Errorf("durable store: append session %s gen %d: waiting for room: %w", store.Prefix(token), gen, err)
		}
		first := s.assigned(ss) + 1
		ss.Lock()
		if first-1 < ss.Floor { // the log, queued events included, is empty
			ss.nextOldest = evs[0].Time
		}
		ss.Unlock()
		b := s.db.NewBatch()
		for i := range evs {
			e := &evs[i]
			e.Seq, e.Generation = first+uint64(i), gen
			if e.Stream == store.NewStream {
				e.Stream = e.Seq
			}
			b.Set(eventKey(token, e.Seq), encodeEvent(e), nil)
		}
		ss.Lock()
		ss.next = first + uint64(len(evs)) - 1
		ss.Unlock()
		a := &appendReq{ss: ss, gen: gen, first: first, n: len(evs), bytes: added, oldest: evs[0].Time, linger: pending.Lingers(evs)}
		if err := s.enqueue(commitReq{b: b, grows: true, app: a}); err != nil {
			ss.Lock()
			ss.next = first - 1
			ss.Unlock()
			ss.pend.Release(len(evs), added)
			return fmt.Errorf("durable store: append session %s gen %d: %w", store.Prefix(token), gen, err)
		}
		out = s.assignedBounds(ss)
		return nil
	})
	if err != nil {
		return store.Bounds{}, err
	}
	if s.needsTrim(s.total.Load()) {
		s.enforceBound(ctx)
	}
	return out, nil
}

// assigned returns the highest sequence assigned in ss: its durable HWM,
// or above it while appended events wait for the committer. The caller
// holds ss.wmu.
func (s *Store) assigned(ss *sess) uint64 {
	ss.Lock()
	defer ss.Unlock()
	return max(ss.next, ss.HWM)
}

// assignedBounds returns ss's bounds as they will be once what was
// appended is stored. The caller holds ss.wmu.
func (s *Store) assignedBounds(ss *sess) store.Bounds {
	ss.Lock()
	defer ss.Unlock()
	// Read under the lock publish releases the pending count under.
	_, bytes := ss.pend.Len()
	b := ss.BoundsLocked()
	if ss.next > b.HWM {
		if b.HWM < b.Floor {
			b.Oldest = ss.nextOldest
		}
		b.HWM = ss.next
		b.Events = int(b.HWM - b.Floor + 1)
		b.Bytes += bytes
	}
	return b
}

// Sync implements store.Log: it waits until the committer has taken every
// event appended to the session so far, stored or lost, then applies the
// directory bound (Options.MaxBytes) to what is stored, as Append does.
func (s *Store) Sync(ctx context.Context, token string) error {
	if err := s.shared("sync"); err != nil {
		return err
	}
	ss, err := s.lookup(token)
	s.rw.RUnlock()
	if err != nil {
		return err
	}
	// A parked session has nothing in flight: draining the sess it was
	// returns at once, and its Ended (errParked) means stored.
	if err := ss.pend.Drain(ctx); err != nil {
		return err
	}
	// The drain returns when publish releases the session's events, before
	// it adds their bytes to the total and queues the session for the
	// bound: wait for that publish to end.
	s.publishing.Lock()
	s.publishing.Unlock()
	if s.needsTrim(s.total.Load()) {
		s.enforceBound(ctx)
	}
	ss.Lock()
	defer ss.Unlock()
	if ss.Ended != nil && !isParked(ss.Ended) {
		return ss.Ended
	}
	return ss.Lost
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
		if isParked(ss.Ended) {
			ss.Unlock()
			if ss, err = s.lookup(token); err != nil {
				return nil, store.Bounds{}, err
			}
			attempt--
			continue
		}
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
	if want <= pointReads {
		return s.readPoints(token, start, want)
	}
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
	for {
		ss, err := s.lookup(token)
		s.rw.RUnlock()
		if err != nil {
			return err
		}
		err = ss.Wait(ctx, after, s.closing, func() error { return s.unavailable("wait") })
		if !isParked(err) {
			return err
		}
		if err := s.shared("wait"); err != nil {
			return err
		}
	}
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
// events are deleted, so no Read returns events below it meanwhile; the
// deletion is committed with the next group, without waiting for it; if
// it fails, the events stay on disk until a later Trim, Claim or End.
// The caller holds ss.wmu and s.rw shared.
func (s *Store) cut(ss *sess, more func(seq uint64, v []byte) bool) (store.Bounds, error) {
	token := ss.token
	ss.Lock()
	m := ss.metaLocked()
	openings := ss.Rec.Openings
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
	// The record keeps the request ids of the streams whose opening
	// event goes while they have not ended (store.Openings), written in
	// the batch that deletes the events. The caller holds ss.wmu, which
	// every record write holds: ss.Rec is the last record written.
	reopened := false
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
		if len(v) < eventHeaderLen {
			it.Close()
			return store.Bounds{}, fmt.Errorf("durable store: trim session %s: %w: event %d: %v", store.Prefix(token), ErrCorrupt, seq, errShortEvent)
		}
		var changed bool
		openings, changed = openings.Trimmed(seq, binary.BigEndian.Uint64(v[8:]), store.Kind(v[16]), v[17]&flagEnd != 0, v[eventHeaderLen:])
		reopened = reopened || changed
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
	// The committer may have published more of the session's events
	// since m was read (publish does not take ss.wmu): the floor is set
	// and the removed bytes taken off the image as it is now, never the
	// image of m written back over those events.
	ss.Lock()
	ss.Floor = n.floor
	ss.Bytes -= removed
	var rec store.Record
	if reopened {
		ss.Rec.Openings = openings
		rec = ss.Rec
	}
	oldestUnknown := false
	switch {
	case n.floor <= m.hwm:
		ss.Oldest = n.oldest
	case ss.HWM < n.floor:
		ss.Oldest = time.Time{} // empty; the next publication sets it
	default:
		oldestUnknown = true // every event of m went, and newer ones came
	}
	ss.WakeLocked()
	out := ss.BoundsLocked()
	ss.Unlock()
	if oldestUnknown {
		if v, closer, err := s.db.Get(eventKey(token, n.floor)); err == nil {
			t := eventTime(v)
			closer.Close()
			ss.Lock()
			if ss.Floor == n.floor {
				ss.Oldest = t
			}
			out.Oldest = ss.Oldest
			ss.Unlock()
		}
	}
	s.total.Add(-removed)
	s.requeue(ss)

	b := s.db.NewBatch()
	b.DeleteRange(eventKey(token, m.floor), eventKey(token, n.floor), nil)
	if reopened {
		b.Set(tokenKey(kindRecord, token), encodeRecord(rec), nil)
	}
	// Pipelined as appends are: the caller (retention, after an append)
	// does not wait for the fsync. The committer writes the log meta from
	// the image with the group, so that it holds the events of a group
	// being committed now too.
	// It counts as a pending event of the session until committed, so
	// that Claim and End, which wait for none to be pending, never share
	// its group (whose meta would overwrite theirs).
	ss.pend.Reserve(context.Background(), 1, 0, s.pendLimits)
	ss.Lock()
	hibernated := ss.Rec.Owner == ""
	ss.Unlock()
	if hibernated {
		// Nobody appends to a hibernated session: the trim is waited
		// for, so that the session is parked again once it returns
		// (park.go) instead of staying in memory.
		err := s.commitReq(commitReq{b: b, meta: ss})
		ss.pend.Release(1, 0)
		if err != nil {
			return store.Bounds{}, fmt.Errorf("durable store: trim session %s to %d: %w", store.Prefix(token), n.floor, err)
		}
		return out, nil
	}
	if err := s.enqueue(commitReq{b: b, meta: ss}); err != nil {
		ss.pend.Release(1, 0)
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
	for {
		ss, err := s.lookup(token)
		if err != nil {
			return store.Bounds{}, err
		}
		if b, err := ss.Bounds(); !isParked(err) {
			return b, err
		}
	}
}

// pointReads is the most events readRange reads by point lookups (Get)
// instead of an iterator: a live reader usually asks for the one or two
// events just stored, and a lookup costs less than setting up an
// iterator and seeking it.
const pointReads = 2

// readPoints is readRange for want events or fewer, by point lookups. It
// stops at the first sequence not found, as readRange does.
func (s *Store) readPoints(token string, start uint64, want int) ([]store.Event, error) {
	evs := make([]store.Event, 0, want)
	for seq := start; len(evs) < want; seq++ {
		v, closer, err := s.db.Get(eventKey(token, seq))
		if errors.Is(err, pebble.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("durable store: read session %s event %d: %w: %v", store.Prefix(token), seq, store.ErrUnavailable, err)
		}
		e, err := decodeEvent(seq, v)
		closer.Close()
		if err != nil {
			return nil, fmt.Errorf("durable store: read session %s event %d: %w: %v", store.Prefix(token), seq, ErrCorrupt, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}
