package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/store/storetest"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// workingKey is the working index's key under the default prefix.
const workingKey = redis.DefaultPrefix + "tasks:working"

// taskKey is the key of task id's hash under the default prefix.
func taskKey(id string) string { return redis.DefaultPrefix + "{t:" + id + "}:task" }

// runTasksContract runs the contract of store.Tasks on the Redis at url,
// each subtest with its own key prefix.
func runTasksContract(t *testing.T, url string) {
	var n atomic.Int64
	storetest.RunTasks(t, func(t *testing.T) store.Store {
		s, err := redis.New(context.Background(), redis.Options{URL: url, Prefix: fmt.Sprintf("tasks%d:", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestTasksContract runs the contract of store.Tasks on one redis-server.
func TestTasksContract(t *testing.T) {
	runTasksContract(t, redistest.Start(t, redistest.Options{}).URL())
}

// TestTasksSentinel runs the contract of store.Tasks through Redis
// Sentinel, on a primary with one replica: every write waits for it.
func TestTasksSentinel(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary.Addr()})
	replica.WaitInSync()
	ss := redistest.StartSentinels(t, primary)
	ss.WaitReady(1)
	runTasksContract(t, ss.URL())
}

// taskRecord returns a working task of replica a created at created, with
// a lease until created+10s and an hour to live.
func taskRecord(t *testing.T, id string, created time.Time) tasks.Record {
	t.Helper()
	rec, err := tasks.New(tasks.Spec{
		ID: id, Owner: "alice", Tool: "countdown", Call: []byte(`{"name":"countdown","arguments":{"n":3}}`),
		Executor: tasks.Executor{Replica: "a", Boot: "a1", LeaseUntil: created.Add(10 * time.Second)},
		Now:      created, TTL: time.Hour, PollInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestTaskExpiry: a task's hash expires at the record's KeepUntil(),
// rounded up to a millisecond (PEXPIRETIME), set again by every write, so
// a grown TTL moves it; once it passes, Redis removes the hash by itself,
// with no read of it (the key count drops), and the next WorkingTasks
// removes its member from the working index.
func TestTaskExpiry(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{})
	c := client(t, srv)

	created := time.Now().UTC().Truncate(time.Millisecond).Add(400 * time.Microsecond)
	rec := taskRecord(t, "task-ttl", created)
	if err := s.CreateTask(ctx, rec); err != nil {
		t.Fatal(err)
	}
	want := created.Add(time.Hour + tasks.Linger).Truncate(time.Millisecond).Add(time.Millisecond).UnixMilli()
	if got, err := c.Do(ctx, "PEXPIRETIME", taskKey(rec.ID)).Int64(); err != nil || got != want {
		t.Fatalf("PEXPIRETIME after CreateTask = %d, %v; want %d (KeepUntil() %v rounded up)", got, err, want, rec.KeepUntil())
	}
	// Redis reads its clock in whole milliseconds: 1 ms of slack.
	upper := time.Until(time.UnixMilli(want)) + time.Millisecond
	if ttl, err := c.PTTL(ctx, taskKey(rec.ID)).Result(); err != nil || ttl <= 0 || ttl > upper {
		t.Fatalf("PTTL after CreateTask = %v, %v; want in (0, %v]", ttl, err, upper)
	}
	rec.TTL += time.Hour
	if _, err := s.UpdateTask(ctx, rec, 1); err != nil {
		t.Fatal(err)
	}
	want += time.Hour.Milliseconds()
	if got, err := c.Do(ctx, "PEXPIRETIME", taskKey(rec.ID)).Int64(); err != nil || got != want {
		t.Fatalf("PEXPIRETIME after a grown TTL = %d, %v; want %d", got, err, want)
	}
	if err := s.DeleteTask(ctx, rec.ID, 2); err != nil {
		t.Fatal(err)
	}

	short := taskRecord(t, "task-short", time.Now().UTC())
	short.TTL = 300*time.Millisecond - tasks.Linger
	if err := s.CreateTask(ctx, short); err != nil {
		t.Fatal(err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 2 {
		t.Fatalf("keys after CreateTask = %d, %v; want 2 (the task, the working index)", n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys 5 s after the task's KeepUntil %v, want 1 (Redis removes the task itself)", n, short.KeepUntil())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, err := s.GetTask(ctx, short.ID); !errors.Is(err, store.ErrTaskNotFound) {
		t.Fatalf("GetTask of an expired task = %v, want ErrTaskNotFound", err)
	}
	if err := s.WorkingTasks(ctx, func(rec tasks.Record, _ uint64) bool {
		t.Errorf("WorkingTasks gave the expired task %s", rec.ID)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("keys after WorkingTasks = %d, %v; want 0 (its member removed, the index gone)", n, err)
	}
}

// TestWorkingIndex: the working index holds the working tasks scored by
// their lease's end, keeps the member of a task waiting for input, and
// loses that of a terminal or deleted task. WorkingTasks skips and
// removes members whose record is gone or terminal (left by a lost ZREM,
// or a ZADD delayed past a later write), and keeps the member of an
// input_required task, which can be working again.
func TestWorkingIndex(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{})
	c := client(t, srv)
	// The records are created now: their TTL runs from the real clock,
	// which Redis expires them by.
	created := time.Now().UTC().Truncate(time.Millisecond)
	recs := map[string]tasks.Record{}
	for _, id := range []string{"w1", "w2", "input", "done", "deleted"} {
		rec := taskRecord(t, id, created)
		if err := s.CreateTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
		recs[id] = rec
	}
	// w2 has no lease.
	w2 := recs["w2"]
	w2.Executor.LeaseUntil = time.Time{}
	if _, err := s.UpdateTask(ctx, w2, 1); err != nil {
		t.Fatal(err)
	}
	input := recs["input"]
	input.Status = tasks.InputRequired
	if _, err := s.UpdateTask(ctx, input, 1); err != nil {
		t.Fatal(err)
	}
	done := recs["done"]
	done.Status, done.Result = tasks.Completed, []byte(`{"content":[]}`)
	if _, err := s.UpdateTask(ctx, done, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTask(ctx, "deleted", 1); err != nil {
		t.Fatal(err)
	}
	lease := float64(created.Add(10 * time.Second).UnixMilli())
	index := func() []goredis.Z {
		t.Helper()
		zs, err := c.ZRangeWithScores(ctx, workingKey, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		sort.Slice(zs, func(i, j int) bool { return zs[i].Member.(string) < zs[j].Member.(string) })
		return zs
	}
	want := []goredis.Z{{Score: lease, Member: "input"}, {Score: lease, Member: "w1"}, {Score: 0, Member: "w2"}}
	if got := index(); !slices.Equal(got, want) {
		t.Fatalf("working index = %v, want %v", got, want)
	}

	// Members a lost ZREM or a late ZADD leave behind.
	if err := c.ZAdd(ctx, workingKey, goredis.Z{Score: 1, Member: "done"}, goredis.Z{Score: 1, Member: "ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := s.WorkingTasks(ctx, func(rec tasks.Record, rev uint64) bool {
		ids = append(ids, fmt.Sprintf("%s@%d", rec.ID, rev))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	if wantIDs := []string{"w1@1", "w2@2"}; !slices.Equal(ids, wantIDs) {
		t.Errorf("WorkingTasks = %v, want %v", ids, wantIDs)
	}
	if got := index(); !slices.Equal(got, want) {
		t.Fatalf("working index after WorkingTasks = %v, want %v", got, want)
	}
}

// TestTasksReplicated: a task write returns once the replica holds it
// (WAIT), so it reads on the replica at once. With the replica stopped
// (SIGSTOP) a write fails with ErrUnavailable after ReplicationTimeout
// although the primary stored it: the writer reads again and finds it.
func TestTasksReplicated(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary.Addr()})
	replica.WaitInSync()
	primary.WaitReplicaListed(replica)
	// A bound long enough for a loaded machine's replica to acknowledge
	// (200 ms failed the first write at load 15), short for a stopped one.
	s := open(t, primary, redis.Options{ReplicationTimeout: 2 * time.Second})
	rc := client(t, replica)

	rec := taskRecord(t, "task-replicated", time.Now().UTC())
	if err := s.CreateTask(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if rev, err := rc.HGet(ctx, taskKey(rec.ID), "rev").Result(); err != nil || rev != "1" {
		t.Fatalf("revision on the replica right after CreateTask = %q, %v; want 1", rev, err)
	}
	replica.Pause()
	rec.Message = "half way"
	_, err := s.UpdateTask(ctx, rec, 1)
	replica.Resume()
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("UpdateTask with the replica stopped = %v, want ErrUnavailable", err)
	}
	got, rev, err := s.GetTask(ctx, rec.ID)
	if err != nil || rev != 2 || got.Message != "half way" {
		t.Fatalf("GetTask after the unacknowledged write = %q at revision %d, %v; want %q at 2", got.Message, rev, err, "half way")
	}
}

// TestTasksUnavailable: with Redis gone every task call fails with an
// error wrapping ErrUnavailable, and so does every call after Close.
func TestTasksUnavailable(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	rec := taskRecord(t, "task-unavailable", time.Now().UTC())
	calls := func(s *redis.Store) map[string]error {
		_, _, get := s.GetTask(ctx, rec.ID)
		_, update := s.UpdateTask(ctx, rec, 1)
		return map[string]error{
			"CreateTask":   s.CreateTask(ctx, rec),
			"GetTask":      get,
			"UpdateTask":   update,
			"DeleteTask":   s.DeleteTask(ctx, rec.ID, 1),
			"WorkingTasks": s.WorkingTasks(ctx, func(tasks.Record, uint64) bool { return true }),
		}
	}
	closed := open(t, srv, redis.Options{})
	closed.Close()
	for name, err := range calls(closed) {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s after Close = %v, want ErrUnavailable", name, err)
		}
	}
	s := open(t, srv, redis.Options{Timeout: time.Second})
	srv.Kill()
	for name, err := range calls(s) {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s with Redis killed = %v, want ErrUnavailable", name, err)
		}
	}
}

// clusterTasks runs the contract of store.Tasks on the Cluster c, then
// checks that each task's keys share one slot: after a create and an
// update of tasks spread over the primaries, the keys that name a task
// are its hash alone, on the primary of the slot of its hash tag.
func clusterTasks(t *testing.T, c *redistest.Cluster) {
	runTasksContract(t, c.URL())
	ctx := context.Background()
	s := openURL(t, c.URL(), redis.Options{})
	nodes := map[string]bool{}
	for i := range 12 {
		id := fmt.Sprintf("slot-task-%02d", i)
		rec := taskRecord(t, id, time.Now().UTC())
		if err := s.CreateTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
		rec.Status = tasks.InputRequired
		if _, err := s.UpdateTask(ctx, rec, 1); err != nil {
			t.Fatal(err)
		}
		var found []string
		for _, p := range c.Primaries {
			pc := client(t, p)
			keys, err := pc.Keys(ctx, "*"+id+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				found = append(found, p.Addr()+" "+k)
			}
		}
		home := c.PrimaryFor("{t:" + id + "}")
		nodes[home.Addr()] = true
		if want := []string{home.Addr() + " " + taskKey(id)}; !slices.Equal(found, want) {
			t.Fatalf("keys naming task %s: %q, want %q", id, found, want)
		}
		hc := client(t, home)
		tag, err := hc.ClusterKeySlot(ctx, "t:"+id).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot, err := hc.ClusterKeySlot(ctx, taskKey(id)).Result(); err != nil || slot != tag {
			t.Fatalf("CLUSTER KEYSLOT %s = %d, %v; want %d, the slot of t:%s", taskKey(id), slot, err, tag, id)
		}
	}
	if len(nodes) != len(c.Primaries) {
		t.Errorf("12 tasks on %d primaries, want all %d", len(nodes), len(c.Primaries))
	}
}
