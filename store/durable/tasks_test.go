package durable_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/store/storetest"
	"github.com/tidemark-mcp/tidemark/tasks"
)

func TestTaskContract(t *testing.T) {
	storetest.RunTasks(t, func(t *testing.T) store.Store { return open(t, t.TempDir(), durable.Options{Logger: quiet()}) })
}

// task returns a working task of replica a, boot a1, created at now with
// ttl to live.
func task(t *testing.T, id string, now time.Time, ttl time.Duration) tasks.Record {
	t.Helper()
	rec, err := newTask(id, now, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func newTask(id string, now time.Time, ttl time.Duration) (tasks.Record, error) {
	return tasks.New(tasks.Spec{
		ID: id, Owner: "alice", Tool: "countdown", Call: []byte(`{"name":"countdown","arguments":{"n":3}}`),
		Executor: tasks.Executor{Replica: "a", Boot: "a1"},
		Now:      now, TTL: ttl, PollInterval: time.Second,
	})
}

// complete returns rec completed at now with a text result.
func complete(rec tasks.Record, now time.Time) (tasks.Record, error) {
	done, _, err := tasks.Rules{}.Apply(rec, tasks.Event{Kind: tasks.Complete, Generation: rec.Executor.Generation,
		Result: []byte(`{"content":[{"type":"text","text":"done"}]}`)}, now)
	return done, err
}

// TestTaskReopen: a working task and a completed one read back after
// Close and Open byte for byte, at the same revisions, and the working one
// alone is what WorkingTasks finds.
func TestTaskReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	now := time.Now().UTC().Truncate(time.Millisecond)
	working := task(t, "task-working", now, time.Hour)
	working.Input = tasks.Input{Round: 1, State: []byte{0, 1, 2, 0xff}, Slots: map[string]tasks.Slot{
		"1-0": {Key: "q", Request: []byte(`{"method":"elicitation/create","params":{"message":"n?"}}`), Response: []byte(`{"action":"accept","content":{"n":3}}`)},
	}}
	done := task(t, "task-done", now, time.Hour)
	if err := s.CreateTask(ctx, working); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTask(ctx, done); err != nil {
		t.Fatal(err)
	}
	done, err := complete(done, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if rev, err := s.UpdateTask(ctx, done, 1); err != nil || rev != 2 {
		t.Fatalf("UpdateTask = %d, %v; want 2", rev, err)
	}
	before := map[string][]byte{}
	for _, id := range []string{working.ID, done.ID} {
		v, err := s.TaskValue(id)
		if err != nil || v == nil {
			t.Fatalf("TaskValue(%s) = %q, %v", id, v, err)
		}
		before[id] = v
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetTask(ctx, working.ID); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("GetTask after Close = %v, want ErrUnavailable", err)
	}

	s = open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	for _, c := range []struct {
		want tasks.Record
		rev  uint64
	}{{working, 1}, {done, 2}} {
		v, err := s.TaskValue(c.want.ID)
		if err != nil || !bytes.Equal(v, before[c.want.ID]) {
			t.Errorf("%s stored after reopen:\n got %q, %v\nwant %q", c.want.ID, v, err, before[c.want.ID])
		}
		got, rev, err := s.GetTask(ctx, c.want.ID)
		if err != nil || rev != c.rev || !reflect.DeepEqual(got, c.want) {
			t.Errorf("GetTask(%s) after reopen = %+v, %d, %v; want %+v, %d", c.want.ID, got, rev, err, c.want, c.rev)
		}
		wantForm, _ := tasks.Marshal(c.want)
		if gotForm, _ := tasks.Marshal(got); !bytes.Equal(gotForm, wantForm) {
			t.Errorf("%s renders after reopen as\n%s\nwant\n%s", c.want.ID, gotForm, wantForm)
		}
	}
	var ids []string
	if err := s.WorkingTasks(ctx, func(rec tasks.Record, rev uint64) bool {
		ids = append(ids, fmt.Sprintf("%s@%d", rec.ID, rev))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"task-working@1"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("WorkingTasks after reopen = %v, want %v", ids, want)
	}
}

// TestTaskPurge: Sweep deletes, through the expiry index, the records at or
// past their KeepUntil (expiry plus tasks.Linger) and their index keys, and nothing else: a record whose
// TTL grew keeps its one index key (the old one went with the write), and
// an expired ID created again holds the new record at revision 1.
func TestTaskPurge(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clk := testenv.NewClock(t0)
	s := open(t, t.TempDir(), durable.Options{Logger: quiet(), Now: clk.Now})
	defer s.Close()
	keys := func(wantRecords, wantIndex int) {
		t.Helper()
		r, x, err := s.TaskKeys()
		if err != nil || r != wantRecords || x != wantIndex {
			t.Fatalf("task keys: %d records, %d index keys, %v; want %d, %d", r, x, err, wantRecords, wantIndex)
		}
	}
	for i := range 300 { // more than one chunk of the purge
		if err := s.CreateTask(ctx, task(t, fmt.Sprintf("short-%03d", i), t0, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	grown := task(t, "grown", t0, time.Minute)
	reborn := task(t, "reborn", t0, time.Minute)
	long := task(t, "long", t0, time.Hour)
	for _, rec := range []tasks.Record{grown, reborn, long} {
		if err := s.CreateTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	grown.TTL = time.Hour
	if _, err := s.UpdateTask(ctx, grown, 1); err != nil {
		t.Fatal(err)
	}
	keys(303, 303)

	clk.Advance(time.Minute) // the minute-long tasks are at their expiry
	if _, _, err := s.GetTask(ctx, "short-000"); err != nil {
		t.Fatalf("GetTask at the expiry = %v, want the record: readers settle it until its KeepUntil", err)
	}
	clk.Advance(tasks.Linger) // and now at their KeepUntil
	if _, _, err := s.GetTask(ctx, "short-000"); !errors.Is(err, store.ErrTaskNotFound) {
		t.Fatalf("GetTask at KeepUntil = %v, want ErrTaskNotFound", err)
	}
	if _, err := s.UpdateTask(ctx, task(t, "short-001", t0, time.Hour), 1); !errors.Is(err, store.ErrTaskNotFound) {
		t.Fatalf("UpdateTask of an expired task = %v, want ErrTaskNotFound", err)
	}
	if err := s.DeleteTask(ctx, "short-002", 1); !errors.Is(err, store.ErrTaskNotFound) {
		t.Fatalf("DeleteTask of an expired task = %v, want ErrTaskNotFound", err)
	}
	reborn = task(t, "reborn", clk.Now(), time.Minute)
	if err := s.CreateTask(ctx, reborn); err != nil {
		t.Fatalf("CreateTask over an expired record: %v", err)
	}
	keys(303, 303) // nothing purged yet; reborn's old index key replaced

	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	keys(3, 3)
	for id, wantRev := range map[string]uint64{"grown": 2, "reborn": 1, "long": 1} {
		if _, rev, err := s.GetTask(ctx, id); err != nil || rev != wantRev {
			t.Errorf("GetTask(%s) after the purge = revision %d, %v; want %d", id, rev, err, wantRev)
		}
	}

	clk.Advance(time.Hour)
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	keys(0, 0)
}

// TestTaskIDBounds: an ID of 1 to 255 bytes is kept; one longer is refused
// by CreateTask, and unknown to the other calls.
func TestTaskIDBounds(t *testing.T) {
	s := open(t, t.TempDir(), durable.Options{Logger: quiet()})
	defer s.Close()
	now := time.Now().UTC()
	longest := task(t, string(bytes.Repeat([]byte("i"), 255)), now, time.Hour)
	if err := s.CreateTask(ctx, longest); err != nil {
		t.Fatalf("CreateTask of a 255-byte ID: %v", err)
	}
	if _, rev, err := s.GetTask(ctx, longest.ID); err != nil || rev != 1 {
		t.Fatalf("GetTask of a 255-byte ID = %d, %v", rev, err)
	}
	over := task(t, longest.ID+"i", now, time.Hour)
	if err := s.CreateTask(ctx, over); err == nil || err.Error() != "durable store: create task: task ID of 256 bytes, want 1 to 255" {
		t.Fatalf("CreateTask of a 256-byte ID = %v", err)
	}
	if _, _, err := s.GetTask(ctx, over.ID); !errors.Is(err, store.ErrTaskNotFound) {
		t.Fatalf("GetTask of a 256-byte ID = %v, want ErrTaskNotFound", err)
	}
}

// taskChildEnv names the data directory in which the test binary, started
// again as a child process, creates tasks until it is killed
// (runTaskChild).
const taskChildEnv = "TIDEMARK_DURABLE_TASK_CHILD"

// runTaskChild creates working tasks in the store at dir, one after the
// other, completing every other one, and prints a line after each call
// returns: "created ID" and "completed ID". It stops after a minute, if
// nobody killed it.
func runTaskChild(dir string) int {
	s, err := durable.Open(dir, durable.Options{SweepInterval: -1, MinFreeBytes: -1, Logger: quiet()})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer s.Close()
	for i, end := 0, time.Now().Add(time.Minute); time.Now().Before(end); i++ {
		now := time.Now().UTC()
		rec, err := newTask(fmt.Sprintf("kill-%06d", i), now, time.Hour)
		if err == nil {
			err = s.CreateTask(ctx, rec)
		}
		if err != nil {
			fmt.Println("create:", err)
			return 1
		}
		fmt.Printf("created %s\n", rec.ID)
		if i%2 == 1 {
			done, err := complete(rec, now)
			if err == nil {
				_, err = s.UpdateTask(ctx, done, 1)
			}
			if err != nil {
				fmt.Println("update:", err)
				return 1
			}
			fmt.Printf("completed %s\n", rec.ID)
		}
	}
	return 0
}

// TestTaskSurvivesKill: a child process creates tasks (and completes every
// other one) in a loop and gets SIGKILL once 40 creations have returned;
// after reopening the directory, every task whose CreateTask had returned
// reads back, working at revision 1, and every one whose UpdateTask had
// returned reads back completed at revision 2.
func TestTaskSurvivesKill(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), taskChildEnv+"="+dir)
	p := testenv.StartCmd(t, cmd)
	p.WaitFor(t, `created kill-000039\n`, 60*time.Second)
	p.Kill()
	<-p.Done()

	out := p.Output()
	created := regexp.MustCompile(`(?m)^created (kill-\d{6})$`).FindAllStringSubmatch(out, -1)
	completed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^completed (kill-\d{6})$`).FindAllStringSubmatch(out, -1) {
		completed[m[1]] = true
	}
	s := open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	for _, m := range created {
		id := m[1]
		rec, rev, err := s.GetTask(ctx, id)
		switch {
		case err != nil:
			t.Errorf("task %s, created before the kill: %v", id, err)
		case completed[id] && (rec.Status != tasks.Completed || rev != 2):
			t.Errorf("task %s, completed before the kill: %s at revision %d, want completed at 2", id, rec.Status, rev)
		case !completed[id] && !(rev == 1 && rec.Status == tasks.Working || rev == 2 && rec.Status == tasks.Completed):
			// Revision 2 is the completion the kill cut short: stored or not.
			t.Errorf("task %s: %s at revision %d, want working at 1 (or completed at 2)", id, rec.Status, rev)
		}
	}
	if len(created) < 40 {
		t.Fatalf("%d creations reported before the kill, want 40 or more; output:\n%s", len(created), out)
	}
	t.Logf("%d tasks created and %d completed before SIGKILL all read back", len(created), len(completed))
}
