package redis

// tasks.go keeps the records of tasks (store.Tasks), as the paragraph
// "Where each store keeps tasks" of (DESIGN.md, "Tasks: the executor rule")
// says.
//
// A task is one hash, {t:ID}:task (keys.go), holding its revision and
// its stored form (tasks.Marshal). Every write sets PEXPIREAT to the
// record's KeepUntil(), rounded up to a millisecond, so Redis drops an
// expired task by itself, with no sweep; an absolute time, so every
// replica that writes a task gives it the same expiry whatever its own
// clock says (the store's clock is Redis's). Each write is one Lua script
// on that one key (scripts.go): create refuses a known ID, update and
// delete refuse a missing hash (ErrTaskNotFound) and a revision other
// than the one the writer read (ErrStale), then write revision+1 with the
// data and the expiry, or delete.
//
// Durability is that of the session writes (replicate.go): a task write
// returns once the replicas a failover may promote hold it (WAIT, in the
// same round trip), so what a writer acknowledges survives a failover. A
// write whose reply is lost, or whose WAIT falls short, fails with
// ErrUnavailable although Redis may hold it: the caller reads the record
// again and applies its rule to what it finds. A reader on another
// replica may see a write between the script and its WAIT, as it may see
// a claimed session generation; a failover in that window takes that
// state back.
//
// The working index, tasks:working, is a sorted set of the IDs of
// working tasks scored by their lease's end (Unix ms, 0 for none). It
// has its own slot, and a Cluster script may touch the keys of one slot
// only, so it is not written by the task's script but by one command
// after it, best effort (an error is ignored): ZADD after a write that
// leaves the task working, ZREM after one that leaves it terminal, and
// after a delete. A write that leaves it input_required keeps its
// member: such a task can be working again, and a ZREM delayed past that
// later write's ZADD would take a working task out of the index, while a
// terminal task never changes again. WorkingTasks reads the record of
// every member, gives f the working ones, and removes the members whose
// record is gone or terminal. The index holds every working task unless
// a ZADD was lost (Redis went away right after the script, or a failover
// lost it): then the task is missing from WorkingTasks, and is still
// settled by the next reader that finds its executor gone
// (tasks.Rules.Settle).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tasks"
)

var _ store.Tasks = (*Store)(nil)

// CreateTask implements store.Tasks. It fails with ErrExists while a
// record of rec.ID is in Redis.
func (s *Store) CreateTask(ctx context.Context, rec tasks.Record) error {
	data, err := tasks.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := s.runTask(ctx, s.scripts.createTask, "create", rec.ID, 0,
		data, expiryMillis(rec.KeepUntil())); err != nil {
		return err
	}
	s.indexTask(ctx, rec)
	return nil
}

// GetTask implements store.Tasks.
func (s *Store) GetTask(ctx context.Context, id string) (tasks.Record, uint64, error) {
	v, err := s.rdb.HMGet(ctx, s.taskKey(id), "rev", "data").Result()
	if err != nil {
		s.reroute(ctx)
		return tasks.Record{}, 0, failing(ctx, "get task "+tasks.Prefix(id), err)
	}
	if len(v) != 2 || v[0] == nil {
		return tasks.Record{}, 0, fmt.Errorf("redis store: get task %s: %w", tasks.Prefix(id), store.ErrTaskNotFound)
	}
	rec, err := tasks.Unmarshal([]byte(str(v[1])))
	if err != nil {
		return tasks.Record{}, 0, err
	}
	return rec, u64(str(v[0])), nil
}

// UpdateTask implements store.Tasks.
func (s *Store) UpdateTask(ctx context.Context, rec tasks.Record, rev uint64) (uint64, error) {
	data, err := tasks.Marshal(rec)
	if err != nil {
		return 0, err
	}
	rest, err := s.runTask(ctx, s.scripts.updateTask, "update", rec.ID, rev,
		strconv.FormatUint(rev, 10), data, expiryMillis(rec.KeepUntil()))
	if err != nil {
		return 0, err
	}
	s.indexTask(ctx, rec)
	return u64(str(at(rest, 0))), nil
}

// DeleteTask implements store.Tasks.
func (s *Store) DeleteTask(ctx context.Context, id string, rev uint64) error {
	if _, err := s.runTask(ctx, s.scripts.deleteTask, "delete", id, rev, strconv.FormatUint(rev, 10)); err != nil {
		return err
	}
	s.unindexTasks(ctx, id)
	return nil
}

// WorkingTasks implements store.Tasks. It walks the working index with
// ZSCAN (scanBatch members a round trip, never blocking Redis), reads the
// records of each batch in one pipelined round trip, and calls f, outside
// any Redis call, with those that are working; f may call the store. A
// task is given to f at most once. Members whose record is gone or
// terminal are removed from the index. Errors wrap store.ErrUnavailable,
// except a record that does not decode (tasks.Unmarshal's error) and
// ctx's.
func (s *Store) WorkingTasks(ctx context.Context, f func(tasks.Record, uint64) bool) error {
	const what = "list working tasks"
	key := s.workingKey()
	seen := make(map[string]bool)
	var cursor uint64
	for {
		pairs, next, err := s.rdb.ZScan(ctx, key, cursor, "", scanBatch).Result()
		if err != nil {
			s.reroute(ctx)
			return failing(ctx, what, err)
		}
		var ids []string
		for i := 0; i < len(pairs); i += 2 { // member, score, …
			if id := pairs[i]; !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		hs := make([]*goredis.SliceCmd, len(ids))
		if len(ids) > 0 {
			if _, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for i, id := range ids {
					hs[i] = p.HMGet(ctx, s.taskKey(id), "rev", "data")
				}
				return nil
			}); err != nil {
				s.reroute(ctx)
				return failing(ctx, what, err)
			}
		}
		type found struct {
			rec tasks.Record
			rev uint64
		}
		var working []found
		var stale []string
		for i, id := range ids {
			v := hs[i].Val()
			if len(v) != 2 || v[0] == nil {
				stale = append(stale, id)
				continue
			}
			rec, err := tasks.Unmarshal([]byte(str(v[1])))
			if err != nil {
				return err
			}
			switch {
			case rec.Status == tasks.Working:
				working = append(working, found{rec, u64(str(v[0]))})
			case rec.Status.Terminal():
				stale = append(stale, id)
			}
		}
		s.unindexTasks(ctx, stale...)
		for _, w := range working {
			if !f(w.rec, w.rev) {
				return nil
			}
		}
		if next == 0 {
			return ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		cursor = next
	}
}

// ExclusiveTasks implements store.Tasks: every replica of a fleet opens
// the same Redis, so a working task of another process may belong to a
// live one.
func (s *Store) ExclusiveTasks() bool { return false }

// runTask runs a task script on the task's key on the primary that holds
// it, followed by WAIT for the replicas a write must reach (replicas), in
// one round trip, and decodes its status; rev, the revision the write is
// conditioned on, names it in a stale error. Errors: ErrExists,
// ErrTaskNotFound, ErrStale, ctx's, and ErrUnavailable (Redis unreachable
// or refusing, a lost reply, or fewer replicas than needed within
// Options.ReplicationTimeout, when Redis may hold the write).
func (s *Store) runTask(ctx context.Context, sc *goredis.Script, op, id string, rev uint64, args ...any) ([]any, error) {
	what := op + " task " + tasks.Prefix(id)
	key := s.taskKey(id)
	primary, err := primaryFor(ctx, s.rdb, key)
	if err != nil {
		s.reroute(ctx)
		return nil, failing(ctx, what, err)
	}
	n, err := s.repl.need(ctx, primary)
	if err != nil {
		s.reroute(ctx)
		return nil, failing(ctx, what, err)
	}
	c := &call{keys: []string{key}, args: args}
	werr := s.roundTrip(ctx, primary, n, sc, []*call{c})
	if c.err != nil {
		s.reroute(ctx)
		return nil, failing(ctx, what, c.err)
	}
	rest, err := taskStatus(what, rev, c.reply)
	switch {
	case err != nil:
		return nil, err
	case errors.Is(werr, store.ErrUnavailable):
		return nil, fmt.Errorf("redis store: %s: %w", what, werr)
	case werr != nil:
		return nil, failing(ctx, what, werr)
	}
	return rest, nil
}

// taskStatus turns a task script's reply into an error for its non-"ok"
// statuses, and returns the reply's remaining elements for "ok". rev is
// the revision the write was conditioned on.
func taskStatus(what string, rev uint64, reply []any) ([]any, error) {
	switch str(at(reply, 0)) {
	case "ok":
		return reply[1:], nil
	case "notfound":
		return nil, fmt.Errorf("redis store: %s: %w", what, store.ErrTaskNotFound)
	case "stale":
		return nil, fmt.Errorf("redis store: %s: at revision %s, written at %d: %w", what, str(at(reply, 1)), rev, store.ErrStale)
	case "exists":
		return nil, fmt.Errorf("redis store: %s: %w", what, store.ErrExists)
	}
	return nil, fmt.Errorf("redis store: %s: %w: unexpected script reply %v", what, store.ErrUnavailable, reply)
}

// indexTask updates the working index after a write of rec succeeded:
// ZADD when rec is working, ZREM when it is terminal, nothing when it
// waits for input (see the file comment). Best effort: it runs even when
// ctx ended after the write, and its error is ignored.
func (s *Store) indexTask(ctx context.Context, rec tasks.Record) {
	switch {
	case rec.Status == tasks.Working:
		var lease int64
		if !rec.Executor.LeaseUntil.IsZero() {
			lease = rec.Executor.LeaseUntil.UnixMilli()
		}
		s.rdb.ZAdd(context.WithoutCancel(ctx), s.workingKey(), goredis.Z{Score: float64(lease), Member: rec.ID})
	case rec.Status.Terminal():
		s.unindexTasks(ctx, rec.ID)
	}
}

// unindexTasks removes ids from the working index, best effort as
// indexTask.
func (s *Store) unindexTasks(ctx context.Context, ids ...string) {
	if len(ids) == 0 {
		return
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	s.rdb.ZRem(context.WithoutCancel(ctx), s.workingKey(), members...)
}

// expiryMillis returns t as Unix milliseconds, rounded up, so that a
// record is kept at least until t (store.Tasks, "Expiry").
func expiryMillis(t time.Time) int64 {
	ms := t.UnixMilli() // rounded down
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}
