package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/internal/image"
)

// lookup returns the session of token, loading it from Pebble when it is
// parked (park.go), or the error Get reports for it: *store.EndedError
// for a tombstone in force, store.ErrNotFound otherwise. The caller holds
// s.rw shared. A sess it returns may be parked meanwhile: its calls then
// meet errParked (isParked) and look it up again.
func (s *Store) lookup(token string) (*sess, error) {
	for {
		s.mu.Lock()
		ss, ok := s.sessions[token]
		p := s.parked[token]
		s.mu.Unlock()
		switch {
		case ok:
			return ss, nil
		case p == nil:
			return nil, s.errNotFound(token)
		}
		ss, err := s.unpark(token, p)
		if err != nil || ss != nil {
			return ss, err
		}
	}
}

// tomb reads token's tombstone, expired or not.
func (s *Store) tomb(token string) (tombJSON, bool, error) {
	v, closer, err := s.db.Get(tokenKey(kindTomb, token))
	if errors.Is(err, pebble.ErrNotFound) {
		return tombJSON{}, false, nil
	}
	if err != nil {
		return tombJSON{}, false, fmt.Errorf("durable store: read tombstone of %s: %w: %v", store.Prefix(token), store.ErrUnavailable, err)
	}
	defer closer.Close()
	var t tombJSON
	if err := json.Unmarshal(v, &t); err != nil {
		return tombJSON{}, false, fmt.Errorf("durable store: tombstone of %s: %w: %v", store.Prefix(token), ErrCorrupt, err)
	}
	return t, true, nil
}

// Create implements store.Sessions. Besides the contract's errors it
// refuses a token that is empty or longer than 255 bytes.
func (s *Store) Create(ctx context.Context, rec store.Record) error {
	if err := s.shared("create"); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	if rec.Token == "" || len(rec.Token) > maxTokenLen {
		return fmt.Errorf("durable store: create: session token of %d bytes, want 1 to %d", len(rec.Token), maxTokenLen)
	}
	s.mu.Lock()
	if _, ok := s.sessions[rec.Token]; ok || s.parked[rec.Token] != nil {
		s.mu.Unlock()
		return fmt.Errorf("durable store: create %s: %w", store.Prefix(rec.Token), store.ErrExists)
	}
	// Tokens are never reissued: an expired tombstone still refuses them.
	if _, found, err := s.tomb(rec.Token); err != nil || found {
		s.mu.Unlock()
		if err != nil {
			return err
		}
		return fmt.Errorf("durable store: create %s: %w (tombstoned)", store.Prefix(rec.Token), store.ErrExists)
	}
	rec.State, rec.Openings = image.Clone(rec.State), nil
	ss := newSess(rec, 1)
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	s.sessions[rec.Token] = ss
	s.heldMax = max(s.heldMax, len(s.sessions))
	s.mu.Unlock()

	b := s.db.NewBatch()
	b.Set(tokenKey(kindRecord, rec.Token), encodeRecord(rec), nil)
	b.Set(tokenKey(kindMeta, rec.Token), encodeMeta(meta{floor: 1}), nil)
	if err := s.commit(b, true); err != nil {
		s.mu.Lock()
		delete(s.sessions, rec.Token)
		s.mu.Unlock()
		ss.Lock()
		ss.Ended = fmt.Errorf("durable store: session %s: %w", store.Prefix(rec.Token), store.ErrNotFound)
		ss.Unlock()
		return fmt.Errorf("durable store: create %s: %w", store.Prefix(rec.Token), err)
	}
	s.noteOwner(rec.Owner)
	return nil
}

// noteOwner records that owner writes through this Store, so the sweeper
// leaves its sessions to it.
func (s *Store) noteOwner(owner string) {
	s.mu.Lock()
	s.owners[owner] = true
	s.mu.Unlock()
}

// Get implements store.Sessions.
func (s *Store) Get(ctx context.Context, token string) (store.Record, error) {
	if err := s.shared("get"); err != nil {
		return store.Record{}, err
	}
	defer s.rw.RUnlock()
	for {
		s.mu.Lock()
		p := s.parked[token]
		s.mu.Unlock()
		if p != nil {
			// Read from Pebble, and left there: a Get alone does not load
			// a parked session.
			rec, err := s.readRecord(token)
			s.mu.Lock()
			same := s.parked[token] == p
			s.mu.Unlock()
			if same || err != nil {
				return rec, err
			}
			continue // loaded or ended meanwhile
		}
		ss, err := s.lookup(token)
		if err != nil {
			return store.Record{}, err
		}
		if rec, err := ss.Record(); !isParked(err) {
			return rec, err
		}
	}
}

// write runs f for token's session under its write lock, after checking
// that it has not ended; f returns the error of the call. A session left
// with no owner and nothing in flight is parked afterwards (park.go).
func (s *Store) write(op, token string, f func(ss *sess) error) error {
	if err := s.shared(op); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	for {
		ss, err := s.lookup(token)
		if err != nil {
			return err
		}
		ss.wmu.Lock()
		ss.Lock()
		ended := ss.Ended
		ss.Unlock()
		if isParked(ended) {
			ss.wmu.Unlock()
			continue
		}
		if ended != nil {
			ss.wmu.Unlock()
			return ended
		}
		err = f(ss)
		s.park(token, ss)
		ss.wmu.Unlock()
		return err
	}
}

// fenced is write with the generation check of op: gen must be the
// record's. The record's generation only changes under wmu, so the check
// holds until f's commit.
func (s *Store) fenced(op, token string, gen uint64, f func(ss *sess) error) error {
	return s.write(op, token, func(ss *sess) error {
		if cur := ss.Rec.Generation; cur != gen {
			return &store.FencedError{Token: token, Op: op, Have: gen, Want: cur}
		}
		return f(ss)
	})
}

// putRecord commits rec as ss's record and then installs it in memory.
func (s *Store) putRecord(ss *sess, rec store.Record, grows bool) error {
	b := s.db.NewBatch()
	b.Set(tokenKey(kindRecord, ss.token), encodeRecord(rec), nil)
	if err := s.commit(b, grows); err != nil {
		return err
	}
	ss.Lock()
	ss.Rec = rec
	ss.Unlock()
	return nil
}

// Claim implements store.Sessions. The new record, the emptied log and the
// deletion of the older generations' events are one atomic, durable write.
// It goes through the free-space guard as a write that adds data does
// (Options.MinFreeBytes): a claim is a request's first write of its
// generation, whose next writes (the state, the events) the guard would
// refuse, so during an outage the store knows of it fails with
// store.ErrUnavailable and the session keeps its generation, and the
// events it would delete stay for the claim after the outage to read the
// lost requests from (DESIGN.md, "Generations").
func (s *Store) Claim(ctx context.Context, token, owner string, from uint64, leaseUntil time.Time) (store.Record, error) {
	var out store.Record
	err := s.fenced("claim", token, from, func(ss *sess) error {
		if err := ss.pend.Drain(ctx); err != nil {
			return fmt.Errorf("durable store: claim %s gen %d: %w", store.Prefix(token), from, err)
		}
		rec := ss.Rec
		rec.Generation = from + 1
		rec.Owner = owner
		rec.LeaseUntil = leaseUntil
		rec.Openings = nil
		ss.Lock()
		hwm, oldBytes := ss.HWM, ss.Bytes
		ss.Unlock()
		m := meta{floor: hwm + 1, hwm: hwm}
		b := s.db.NewBatch()
		b.Set(tokenKey(kindRecord, token), encodeRecord(rec), nil)
		b.Set(tokenKey(kindMeta, token), encodeMeta(m), nil)
		b.DeleteRange(eventKey(token, 0), eventKey(token, hwm+1), nil)
		if err := s.commit(b, true); err != nil {
			return fmt.Errorf("durable store: claim %s gen %d: %w", store.Prefix(token), from, err)
		}
		ss.Lock()
		ss.ClaimLocked(rec)
		ss.next = 0
		ss.Unlock()
		s.total.Add(-oldBytes)
		s.requeue(ss)
		s.noteOwner(owner)
		out = rec
		out.State = image.Clone(rec.State)
		return nil
	})
	return out, err
}

// Renew implements store.Sessions.
func (s *Store) Renew(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) error {
	return s.fenced("renew", token, gen, func(ss *sess) error {
		if ss.Rec.Owner != owner {
			return &store.FencedError{Token: token, Op: "renew", Have: gen, Want: ss.Rec.Generation}
		}
		rec := ss.Rec
		rec.LeaseUntil = leaseUntil
		return s.putRecord(ss, rec, false)
	})
}

// SaveState implements store.Sessions.
func (s *Store) SaveState(ctx context.Context, token string, gen uint64, state []byte) error {
	return s.fenced("save state", token, gen, func(ss *sess) error {
		rec := ss.Rec
		rec.State = image.Clone(state)
		return s.putRecord(ss, rec, true)
	})
}

// Hibernate implements store.Sessions.
func (s *Store) Hibernate(ctx context.Context, token, owner string, gen uint64, state []byte) error {
	return s.fenced("hibernate", token, gen, func(ss *sess) error {
		if ss.Rec.Owner != owner {
			return &store.FencedError{Token: token, Op: "hibernate", Have: gen, Want: ss.Rec.Generation}
		}
		rec := ss.Rec
		rec.State = image.Clone(state)
		rec.Owner, rec.LeaseUntil = "", time.Time{}
		return s.putRecord(ss, rec, true)
	})
}

// Wake implements store.Sessions. It returns once the record is in
// Pebble's write-ahead log, without waiting for an fsync: the log is one
// ordered file, so every later synced write (the first event the woken
// session stores, its next SaveState, Hibernate or End, any other
// session's group commit) makes the wake durable too, and a crash before
// one leaves the record as Hibernate left it, which is what the wake read.
// A wake changes only the owner and the lease, never the generation (a
// wake at generation+1 is a Claim, which waits for its fsync), and nothing
// a client observes of the woken session gets past the durable
// watermark, which only such a synced write moves (DESIGN.md,
// "Hibernation").
func (s *Store) Wake(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) (store.Record, error) {
	var out store.Record
	err := s.fenced("wake", token, gen, func(ss *sess) error {
		if ss.Rec.Owner != "" {
			return &store.FencedError{Token: token, Op: "wake", Have: gen, Want: ss.Rec.Generation}
		}
		ss.Lock()
		lost := ss.Lost
		ss.Unlock()
		if lost != nil {
			return lost
		}
		rec := ss.Rec
		rec.Owner, rec.LeaseUntil = owner, leaseUntil
		// Written to Pebble's log without waiting for an fsync: see the
		// doc comment.
		b := s.db.NewBatch()
		b.Set(tokenKey(kindRecord, token), encodeRecord(rec), nil)
		err := b.Commit(pebble.NoSync)
		b.Close()
		if err != nil {
			return fmt.Errorf("durable store: wake %s gen %d: %w: %v", store.Prefix(token), gen, store.ErrUnavailable, err)
		}
		ss.Lock()
		ss.Rec = rec
		ss.Unlock()
		s.noteOwner(owner)
		out = rec
		out.State = image.Clone(rec.State)
		return nil
	})
	return out, err
}

// Touch implements store.Sessions.
func (s *Store) Touch(ctx context.Context, token string, at time.Time) error {
	return s.write("touch", token, func(ss *sess) error {
		if !at.After(ss.Rec.LastSeen) {
			return nil
		}
		rec := ss.Rec
		rec.LastSeen = at
		return s.putRecord(ss, rec, false)
	})
}

// End implements store.Sessions: the record, the log meta and every event
// are deleted and the tombstone written in one atomic, durable write.
func (s *Store) End(ctx context.Context, token string, reason store.EndReason, tombstoneUntil time.Time) error {
	err := s.write("end", token, func(ss *sess) error {
		return s.end(ss, reason, tombstoneUntil)
	})
	var ended *store.EndedError
	if errors.As(err, &ended) {
		return nil // ending an ended session keeps its first reason
	}
	return err
}

// end ends ss, once the committer has taken what ss has pending; the
// caller holds ss.wmu and s.rw shared.
func (s *Store) end(ss *sess, reason store.EndReason, until time.Time) error {
	token := ss.token
	ss.pend.Drain(context.Background())
	tb, _ := json.Marshal(tombJSON{Reason: reason, UserID: ss.Rec.UserID, Until: until})
	b := s.db.NewBatch()
	b.Delete(tokenKey(kindRecord, token), nil)
	b.Delete(tokenKey(kindMeta, token), nil)
	b.DeleteRange(eventKey(token, 0), eventKey(token, ^uint64(0)), nil)
	b.Delete(eventKey(token, ^uint64(0)), nil)
	b.Set(tokenKey(kindTomb, token), tb, nil)
	if err := s.commit(b, false); err != nil {
		return fmt.Errorf("durable store: end %s: %w", store.Prefix(token), err)
	}
	s.mu.Lock()
	if s.sessions[token] == ss {
		delete(s.sessions, token)
	}
	s.mu.Unlock()
	ss.Lock()
	bytes := ss.Bytes
	ss.EndLocked(reason)
	ss.Unlock()
	s.total.Add(-bytes)
	s.requeue(ss)
	return nil
}
