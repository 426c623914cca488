package fleettest_test

// Tasks (the Tasks extension, protocol 2026-07-28) across three replicas
// of `tidemark serve --redis` (DESIGN.md, "Tasks: the executor rule").

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// taskVersion is the protocol version of the Tasks extension.
const taskVersion = "2026-07-28"

// taskSweep is how often each replica sweeps the store for working tasks
// whose executor is gone (taskrun's sweep period).
const taskSweep = 5 * time.Second

// taskAnswer is a replica's answer to one request of protocol 2026-07-28.
type taskAnswer struct {
	raw    json.RawMessage // the result, as the replica sent it
	fields map[string]any  // the result, decoded
}

func (a taskAnswer) str(k string) string { s, _ := a.fields[k].(string); return s }

// taskPost sends method with params to replica r as one request of
// protocol 2026-07-28 that declares the Tasks extension, with the routing
// headers (Mcp-Name: the tool's name for tools/call, the taskId for
// tasks/*), and returns the result; an HTTP or JSON-RPC error fails the
// test.
func taskPost(t *testing.T, ctx context.Context, r *replica, method string, params map[string]any) taskAnswer {
	t.Helper()
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    taskVersion,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "fleettest", "version": "1.0.0"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{tasks.ExtensionID: map[string]any{}}},
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", taskVersion)
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	if id, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", id)
	}
	resp, err := r.client.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s on %s: %v", method, r.id, err)
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("%s on %s: %d messages, %v", method, r.id, len(msgs), err)
	}
	res, ok := msgs[0].(*jsonrpc.Response)
	if !ok || res.Error != nil {
		t.Fatalf("%s on %s answered %v, want a result", method, r.id, msgs[0])
	}
	a := taskAnswer{raw: res.Result}
	if err := json.Unmarshal(res.Result, &a.fields); err != nil {
		t.Fatalf("%s on %s: result %s: %v", method, r.id, res.Result, err)
	}
	return a
}

// countdownTask calls countdown{n, delay_ms} on r, which answers with a
// task, and returns the task's ID.
func countdownTask(t *testing.T, ctx context.Context, r *replica, n, delayMS int) string {
	t.Helper()
	a := taskPost(t, ctx, r, "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": n, "delay_ms": delayMS}})
	id := a.str("taskId")
	if a.str("resultType") != "task" || a.str("status") != "working" || id == "" {
		t.Fatalf("countdown on %s answered %s, want a CreateTaskResult, working", r.id, a.raw)
	}
	return id
}

// taskGet answers tasks/get of task id on r.
func taskGet(t *testing.T, ctx context.Context, r *replica, id string) taskAnswer {
	t.Helper()
	return taskPost(t, ctx, r, "tasks/get", map[string]any{"taskId": id})
}

// taskAwait reads task id on r until its status is want, within d, and
// returns that answer.
func taskAwait(t *testing.T, ctx context.Context, r *replica, id, want string, d time.Duration) taskAnswer {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		a := taskGet(t, ctx, r, id)
		if a.str("status") == want {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s reads %s on %s after %v, want status %s", tasks.Prefix(id), a.raw, r.id, d, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// taskRev returns the revision of task id's record in Redis: how many
// writes it has had.
func taskRev(t *testing.T, ctx context.Context, f *fleet, id string) uint64 {
	t.Helper()
	_, rev, err := f.st.GetTask(ctx, id)
	if err != nil {
		t.Fatalf("record of task %s: %v", tasks.Prefix(id), err)
	}
	return rev
}

// TestTasksAcrossReplicas: three replicas r0, r1, r2 on one redis-server,
// --lease-ttl 2s and --lease-renew 400ms, the demo's countdown run as a
// task (DESIGN.md, "Tasks: the executor rule"):
//
//   - a task created on r0 reads working on r1 and r2 while it runs, and
//     once completed the same JSON bytes on every replica;
//   - a tasks/cancel sent to r1 stops the call running on r2, which
//     settles the task cancelled itself (generation 1), read so on every
//     replica within one lease renewal plus 1 s of the cancel;
//   - r0 writes each of its tasks once per lease renewal; after kill -9
//     of r0, each of its working tasks reads failed on r1,
//     error.data.reason executor_lost, within the lease TTL plus 2 s of the
//     kill, and never anything else afterwards, on r1 and r2; one that
//     nobody reads is settled so by a sweep within the lease TTL plus the
//     5 s sweep period plus 1 s;
//   - SIGTERM of r1 while its task runs: the drain waits for the call and
//     renews its lease, so the task reads working on r2 past the lease
//     TTL, then completed.
func TestTasksAcrossReplicas(t *testing.T) {
	testenv.NeedRedis(t)
	f := newFleet(t, 3, redistest.Options{})
	ctx := testCtx(t, 90*time.Second)
	a, b, c := f.r[0], f.r[1], f.r[2]

	t.Run("read on every replica", func(t *testing.T) {
		const n = 15
		id := countdownTask(t, ctx, a, n, 100)
		for _, r := range []*replica{b, c} {
			got := taskGet(t, ctx, r, id)
			if got.str("status") != "working" || got.str("taskId") != id || got.str("resultType") != "complete" {
				t.Fatalf("tasks/get on %s while the countdown runs on %s: %s, want working", r.id, a.id, got.raw)
			}
		}
		done := taskAwait(t, ctx, a, id, "completed", 20*time.Second)
		var res struct {
			Result struct {
				Content []struct{ Text string } `json:"content"`
			} `json:"result"`
		}
		json.Unmarshal(done.raw, &res)
		if len(res.Result.Content) != 1 || res.Result.Content[0].Text != "countdown of 15 finished" {
			t.Fatalf("completed task on %s: %s, want the text \"countdown of 15 finished\"", a.id, done.raw)
		}
		for _, r := range []*replica{b, c} {
			if got := taskGet(t, ctx, r, id); !bytes.Equal(got.raw, done.raw) {
				t.Errorf("tasks/get on %s:\n%s\nwant %s's bytes:\n%s", r.id, got.raw, a.id, done.raw)
			}
		}
		rec, _, err := f.st.GetTask(ctx, id)
		if err != nil || rec.Executor.Replica != a.id || rec.Executor.Generation != 1 {
			t.Errorf("record: executor %+v (%v), want %s at generation 1", rec.Executor, err, a.id)
		}
	})

	t.Run("cancel on another replica", func(t *testing.T) {
		id := countdownTask(t, ctx, c, 600, 100) // 60 s unless cancelled
		time.Sleep(200 * time.Millisecond)
		if got := taskGet(t, ctx, b, id); got.str("status") != "working" {
			t.Fatalf("tasks/get on %s: %s, want working", b.id, got.raw)
		}
		start := time.Now()
		ack := taskPost(t, ctx, b, "tasks/cancel", map[string]any{"taskId": id})
		if string(ack.raw) != `{"resultType":"complete"}` {
			t.Fatalf("tasks/cancel on %s answered %s, want {\"resultType\":\"complete\"}", b.id, ack.raw)
		}
		// The cancel reaches the executor through its next renewal, which
		// reads the record back (within leaseRenew); the call stops at
		// once and the executor stores cancelled. 1 s covers the call's
		// end, the write and this loop's reads.
		bound := leaseRenew + time.Second
		var took time.Duration
		for _, r := range []*replica{c, b, a} {
			taskAwait(t, ctx, r, id, "cancelled", 10*time.Second)
			took = time.Since(start)
		}
		t.Logf("cancel sent to %s, task on %s: cancelled on all three replicas %v after the cancel (bound %v)", b.id, c.id, took, bound)
		if took > bound {
			t.Errorf("cancelled on every replica %v after the cancel, want within %v (one renewal, %v, plus 1 s)", took, bound, leaseRenew)
		}
		rec, _, err := f.st.GetTask(ctx, id)
		if err != nil || rec.Status != tasks.Cancelled || rec.Executor.Replica != c.id || rec.Executor.Generation != 1 || rec.Cause != tasks.NoCause {
			t.Errorf("record: %v executor %+v cause %v (%v), want cancelled by %s at generation 1", rec.Status, rec.Executor, rec.Cause, err, c.id)
		}
		// The executor stored the cancel: its call had returned.
		c.proc.WaitFor(t, `msg="task settled" task=`+regexp.QuoteMeta(tasks.Prefix(id))+` generation=1 status=cancelled`, 5*time.Second)
		for _, r := range []*replica{a, b} {
			if strings.Contains(r.proc.Output(), "task="+tasks.Prefix(id)+" generation=1 status=cancelled") {
				t.Errorf("%s settled the task that %s runs", r.id, c.id)
			}
		}
	})

	t.Run("executor killed", func(t *testing.T) {
		// Each countdown would finish 6 s after it starts.
		const n, delay = 60, 100
		ids := make([]string, 3)
		for i := range ids {
			ids[i] = countdownTask(t, ctx, a, n, delay)
		}
		// One more task that nobody reads after the kill: the other
		// replicas' sweeps settle it.
		unread := countdownTask(t, ctx, a, n, delay)
		finish := time.Now().Add(n * delay * time.Millisecond)
		// The executor renews each lease once per --lease-renew: over a
		// lease TTL, each record's revision grows by at most one per
		// renewal interval begun, and at least once.
		revs := make([]uint64, len(ids))
		for i, id := range ids {
			revs[i] = taskRev(t, ctx, f, id)
		}
		from := time.Now()
		time.Sleep(leaseTTL)
		window := time.Since(from)
		most := uint64(window/leaseRenew) + 1
		for i, id := range ids {
			writes := taskRev(t, ctx, f, id) - revs[i]
			t.Logf("task %s: %d writes by %s in %v (renewal every %v)", tasks.Prefix(id), writes, a.id, window.Round(time.Millisecond), leaseRenew)
			if writes < 1 || writes > most {
				t.Errorf("task %s: %d writes in %v, want 1 to %d: one renewal per %v", tasks.Prefix(id), writes, window, most, leaseRenew)
			}
		}
		for _, id := range ids {
			if got := taskGet(t, ctx, b, id); got.str("status") != "working" {
				t.Fatalf("tasks/get on %s before the kill: %s, want working", b.id, got.raw)
			}
		}
		killed := time.Now()
		kill9(t, a)
		bound := leaseTTL + 2*time.Second
		failed := map[string][]byte{}
		for _, id := range ids {
			got := taskAwait(t, ctx, b, id, "failed", bound+5*time.Second)
			took := time.Since(killed)
			t.Logf("task %s: failed on %s %v after the kill of %s (bound %v)", tasks.Prefix(id), b.id, took, a.id, bound)
			if took > bound {
				t.Errorf("task %s read failed %v after the kill, want within %v (the lease TTL plus 2 s)", tasks.Prefix(id), took, bound)
			}
			var e struct {
				Error struct {
					Code    int
					Message string
					Data    struct{ Reason, Replica string }
				}
			}
			json.Unmarshal(got.raw, &e)
			if e.Error.Code != jsonrpc.CodeInternalError || e.Error.Data.Reason != "executor_lost" || e.Error.Data.Replica != a.id ||
				!strings.Contains(e.Error.Message, "may or may not have taken effect") {
				t.Errorf("task %s: %s, want error -32603, data.reason executor_lost, data.replica %s", tasks.Prefix(id), got.raw, a.id)
			}
			if _, ok := got.fields["result"]; ok {
				t.Errorf("a lost task carries a result: %s", got.raw)
			}
			failed[id] = got.raw
		}
		// Past the time the countdowns would have finished, every
		// replica alive reads each task exactly as it was settled.
		for time.Now().Before(finish.Add(time.Second)) {
			for _, id := range ids {
				for _, r := range []*replica{b, c} {
					if got := taskGet(t, ctx, r, id); !bytes.Equal(got.raw, failed[id]) {
						t.Fatalf("task %s on %s later: %s, want the settled %s", tasks.Prefix(id), r.id, got.raw, failed[id])
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The unread task is settled by a sweep (each replica sweeps every
		// 5 s) once its lease ended: read in Redis itself, which settles
		// nothing.
		sweepBound := leaseTTL + taskSweep + time.Second
		for {
			rec, _, err := f.st.GetTask(ctx, unread)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != tasks.Working {
				t.Logf("unread task %s: %v in Redis %v after the kill (bound %v)", tasks.Prefix(unread), rec.Status, time.Since(killed), sweepBound)
				break
			}
			if time.Since(killed) > sweepBound {
				t.Fatalf("unread task %s still working in Redis %v after the kill, want settled by a sweep within %v", tasks.Prefix(unread), time.Since(killed), sweepBound)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, id := range append(ids, unread) {
			rec, _, err := f.st.GetTask(ctx, id)
			if err != nil || rec.Status != tasks.Failed || rec.Cause != tasks.ExecutorLost || rec.Executor.Generation != 2 {
				t.Errorf("record of %s: %v cause %v generation %d (%v), want failed, executor lost, generation 2",
					tasks.Prefix(id), rec.Status, rec.Cause, rec.Executor.Generation, err)
			}
		}
	})
	t.Run("drain", func(t *testing.T) {
		// SIGTERM of r1 while its task runs: the drain (--shutdown-grace
		// 10s by default) waits for the call, renewing its lease, so the
		// task reads working on r2 past the lease TTL, then completed.
		const n, delay = 40, 100 // 4 s
		id := countdownTask(t, ctx, b, n, delay)
		time.Sleep(300 * time.Millisecond)
		if err := b.proc.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		b.proc.WaitFor(t, `msg="shutting down"`, 5*time.Second)
		time.Sleep(leaseTTL + leaseRenew)
		if got := taskGet(t, ctx, c, id); got.str("status") != "working" {
			t.Fatalf("tasks/get on %s %v into %s's drain: %s, want working", c.id, leaseTTL+leaseRenew, b.id, got.raw)
		}
		done := taskAwait(t, ctx, c, id, "completed", 10*time.Second)
		if !strings.Contains(string(done.raw), `"text":"countdown of 40 finished"`) {
			t.Errorf("task on %s after %s's drain: %s, want the countdown's result", c.id, b.id, done.raw)
		}
		select {
		case <-b.proc.Done():
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not exit within 20 s of SIGTERM", b.id)
		}
	})
}
