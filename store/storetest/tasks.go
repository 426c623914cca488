package storetest

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// RunTasks runs the contract tests of store.Tasks. newStore returns a
// fresh, empty store for one subtest; RunTasks closes it at the end of the
// subtest. The tests use the wall clock: expiry is the store's own (Redis
// expires keys itself).
func RunTasks(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		f    func(t *testing.T, s store.Tasks)
	}{
		{"CreateGet", testTaskCreateGet},
		{"Revisions", testTaskRevisions},
		{"Delete", testTaskDelete},
		{"OneSettleWins", testTaskOneSettleWins},
		{"Working", testTaskWorking},
		{"Expiry", testTaskExpiry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			defer s.Close()
			ts, ok := s.(store.Tasks)
			if !ok {
				t.Fatalf("%T does not keep tasks (store.Tasks)", s)
			}
			tt.f(t, ts)
		})
	}
}

// newTask returns a working task of replica a, boot a1, created now with
// a lease of 10 s, an hour to live.
func newTask(t *testing.T, id string) tasks.Record {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec, err := tasks.New(tasks.Spec{
		ID: id, Owner: "alice", Tool: "countdown", Call: []byte(`{"name":"countdown","arguments":{"n":3}}`),
		Executor: tasks.Executor{Replica: "a", Boot: "a1", LeaseUntil: now.Add(10 * time.Second)},
		Now:      now, TTL: time.Hour, PollInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func createTask(t *testing.T, s store.Tasks, rec tasks.Record) {
	t.Helper()
	if err := s.CreateTask(context.Background(), rec); err != nil {
		t.Fatalf("CreateTask(%s): %v", rec.ID, err)
	}
}

func getTask(t *testing.T, s store.Tasks, id string) (tasks.Record, uint64) {
	t.Helper()
	rec, rev, err := s.GetTask(context.Background(), id)
	if err != nil {
		t.Fatalf("GetTask(%s): %v", id, err)
	}
	return rec, rev
}

func testTaskCreateGet(t *testing.T, s store.Tasks) {
	ctx := context.Background()
	rec := newTask(t, "task-create-get")
	createTask(t, s, rec)
	got, rev := getTask(t, s, rec.ID)
	if rev != 1 {
		t.Errorf("revision after CreateTask = %d, want 1", rev)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("GetTask:\n got %+v\nwant %+v", got, rec)
	}
	if err := s.CreateTask(ctx, rec); !errors.Is(err, store.ErrExists) {
		t.Errorf("CreateTask of a known ID = %v, want ErrExists", err)
	}
	if _, _, err := s.GetTask(ctx, "task-never-created"); !errors.Is(err, store.ErrTaskNotFound) {
		t.Errorf("GetTask of an unknown ID = %v, want ErrTaskNotFound", err)
	}
	if _, err := s.UpdateTask(ctx, newTask(t, "task-never-created"), 1); !errors.Is(err, store.ErrTaskNotFound) {
		t.Errorf("UpdateTask of an unknown ID = %v, want ErrTaskNotFound", err)
	}
}

func testTaskRevisions(t *testing.T, s store.Tasks) {
	ctx := context.Background()
	rec := newTask(t, "task-revisions")
	createTask(t, s, rec)
	done, _, err := tasks.Rules{}.Apply(rec, tasks.Event{Kind: tasks.Complete, Generation: 1, Result: []byte(`{"content":[{"type":"text","text":"done"}]}`)}, rec.Created.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.UpdateTask(ctx, done, 1)
	if err != nil || rev != 2 {
		t.Fatalf("UpdateTask at revision 1 = %d, %v; want 2, nil", rev, err)
	}
	// A writer that read revision 1 stores nothing.
	stale := rec
	stale.Message = "stale"
	if _, err := s.UpdateTask(ctx, stale, 1); !errors.Is(err, store.ErrStale) {
		t.Errorf("UpdateTask at a stale revision = %v, want ErrStale", err)
	}
	got, rev := getTask(t, s, rec.ID)
	if rev != 2 || !reflect.DeepEqual(got, done) {
		t.Errorf("after a stale write: revision %d, record %+v; want 2, %+v", rev, got, done)
	}
}

func testTaskDelete(t *testing.T, s store.Tasks) {
	ctx := context.Background()
	rec := newTask(t, "task-delete")
	createTask(t, s, rec)
	if _, err := s.UpdateTask(ctx, rec, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTask(ctx, rec.ID, 1); !errors.Is(err, store.ErrStale) {
		t.Errorf("DeleteTask at a stale revision = %v, want ErrStale", err)
	}
	if err := s.DeleteTask(ctx, rec.ID, 2); err != nil {
		t.Fatalf("DeleteTask at revision 2: %v", err)
	}
	if _, _, err := s.GetTask(ctx, rec.ID); !errors.Is(err, store.ErrTaskNotFound) {
		t.Errorf("GetTask after DeleteTask = %v, want ErrTaskNotFound", err)
	}
	if err := s.DeleteTask(ctx, rec.ID, 2); !errors.Is(err, store.ErrTaskNotFound) {
		t.Errorf("DeleteTask of a deleted task = %v, want ErrTaskNotFound", err)
	}
}

// testTaskOneSettleWins has 16 readers find a task whose executor's lease
// lapsed and settle it at once: exactly one write is stored, and the task
// reads failed, cause ExecutorLost, at generation 2.
func testTaskOneSettleWins(t *testing.T, s store.Tasks) {
	ctx := context.Background()
	rec := newTask(t, "task-one-settle")
	rec.Executor.LeaseUntil = rec.Created.Add(-time.Millisecond)
	createTask(t, s, rec)
	const readers = 16
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  int
		errs []error
	)
	for i := range readers {
		wg.Go(func() {
			got, rev, err := s.GetTask(ctx, rec.ID)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			rd := tasks.Reader{Replica: "b", Boot: "b" + string(rune('a'+i))}
			settled, v := tasks.Rules{}.Settle(got, rec.Created.Add(time.Second), rd)
			if v != tasks.SettleLost {
				return // read after the winner's write: nothing to settle
			}
			_, err = s.UpdateTask(ctx, settled, rev)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrStale):
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("errors other than ErrStale: %v", errs)
	}
	if won != 1 {
		t.Errorf("%d settles stored, want exactly 1", won)
	}
	got, rev := getTask(t, s, rec.ID)
	if got.Status != tasks.Failed || got.Cause != tasks.ExecutorLost || got.Executor.Generation != 2 || rev != 2 {
		t.Errorf("after the settles: %s cause %s generation %d revision %d; want failed ExecutorLost 2 2",
			got.Status, got.Cause, got.Executor.Generation, rev)
	}
}

func testTaskWorking(t *testing.T, s store.Tasks) {
	ctx := context.Background()
	for _, id := range []string{"task-w1", "task-w2", "task-w3"} {
		createTask(t, s, newTask(t, id))
	}
	done := newTask(t, "task-done")
	createTask(t, s, done)
	done, _, _ = tasks.Rules{}.Apply(done, tasks.Event{Kind: tasks.Fail, Generation: 1, Error: []byte(`{"code":-32603,"message":"boom"}`)}, done.Created)
	if _, err := s.UpdateTask(ctx, done, 1); err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := s.WorkingTasks(ctx, func(rec tasks.Record, rev uint64) bool {
		if rev != 1 {
			t.Errorf("WorkingTasks gave %s at revision %d, want 1", rec.ID, rev)
		}
		ids = append(ids, rec.ID)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	if want := []string{"task-w1", "task-w2", "task-w3"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("WorkingTasks = %v, want %v", ids, want)
	}
	n := 0
	if err := s.WorkingTasks(ctx, func(tasks.Record, uint64) bool { n++; return false }); err != nil || n != 1 {
		t.Errorf("WorkingTasks whose f returns false: %d calls, %v; want 1, nil", n, err)
	}
}

// testTaskExpiry checks that a record is gone once its KeepUntil passes
// (its expiry plus tasks.Linger), and that a grown TTL keeps it longer.
func testTaskExpiry(t *testing.T, s store.Tasks) {
	ctx := context.Background()
	const life = 600 * time.Millisecond
	short := newTask(t, "task-expiry-short")
	short.TTL = time.Since(short.Created) + life - tasks.Linger
	long := newTask(t, "task-expiry-long")
	long.TTL = short.TTL
	createTask(t, s, short)
	createTask(t, s, long)
	long.TTL += time.Hour
	if _, err := s.UpdateTask(ctx, long, 1); err != nil {
		t.Fatal(err)
	}
	getTask(t, s, short.ID)
	time.Sleep(time.Until(short.KeepUntil()))
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, _, err := s.GetTask(ctx, short.ID)
		if errors.Is(err, store.ErrTaskNotFound) {
			break
		}
		if err != nil {
			t.Fatalf("GetTask of an expiring task: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still readable 5 s after its KeepUntil %v", short.KeepUntil())
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, _ := getTask(t, s, long.ID)
	if got.TTL != long.TTL {
		t.Errorf("grown TTL reads %v, want %v", got.TTL, long.TTL)
	}
}
