package durable

// This file holds parking: a hibernated session (a record with no owner,
// store.Sessions.Hibernate) keeps nothing in memory but an index entry,
// its record and log meta living in Pebble only, and is loaded back by
// the first call that names it (DESIGN.md, "Hibernation").

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/agequeue"
	"github.com/tidemark-mcp/tidemark/store"
)

// parkedSess is the index entry of a parked session: what the Store needs
// of it without reading Pebble. Each parking makes a new entry, so an
// entry unchanged between two looks means no write happened in between.
type parkedSess struct {
	// age is the session's item in the bound's queue while it retains
	// two events or more (the bound trims parked sessions too), nil
	// otherwise.
	age *agequeue.Item[string]
	// lastSeen is the record's LastSeen (Unix nanoseconds), for the
	// sweeper's idle check.
	lastSeen int64
}

// errParked is the Ended error of a sess once parked: every call that
// met it looks the session up again, which loads it back.
var errParked = errors.New("durable store: session parked")

// park takes ss out of memory when its record has no owner (it is
// hibernated) and nothing of it is in flight: no event waiting for the
// committer, no lost generation. Its record and meta are in Pebble as in
// the image. token is the caller's string, kept as the index's key. The
// caller holds ss.wmu and s.rw shared.
func (s *Store) park(token string, ss *sess) {
	ss.Lock()
	idle := ss.Rec.Owner == "" && ss.Ended == nil && ss.Lost == nil && ss.next <= ss.HWM
	lastSeen := unixNano(ss.Rec.LastSeen)
	ss.Unlock()
	if n, _ := ss.pend.Len(); !idle || n > 0 {
		return
	}
	// A publication of its last events may still be running (it queues
	// the session for the bound after it released them): let it end.
	s.publishing.Lock()
	s.publishing.Unlock()
	p := &parkedSess{lastSeen: lastSeen}
	s.bound.mu.Lock()
	if ss.age.Queued() {
		p.age = ss.age
	}
	s.bound.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[ss.token] != ss {
		return
	}
	delete(s.sessions, ss.token)
	s.parked[token] = p
	if n := len(s.sessions); s.heldMax >= 64 && n < s.heldMax/4 {
		// A Go map keeps the room of the most it held: made anew at its
		// size, it gives back what the parked sessions took, once per
		// fourfold shrink.
		held := make(map[string]*sess, n)
		maps.Copy(held, s.sessions)
		s.sessions, s.heldMax = held, n
	}
	ss.Lock()
	ss.Ended = errParked
	ss.WakeLocked() // its Waits look again, at the session loaded back
	ss.Unlock()
}

// unpark loads the session p stands for from Pebble and makes it live
// again. It returns nil, nil when p is no longer token's entry (another
// call loaded it first, or it ended): the caller looks again.
func (s *Store) unpark(token string, p *parkedSess) (*sess, error) {
	rec, err := s.readRecord(token)
	if err != nil {
		return nil, err
	}
	v, closer, err := s.db.Get(tokenKey(kindMeta, token))
	if err != nil {
		return nil, fmt.Errorf("durable store: read the log meta of %s: %w: %v", store.Prefix(token), store.ErrUnavailable, err)
	}
	m, err := decodeMeta(v)
	closer.Close()
	if err != nil {
		return nil, fmt.Errorf("durable store: log meta of %s: %w: %v", store.Prefix(token), ErrCorrupt, err)
	}
	ss := &sess{token: token}
	ss.Rec = rec
	ss.Floor, ss.HWM, ss.Bytes, ss.Oldest = m.floor, m.hwm, m.bytes, m.oldest
	ss.age = p.age
	if ss.age == nil {
		ss.age = agequeue.NewItem(token)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parked[token] != p {
		return nil, nil
	}
	delete(s.parked, token)
	s.sessions[token] = ss
	s.heldMax = max(s.heldMax, len(s.sessions))
	return ss, nil
}

// isParked reports whether err is errParked.
func isParked(err error) bool { return err == errParked }

// parkAtOpen parks ss, read by Open, when its record has no owner.
func (s *Store) parkAtOpen(token string, ss *sess) {
	if ss.Rec.Owner != "" {
		return
	}
	p := &parkedSess{lastSeen: unixNano(ss.Rec.LastSeen)}
	if ss.age.Queued() {
		p.age = ss.age
	}
	delete(s.sessions, token)
	s.parked[token] = p
}

// readRecord reads token's record from Pebble.
func (s *Store) readRecord(token string) (store.Record, error) {
	v, closer, err := s.db.Get(tokenKey(kindRecord, token))
	if err != nil {
		return store.Record{}, fmt.Errorf("durable store: read the record of %s: %w: %v", store.Prefix(token), store.ErrUnavailable, err)
	}
	defer closer.Close()
	rec, err := decodeRecord(token, v)
	if err != nil {
		return store.Record{}, fmt.Errorf("durable store: record of %s: %w: %v", store.Prefix(token), ErrCorrupt, err)
	}
	return rec, nil
}

// unixNano is t in Unix nanoseconds, the least int64 for the zero Time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

// errNotFound is the error of a token with no record, for lookup.
func (s *Store) errNotFound(token string) error {
	t, found, err := s.tomb(token)
	if err != nil {
		return err
	}
	if found && s.opts.Now().Before(t.Until) {
		return &store.EndedError{Token: token, Reason: t.Reason, UserID: t.UserID}
	}
	return fmt.Errorf("durable store: session %s: %w", store.Prefix(token), store.ErrNotFound)
}
