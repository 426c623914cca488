package durable

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// taskStripes is the number of locks the task IDs are spread over. A lock
// is held across a write's fsync, so tasks of distinct stripes share the
// committer's fsyncs; 64 stripes keep two tasks written at once on one
// stripe rare at the concurrency of a single process's tool calls.
const taskStripes = 64

// purgeChunk bounds the expired tasks one commit of the purge deletes, so
// the purge holds the task locks for one fsync at a time.
const purgeChunk = 256

var _ store.Tasks = (*Store)(nil)

// taskLock returns the lock of id's stripe (FNV-1a of the ID).
func (s *Store) taskLock(id string) *sync.Mutex { return &s.taskLocks[taskStripe(id)] }

func taskStripe(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h % taskStripes)
}

// readTask reads the record of id, expired or not; found is false when
// there is none. The caller holds s.rw shared.
func (s *Store) readTask(id string) (rec tasks.Record, rev uint64, found bool, err error) {
	if id == "" || len(id) > maxTokenLen {
		return tasks.Record{}, 0, false, nil // no such key can be stored
	}
	v, closer, err := s.db.Get(taskKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return tasks.Record{}, 0, false, nil
	}
	if err != nil {
		return tasks.Record{}, 0, false, fmt.Errorf("durable store: read task %s: %w: %v", tasks.Prefix(id), store.ErrUnavailable, err)
	}
	defer closer.Close()
	rec, rev, err = decodeTask(v)
	if err != nil {
		return tasks.Record{}, 0, false, fmt.Errorf("durable store: task %s: %w: %v: restore the data directory from a backup", tasks.Prefix(id), ErrCorrupt, err)
	}
	return rec, rev, true, nil
}

// liveTask reads the record of id, or fails with store.ErrTaskNotFound when
// there is none or it is at or past its KeepUntil (expiry plus tasks.Linger) by the store's clock
// (Options.Now). The caller holds s.rw shared.
func (s *Store) liveTask(op, id string) (tasks.Record, uint64, error) {
	rec, rev, found, err := s.readTask(id)
	if err != nil {
		return tasks.Record{}, 0, err
	}
	if !found || !s.opts.Now().Before(rec.KeepUntil()) {
		return tasks.Record{}, 0, fmt.Errorf("durable store: %s %s: %w", op, tasks.Prefix(id), store.ErrTaskNotFound)
	}
	return rec, rev, nil
}

// CreateTask implements store.Tasks. An expired record of the same ID is
// replaced. Besides the contract's errors it refuses an ID that is empty or
// longer than 255 bytes, and fails with store.ErrUnavailable (and
// ErrNoSpace) when the record cannot be stored.
func (s *Store) CreateTask(ctx context.Context, rec tasks.Record) error {
	if rec.ID == "" || len(rec.ID) > maxTokenLen {
		return fmt.Errorf("durable store: create task: task ID of %d bytes, want 1 to %d", len(rec.ID), maxTokenLen)
	}
	data, err := tasks.Marshal(rec)
	if err != nil {
		return err
	}
	if err := s.shared("create task"); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	mu := s.taskLock(rec.ID)
	mu.Lock()
	defer mu.Unlock()
	old, _, found, err := s.readTask(rec.ID)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	if found {
		if s.opts.Now().Before(old.KeepUntil()) {
			b.Close()
			return fmt.Errorf("durable store: create task %s: %w", tasks.Prefix(rec.ID), store.ErrExists)
		}
		b.Delete(taskIndexKey(expiryNanos(old.KeepUntil()), rec.ID), nil)
	}
	b.Set(taskKey(rec.ID), encodeTask(1, data), nil)
	b.Set(taskIndexKey(expiryNanos(rec.KeepUntil()), rec.ID), nil, nil)
	if err := s.commit(b, true); err != nil {
		return fmt.Errorf("durable store: create task %s: %w", tasks.Prefix(rec.ID), err)
	}
	return nil
}

// GetTask implements store.Tasks. It reads under the task's lock: Pebble
// makes a batch visible before its fsync is done, and a writer holds the
// lock until then, so no read shows a state that kill -9 could take back.
func (s *Store) GetTask(ctx context.Context, id string) (tasks.Record, uint64, error) {
	if err := s.shared("get task"); err != nil {
		return tasks.Record{}, 0, err
	}
	defer s.rw.RUnlock()
	return s.lockedTask("get task", id)
}

// lockedTask is liveTask under the lock of id's stripe. The caller holds
// s.rw shared.
func (s *Store) lockedTask(op, id string) (tasks.Record, uint64, error) {
	mu := s.taskLock(id)
	mu.Lock()
	defer mu.Unlock()
	return s.liveTask(op, id)
}

// UpdateTask implements store.Tasks. When rec expires at another time than
// the stored record (its TTL grew: tasks.Rules.Keep), the batch moves the
// task's expiry index key too. Besides the contract's errors it fails with
// store.ErrUnavailable (and ErrNoSpace) when the record cannot be stored.
func (s *Store) UpdateTask(ctx context.Context, rec tasks.Record, rev uint64) (uint64, error) {
	data, err := tasks.Marshal(rec)
	if err != nil {
		return 0, err
	}
	if err := s.shared("update task"); err != nil {
		return 0, err
	}
	defer s.rw.RUnlock()
	mu := s.taskLock(rec.ID)
	mu.Lock()
	defer mu.Unlock()
	old, cur, err := s.liveTask("update task", rec.ID)
	if err != nil {
		return 0, err
	}
	if cur != rev {
		return 0, fmt.Errorf("durable store: task %s at revision %d, written at %d: %w", tasks.Prefix(rec.ID), cur, rev, store.ErrStale)
	}
	b := s.db.NewBatch()
	b.Set(taskKey(rec.ID), encodeTask(rev+1, data), nil)
	if was, will := expiryNanos(old.KeepUntil()), expiryNanos(rec.KeepUntil()); was != will {
		b.Delete(taskIndexKey(was, rec.ID), nil)
		b.Set(taskIndexKey(will, rec.ID), nil, nil)
	}
	if err := s.commit(b, true); err != nil {
		return 0, fmt.Errorf("durable store: update task %s: %w", tasks.Prefix(rec.ID), err)
	}
	return rev + 1, nil
}

// DeleteTask implements store.Tasks: the record and its expiry index key
// go in one batch.
func (s *Store) DeleteTask(ctx context.Context, id string, rev uint64) error {
	if err := s.shared("delete task"); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	mu := s.taskLock(id)
	mu.Lock()
	defer mu.Unlock()
	old, cur, err := s.liveTask("delete task", id)
	if err != nil {
		return err
	}
	if cur != rev {
		return fmt.Errorf("durable store: task %s at revision %d, deleted at %d: %w", tasks.Prefix(id), cur, rev, store.ErrStale)
	}
	b := s.db.NewBatch()
	b.Delete(taskKey(id), nil)
	b.Delete(taskIndexKey(expiryNanos(old.KeepUntil()), id), nil)
	if err := s.commit(b, false); err != nil {
		return fmt.Errorf("durable store: delete task %s: %w", tasks.Prefix(id), err)
	}
	return nil
}

// WorkingTasks implements store.Tasks. It reads every task record (it
// runs at start and in sweeps, so a full scan is its price) and then each
// working one again under its lock, as GetTask does, and calls f once the
// reads are over, so f may call the store. A record that cannot be decoded
// fails the scan with ErrCorrupt.
func (s *Store) WorkingTasks(ctx context.Context, f func(tasks.Record, uint64) bool) error {
	working, revs, err := s.scanWorking(ctx)
	if err != nil {
		return err
	}
	for i, rec := range working {
		if !f(rec, revs[i]) {
			return nil
		}
	}
	return ctx.Err()
}

// scanWorking returns the working, unexpired task records and their
// revisions.
func (s *Store) scanWorking(ctx context.Context) ([]tasks.Record, []uint64, error) {
	if err := s.shared("scan tasks"); err != nil {
		return nil, nil, err
	}
	defer s.rw.RUnlock()
	ids, err := s.workingIDs(ctx)
	if err != nil {
		return nil, nil, err
	}
	var (
		working []tasks.Record
		revs    []uint64
	)
	for _, id := range ids {
		rec, rev, err := s.lockedTask("scan tasks", id)
		if errors.Is(err, store.ErrTaskNotFound) {
			continue // deleted, or expired, since the scan
		}
		if err != nil {
			return nil, nil, err
		}
		if rec.Status == tasks.Working {
			working = append(working, rec)
			revs = append(revs, rev)
		}
	}
	return working, revs, nil
}

// workingIDs returns the IDs of the task records that read working and
// unexpired, without the task locks. The caller holds s.rw shared.
func (s *Store) workingIDs(ctx context.Context) ([]string, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindTask}, UpperBound: []byte{kindTask + 1}})
	if err != nil {
		return nil, fmt.Errorf("durable store: scan tasks: %w: %v", store.ErrUnavailable, err)
	}
	defer it.Close()
	now := s.opts.Now()
	var ids []string
	n := 0
	for it.First(); it.Valid(); it.Next() {
		if n++; n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		id, err := tokenOf(it.Key())
		if err != nil {
			return nil, fmt.Errorf("durable store: scan tasks: %w: %v", ErrCorrupt, err)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("durable store: scan tasks: %w: %v", store.ErrUnavailable, err)
		}
		rec, _, err := decodeTask(v)
		if err != nil {
			return nil, fmt.Errorf("durable store: task %s: %w: %v: restore the data directory from a backup", tasks.Prefix(id), ErrCorrupt, err)
		}
		if rec.Status == tasks.Working && now.Before(rec.KeepUntil()) {
			ids = append(ids, id)
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("durable store: scan tasks: %w: %v", store.ErrUnavailable, err)
	}
	return ids, nil
}

// ExclusiveTasks implements store.Tasks: the directory lock admits one
// process (ErrInUse), so a working task of another boot belongs to a
// process that has ended.
func (s *Store) ExclusiveTasks() bool { return true }

// purgeTasks deletes the task records at or past their expiry at now, found
// through the expiry index (a scan of the expired keys only), and returns
// how many it deleted. Sweep runs it, every Options.SweepInterval, off
// the path of any request: GetTask already reads an expired record as
// gone, so the purge only gives the disk space back, and a purge on every
// Nth CreateTask would charge its fsync to a client's call and never run
// on a store that stops creating tasks.
func (s *Store) purgeTasks(now time.Time) (int, error) {
	if err := s.shared("purge tasks"); err != nil {
		return 0, err
	}
	defer s.rw.RUnlock()
	cut := expiryNanos(now)
	purged := 0
	for {
		entries, err := s.expiredIndex(cut)
		if err != nil {
			return purged, err
		}
		if len(entries) == 0 {
			return purged, nil
		}
		n, err := s.purgeChunk(entries, cut)
		purged += n
		if err != nil || len(entries) < purgeChunk {
			return purged, err
		}
	}
}

// indexEntry is one key of the expiry index.
type indexEntry struct {
	expiry int64
	id     string
}

// expiredIndex returns up to purgeChunk index entries of tasks expiring at
// or before cut, in expiry order.
func (s *Store) expiredIndex(cut int64) ([]indexEntry, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindTaskIndex}, UpperBound: taskIndexBound(cut)})
	if err != nil {
		return nil, fmt.Errorf("durable store: purge tasks: %w: %v", store.ErrUnavailable, err)
	}
	defer it.Close()
	var entries []indexEntry
	for it.First(); it.Valid() && len(entries) < purgeChunk; it.Next() {
		exp, id, err := taskIndexEntry(it.Key())
		if err != nil {
			return nil, fmt.Errorf("durable store: purge tasks: %w: %v", ErrCorrupt, err)
		}
		entries = append(entries, indexEntry{exp, id})
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("durable store: purge tasks: %w: %v", store.ErrUnavailable, err)
	}
	return entries, nil
}

// purgeChunk deletes, in one batch, every index entry of entries and the
// record it names when that record is at or past its expiry at cut. It
// holds the locks of the entries' stripes, taken in stripe order, from the
// check to the commit, so no write of those tasks lands in between (a
// CreateTask over the expired ID keeps its new record). It returns the
// number of records deleted.
func (s *Store) purgeChunk(entries []indexEntry, cut int64) (int, error) {
	var held [taskStripes]bool
	for _, e := range entries {
		held[taskStripe(e.id)] = true
	}
	for i := range held {
		if held[i] {
			s.taskLocks[i].Lock()
			defer s.taskLocks[i].Unlock()
		}
	}
	b := s.db.NewBatch()
	deleted := make(map[string]bool)
	for _, e := range entries {
		b.Delete(taskIndexKey(e.expiry, e.id), nil)
		if deleted[e.id] {
			continue
		}
		rec, _, found, err := s.readTask(e.id)
		if err != nil {
			b.Close()
			return 0, err
		}
		if !found {
			continue
		}
		if exp := expiryNanos(rec.KeepUntil()); exp <= cut {
			b.Delete(taskKey(e.id), nil)
			b.Delete(taskIndexKey(exp, e.id), nil)
			deleted[e.id] = true
		}
		// Else the record is a newer one under that ID, or its TTL grew:
		// its own index key is later than cut, and stays.
	}
	if err := s.commit(b, false); err != nil {
		return 0, fmt.Errorf("durable store: purge tasks: %w", err)
	}
	return len(deleted), nil
}
