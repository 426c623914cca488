package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// purgeEvery is how many task creations pass between two sweeps of
// expired task records: a sweep walks every record, so it runs rarely
// enough to cost nothing per call and often enough that expired records
// never outnumber live ones by much.
const purgeEvery = 1024

// taskTable holds the task records of a Store (store.Tasks). Records are
// kept as the stored form (tasks.Marshal), so a caller never shares memory
// with the store, as with any other backend.
type taskTable struct {
	mu      sync.Mutex
	records map[string]taskEntry
	creates int // since the last purge
}

type taskEntry struct {
	data []byte
	rec  tasks.Record // decoded data; never handed out
	rev  uint64
}

var _ store.Tasks = (*Store)(nil)

// CreateTask implements store.Tasks.
func (s *Store) CreateTask(ctx context.Context, rec tasks.Record) error {
	data, err := tasks.Marshal(rec)
	if err != nil {
		return err
	}
	t := &s.tasks
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := s.openErr(); err != nil {
		return err
	}
	now := s.now()
	if t.records == nil {
		t.records = make(map[string]taskEntry)
	}
	if e, ok := t.records[rec.ID]; ok && now.Before(e.rec.KeepUntil()) {
		return fmt.Errorf("memory store: task %s: %w", tasks.Prefix(rec.ID), store.ErrExists)
	}
	if t.creates++; t.creates >= purgeEvery {
		t.creates = 0
		for id, e := range t.records {
			if !now.Before(e.rec.KeepUntil()) {
				delete(t.records, id)
			}
		}
	}
	t.records[rec.ID] = taskEntry{data: data, rec: rec, rev: 1}
	return nil
}

// GetTask implements store.Tasks.
func (s *Store) GetTask(ctx context.Context, id string) (tasks.Record, uint64, error) {
	t := &s.tasks
	t.mu.Lock()
	e, err := s.liveTaskLocked(id)
	t.mu.Unlock()
	if err != nil {
		return tasks.Record{}, 0, err
	}
	rec, err := tasks.Unmarshal(e.data)
	return rec, e.rev, err
}

// UpdateTask implements store.Tasks.
func (s *Store) UpdateTask(ctx context.Context, rec tasks.Record, rev uint64) (uint64, error) {
	data, err := tasks.Marshal(rec)
	if err != nil {
		return 0, err
	}
	t := &s.tasks
	t.mu.Lock()
	defer t.mu.Unlock()
	e, err := s.liveTaskLocked(rec.ID)
	if err != nil {
		return 0, err
	}
	if e.rev != rev {
		return 0, fmt.Errorf("memory store: task %s at revision %d, written at %d: %w", tasks.Prefix(rec.ID), e.rev, rev, store.ErrStale)
	}
	t.records[rec.ID] = taskEntry{data: data, rec: rec, rev: rev + 1}
	return rev + 1, nil
}

// DeleteTask implements store.Tasks.
func (s *Store) DeleteTask(ctx context.Context, id string, rev uint64) error {
	t := &s.tasks
	t.mu.Lock()
	defer t.mu.Unlock()
	e, err := s.liveTaskLocked(id)
	if err != nil {
		return err
	}
	if e.rev != rev {
		return fmt.Errorf("memory store: task %s at revision %d, deleted at %d: %w", tasks.Prefix(id), e.rev, rev, store.ErrStale)
	}
	delete(t.records, id)
	return nil
}

// WorkingTasks implements store.Tasks. It calls f on a copy of the working
// records taken under the lock, so f may call the store.
func (s *Store) WorkingTasks(ctx context.Context, f func(tasks.Record, uint64) bool) error {
	t := &s.tasks
	t.mu.Lock()
	if err := s.openErr(); err != nil {
		t.mu.Unlock()
		return err
	}
	now := s.now()
	var working []taskEntry
	for _, e := range t.records {
		if e.rec.Status == tasks.Working && now.Before(e.rec.KeepUntil()) {
			working = append(working, e)
		}
	}
	t.mu.Unlock()
	for _, e := range working {
		rec, err := tasks.Unmarshal(e.data)
		if err != nil {
			return err
		}
		if !f(rec, e.rev) {
			return nil
		}
	}
	return ctx.Err()
}

// ExclusiveTasks implements store.Tasks: a memory store belongs to one
// process.
func (s *Store) ExclusiveTasks() bool { return true }

// liveTaskLocked returns the entry of id, or the error GetTask reports; an
// expired entry is removed. t.mu is held.
func (s *Store) liveTaskLocked(id string) (taskEntry, error) {
	if err := s.openErr(); err != nil {
		return taskEntry{}, err
	}
	e, ok := s.tasks.records[id]
	if ok && !s.now().Before(e.rec.KeepUntil()) {
		delete(s.tasks.records, id)
		ok = false
	}
	if !ok {
		return taskEntry{}, fmt.Errorf("memory store: task %s: %w", tasks.Prefix(id), store.ErrTaskNotFound)
	}
	return e, nil
}

// openErr returns the error of a call on a closed store.
func (s *Store) openErr() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("memory store: %w: closed", store.ErrUnavailable)
	}
	return nil
}
