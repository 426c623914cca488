package durable

import (
	"errors"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Groups returns the number of group commits (one fsync each) so far.
func (s *Store) Groups() int64 { return s.groups.Load() }

// SetMetaBytes writes n as the byte count of token's log meta in the
// closed store at dir, through Pebble directly, as a damaged count.
func SetMetaBytes(dir, token string, n int64) error {
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		return err
	}
	v, closer, err := db.Get(tokenKey(kindMeta, token))
	if err != nil {
		db.Close()
		return err
	}
	m, err := decodeMeta(v)
	closer.Close()
	if err != nil {
		db.Close()
		return err
	}
	m.bytes = n
	if err := db.Set(tokenKey(kindMeta, token), encodeMeta(m), pebble.Sync); err != nil {
		db.Close()
		return err
	}
	return db.Close()
}

// TaskKeys returns the number of task record keys and of expiry index keys
// in the store.
func (s *Store) TaskKeys() (records, index int, err error) {
	count := func(kind byte) (int, error) {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kind}, UpperBound: []byte{kind + 1}})
		if err != nil {
			return 0, err
		}
		n := 0
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		return n, it.Close()
	}
	if records, err = count(kindTask); err != nil {
		return 0, 0, err
	}
	index, err = count(kindTaskIndex)
	return records, index, err
}

// TaskValue returns the stored value of task id (its revision, then its
// stored form), nil when there is none.
func (s *Store) TaskValue(id string) ([]byte, error) {
	v, closer, err := s.db.Get(taskKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// Parked reports whether token's session is parked: hibernated, with only
// an index entry in memory, and whether it is in the map of sessions held
// in memory.
func (s *Store) Parked(token string) (parked, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, held = s.sessions[token]
	return s.parked[token] != nil, held
}

// HeldRoom returns the most entries the map of sessions held in memory
// has held since it was last made anew (park).
func (s *Store) HeldRoom() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldMax
}

// HoldCommits makes Check report a commit stalled after stalled, and holds
// the next group commit before its write until release is called.
func (s *Store) HoldCommits(stalled time.Duration) (held <-chan struct{}, release func()) {
	s.stalled.Store(int64(stalled))
	reached, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := func() {
		once.Do(func() {
			close(reached)
			<-gate
		})
	}
	s.beforeCommit.Store(&hold)
	return reached, sync.OnceFunc(func() { close(gate) })
}
