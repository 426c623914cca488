package interop

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// The official Tasks client, @modelcontextprotocol/ext-tasks 0.2.2 on the
// TypeScript SDK's Client (@modelcontextprotocol/client 2.3.1, version
// negotiation pinned to 2026-07-28), driven by ts/tasks.mjs: it runs the
// demo's countdown as a task (io.modelcontextprotocol/tasks, SEP-2663)
// against `tidemark serve` and through a gateway, and across a kill -9 of
// the server (DESIGN.md, "Tasks: the executor rule").

// extCountdown is the countdown the task runs: 20 steps 100 ms apart, 2 s.
var extCountdown = map[string]any{"n": 20, "delay_ms": 100}

// extLongCountdown is the countdown a kill -9 interrupts: 10 s.
var extLongCountdown = map[string]any{"n": 100, "delay_ms": 100}

// extPoll is the --task-poll of the servers: the pollIntervalMs ext-tasks
// polls at.
const extPoll = "200ms"

// extSettleBound is how soon after the restarted server serves the client
// must settle the interrupted task: its next tasks/get (one poll interval,
// 200 ms, plus the script's 100 ms retry pause) finds the task settled,
// with room for a loaded machine.
const extSettleBound = 5 * time.Second

// extRetryMs is how long (ms) the script's host coordinator sends a
// tasks/* request again while the server does not answer (a restart).
const extRetryMs = 20_000

// extLine is one line ts/tasks.mjs printed.
type extLine struct {
	Connected    bool           `json:"connected"`
	Era          string         `json:"era"`
	Tasks        bool           `json:"tasks"`
	ConnectError string         `json:"connectError"`
	Dispatch     string         `json:"dispatch"`
	Attempt      int            `json:"attempt"`
	ResultType   string         `json:"resultType"`
	Status       string         `json:"status"`
	NetworkError string         `json:"networkError"`
	Execution    string         `json:"execution"`
	TaskID       *string        `json:"taskId"`
	Event        string         `json:"event"`
	Outcome      string         `json:"outcome"`
	Text         string         `json:"text"`
	IsError      bool           `json:"isError"`
	Code         *int           `json:"code"`
	Message      string         `json:"message"`
	Data         map[string]any `json:"data"`
	Thrown       string         `json:"thrown"`
	MS           int            `json:"ms"`
}

// extReport is what ts/tasks.mjs reported.
type extReport struct {
	connect    *extLine
	dispatches []extLine
	execution  *extLine
	outcome    *extLine // the outcome line, or the thrown line
}

// calls returns the dispatches of method.
func (r extReport) calls(method string) []extLine {
	var out []extLine
	for _, d := range r.dispatches {
		if d.Dispatch == method {
			out = append(out, d)
		}
	}
	return out
}

// startExtTasks runs ts/tasks.mjs: tool with args as a task against url,
// its host coordinator sending tasks/* again for retryMs while the server
// does not answer.
func startExtTasks(t *testing.T, url, tool string, args map[string]any, retryMs int) *testenv.Process {
	t.Helper()
	spec, err := json.Marshal(map[string]any{"tool": tool, "args": args, "retryMs": retryMs})
	if err != nil {
		t.Fatal(err)
	}
	return testenv.StartCmd(t, exec.Command(testenv.Node(t), testenv.NodeScript(t, "ts/tasks.mjs"), url, string(spec)))
}

// waitExtTasks waits, up to clientBound, for ts/tasks.mjs to exit 0 and
// returns its report; it fails the test when the script hangs.
func waitExtTasks(t *testing.T, p *testenv.Process) extReport {
	t.Helper()
	waitExit(t, p, clientBound)
	if err := p.Wait(); err != nil {
		t.Fatalf("tasks.mjs: %v; output:\n%s", err, p.Output())
	}
	var r extReport
	for line := range strings.SplitSeq(p.Output(), "\n") {
		var l extLine
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &l) != nil {
			continue // Node.js diagnostics
		}
		switch {
		case l.Connected || l.ConnectError != "":
			r.connect = &l
		case l.Dispatch != "":
			r.dispatches = append(r.dispatches, l)
		case l.Execution != "":
			r.execution = &l
		case l.Outcome != "" || l.Thrown != "":
			r.outcome = &l
		}
	}
	if r.connect == nil || !r.connect.Connected || r.connect.Era != "modern" || !r.connect.Tasks {
		t.Fatalf("connect: got %+v, want connected in the modern era (2026-07-28) with the Tasks extension offered; output:\n%s", r.connect, p.Output())
	}
	return r
}

// checkOneCreate asserts that ext-tasks sent tools/call once and got a
// task, working.
func checkOneCreate(t *testing.T, r extReport) {
	t.Helper()
	calls := r.calls("tools/call")
	if len(calls) != 1 || calls[0].ResultType != "task" || calls[0].Status != "working" {
		t.Errorf("tools/call dispatches %+v, want one, answered a task, working", calls)
	}
	if r.execution == nil || r.execution.Execution != "task" || r.execution.TaskID == nil || *r.execution.TaskID == "" {
		t.Errorf("execution %+v, want a task with an ID", r.execution)
	}
}

// checkCompleted asserts the outcome is countdown's result for n steps.
func checkCompleted(t *testing.T, r extReport, n int) {
	t.Helper()
	if o := r.outcome; o == nil || o.Outcome != "completed" || o.Text != countdownResult(n) || o.IsError {
		t.Errorf("outcome %+v, want completed with %q", o, countdownResult(n))
		return
	}
	t.Logf("settled %d ms after callTool, %d tasks/get", r.outcome.MS, len(r.calls("tasks/get")))
}

// serveTidemark starts `tidemark serve` with args and returns it and its
// endpoint.
func serveTidemark(t *testing.T, args ...string) (*testenv.Process, string) {
	t.Helper()
	p := testenv.StartProcess(t, testenv.BuildTidemark(t), append([]string{"serve"}, args...)...)
	return p, testenv.ServeURL(t, p)
}

// count returns how many lines of a process's output match pattern.
func count(output, pattern string) int {
	return len(regexp.MustCompile(pattern).FindAllString(output, -1))
}

// Log lines of the task layer: one per task created (a call's first
// execution), re-run (another execution), settled by its call, and settled
// by a reader that found its executor lost.
const (
	logCreated   = `msg="task created" task=\S+ generation=1 tool=countdown`
	logRerun     = `msg="task re-run"`
	logCompleted = `msg="task settled" task=\S+ generation=1 status=completed reason=none`
	logLost      = `level=WARN msg="task settled" task=\S+ generation=2 reason=executor_lost executor=local`
)

// TestExtTasksSettlesResult: against `tidemark serve`, memory and
// --data-dir, ext-tasks sends tools/call once, gets a task, polls it with
// tasks/get and settles once, with countdown's result; the server created
// one task and settled it completed.
func TestExtTasksSettlesResult(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	for _, st := range []struct {
		name string
		args []string
	}{
		{"memory", nil},
		{"data-dir", []string{"--data-dir", filepath.Join(t.TempDir(), "data")}},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			srv, url := serveTidemark(t, append([]string{"--addr", "127.0.0.1:0", "--task-poll", extPoll}, st.args...)...)
			r := waitExtTasks(t, startExtTasks(t, url, "countdown", extCountdown, 0))
			checkOneCreate(t, r)
			checkCompleted(t, r, 20)
			if gets := r.calls("tasks/get"); len(gets) == 0 || gets[len(gets)-1].Status != "completed" {
				t.Errorf("tasks/get dispatches %+v, want the last one completed", gets)
			}
			out := srv.Output()
			if n, s := count(out, logCreated), count(out, logCompleted); n != 1 || s != 1 {
				t.Errorf("server logged %d tasks created and %d settled completed, want 1 and 1", n, s)
			}
		})
	}
}

// TestExtTasksThroughUpstream: `tidemark serve --upstream URL --task-tools
// all` in front of a second `tidemark serve` runs countdown as a task of
// its own: ext-tasks settles once with the result, and the upstream got
// the call once, as a plain tools/call (answered with the result, not a
// task of its own).
func TestExtTasksThroughUpstream(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	up := startBackend(t, memoryStore)
	gw, url := serveTidemark(t, "--addr", "127.0.0.1:0", "--upstream", up.URL(), "--task-tools", "all", "--task-poll", extPoll)
	r := waitExtTasks(t, startExtTasks(t, url, "countdown", extCountdown, 0))
	checkOneCreate(t, r)
	checkCompleted(t, r, 20)
	if n := count(gw.Output(), logCreated); n != 1 {
		t.Errorf("gateway logged %d tasks created, want 1", n)
	}
	if n := count(up.proc.Output(), `msg="task created"`); n != 0 {
		t.Errorf("upstream logged %d tasks created, want 0 (the gateway keeps the task)", n)
	}
	calls := where(up.relay.recorded(), func(e exchange) bool { return e.RPC == "tools/call" })
	if len(calls) != 1 || calls[0].Status != 200 {
		t.Errorf("upstream tools/call requests %v, want 1, answered 200", calls)
	}
}

// killMidTask waits until client's task is working (one tasks/get
// answered working), kills the server first with SIGKILL, keeps it down
// until a tasks/get met the refused port, and starts it again with args
// (the same port and directory). It returns the new process and when it
// served.
func killMidTask(t *testing.T, client, first *testenv.Process, args ...string) (*testenv.Process, time.Time) {
	t.Helper()
	client.WaitFor(t, `"dispatch":"tasks/get","attempt":1,"resultType":"complete","status":"working"`, clientBound)
	first.Kill()
	<-first.Done()
	client.WaitFor(t, `"dispatch":"tasks/get","attempt":\d+,"networkError"`, clientBound)
	second, _ := serveTidemark(t, args...)
	return second, time.Now()
}

// checkLost asserts that the call settled with the executor_lost failure
// of a task, within extSettleBound of restarted, its tools/call sent once;
// and that the restarted process second created no task, re-ran none and
// settled one as lost.
func checkLost(t *testing.T, r extReport, restarted time.Time, second *testenv.Process) {
	t.Helper()
	settledAfter := time.Since(restarted)
	checkOneCreate(t, r)
	o := r.outcome
	want := "the task's executor was lost (replica local): the tool may or may not have taken effect; check before calling it again"
	if o == nil || o.Outcome != "failed" || o.Code == nil || *o.Code != -32603 || o.Message != want {
		t.Fatalf("outcome %+v, want failed, code -32603, message %q", o, want)
	}
	if want := map[string]any{"reason": string(replay.ReasonExecutorLost), "replica": "local"}; !reflect.DeepEqual(o.Data, want) {
		t.Errorf("error data %v, want %v", o.Data, want)
	}
	if settledAfter > extSettleBound {
		t.Errorf("settled %v after the restart, want within %v", settledAfter, extSettleBound)
	}
	gets := r.calls("tasks/get")
	if last := gets[len(gets)-1]; last.Status != "failed" {
		t.Errorf("last tasks/get %+v, want failed", last)
	}
	out := second.Output()
	if c, rr, s := count(out, `msg="task created"`), count(out, logRerun), count(out, logLost); c != 0 || rr != 0 || s != 1 {
		t.Errorf("restarted process logged %d tasks created, %d re-runs, %d settled executor_lost; want 0, 0, 1", c, rr, s)
	}
	refused := 0
	for _, g := range gets {
		if g.NetworkError != "" {
			refused++
		}
	}
	t.Logf("settled %v after the restart; %d tasks/get dispatches, %d met the refused port", settledAfter, len(gets), refused)
}

// TestExtTasksKillDataDir: `tidemark serve --data-dir` is killed with
// SIGKILL while ext-tasks polls a working countdown task, and started again
// on the same port and directory. While it is down the script's tasks/get
// meets a refused connection and is sent again; the restarted process
// settled the task failed (executor_lost) before serving, and the next
// tasks/get settles the call with that error, within extSettleBound of the
// restart. The tool ran once: the killed process logged one task created
// (the call's only execution: the task layer starts a call at creation or
// at a re-run, and logs both), the restarted one logged no task created and
// no re-run, and settled the task once; ext-tasks sent tools/call once.
func TestExtTasksKillDataDir(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	args := []string{"--addr", addr, "--data-dir", filepath.Join(t.TempDir(), "data"), "--task-poll", extPoll}
	first, url := serveTidemark(t, args...)
	client := startExtTasks(t, url, "countdown", extLongCountdown, extRetryMs)
	second, restarted := killMidTask(t, client, first, args...)
	r := waitExtTasks(t, client)
	checkLost(t, r, restarted, second)
	if n := count(first.Output(), logCreated); n != 1 {
		t.Errorf("killed process logged %d tasks created, want 1", n)
	}
}

// TestExtTasksKillGateway: as TestExtTasksKillDataDir with the tool on an
// upstream: `tidemark serve --upstream URL --task-tools all --data-dir` is
// killed mid-task and restarted. The call settles with executor_lost, and
// the upstream, where countdown runs, got exactly one tools/call: the tool
// ran once, counted where it runs.
func TestExtTasksKillGateway(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	up := startBackend(t, memoryStore)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	args := []string{"--addr", addr, "--upstream", up.URL(), "--task-tools", "all",
		"--data-dir", filepath.Join(t.TempDir(), "data"), "--task-poll", extPoll}
	first, url := serveTidemark(t, args...)
	client := startExtTasks(t, url, "countdown", extLongCountdown, extRetryMs)
	second, restarted := killMidTask(t, client, first, args...)
	r := waitExtTasks(t, client)
	checkLost(t, r, restarted, second)
	if calls := where(up.relay.recorded(), func(e exchange) bool { return e.RPC == "tools/call" }); len(calls) != 1 {
		t.Errorf("upstream tools/call requests %v, want 1", calls)
	}
}

// TestExtTasksServerStaysDown: without the host's retries (retryMs 0),
// ext-tasks ends a task's observation at the first tasks/get that cannot
// reach the server: the rawDispatch's DispatchError (retryable) is sent
// once more at once, then the call settles failed with that error's
// message, no code and no data; it does not hang, and it does not report
// the task's own outcome. A host that must see a task through a server
// restart retries tasks/* itself, as ts/tasks.mjs does with retryMs.
func TestExtTasksServerStaysDown(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	srv, url := serveTidemark(t, "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"), "--task-poll", extPoll)
	client := startExtTasks(t, url, "countdown", extLongCountdown, 0)
	client.WaitFor(t, `"dispatch":"tasks/get","attempt":1,"resultType":"complete","status":"working"`, clientBound)
	srv.Kill()
	r := waitExtTasks(t, client)
	checkOneCreate(t, r)
	var refused []extLine
	for _, g := range r.calls("tasks/get") {
		if g.NetworkError != "" {
			refused = append(refused, g)
		}
	}
	if len(refused) != 2 || refused[0].NetworkError != "fetch failed" || refused[1].NetworkError != "fetch failed" {
		t.Errorf("tasks/get dispatches that met the refused port: %+v, want 2 (ext-tasks sends a retryable DispatchError once more), \"fetch failed\"", refused)
	}
	if o := r.outcome; o == nil || o.Outcome != "failed" || o.Code != nil || o.Data != nil || o.Message != "tasks/get: fetch failed" {
		t.Errorf("outcome %+v, want failed with message %q, no code, no data", o, "tasks/get: fetch failed")
	}
}
