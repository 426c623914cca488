package main

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
)

// fixedTasks is an admin.TaskInspector over fixed answers.
type fixedTasks struct {
	running []admin.Task
	settled []admin.Task
	details []admin.TaskDetail
}

func (f fixedTasks) RunningTasks() []admin.Task { return f.running }

func (f fixedTasks) SettledTasks() []admin.Task { return f.settled }

func (f fixedTasks) LookupTasks(_ context.Context, prefix string) ([]admin.TaskDetail, error) {
	var out []admin.TaskDetail
	for _, d := range f.details {
		if strings.HasPrefix(d.Task, prefix) {
			out = append(out, d)
		}
	}
	return out, nil
}

// TestInspectTasks: `tidemark inspect --tasks` prints the tasks an
// operator's listener answers as a table, with a prefix their stored state
// one block per task, with --json the answer as it is; an unknown prefix
// exits 1 with the listener's reason, and --tasks with --fleet is a usage
// error.
func TestInspectTasks(t *testing.T) {
	started := time.Date(2026, 11, 20, 10, 2, 11, 0, time.UTC)
	lease := started.Add(30 * time.Second)
	settledAt := started.Add(-50 * time.Second)
	srv := httptest.NewServer(admin.Handler(admin.Options{Tasks: fixedTasks{
		running: []admin.Task{
			{Task: "V24ROQPB", Tool: "countdown", Generation: 1, Status: "working", Started: started, LeaseExpiry: &lease},
			{Task: "K45TYYIJ", Tool: "slow_compute", Generation: 2, Status: "working", Started: started.Add(time.Second), CancelRequested: true},
		},
		settled: []admin.Task{
			{Task: "B7QH2MZA", Tool: "countdown", Generation: 1, Status: "cancelled", Started: started.Add(-time.Minute), Settled: &settledAt},
		},
		details: []admin.TaskDetail{{
			Task: "V24ROQPB", Tool: "countdown", Generation: 1, Status: "working", StatusMessage: "3 left",
			Executor: "r1", LeaseExpiry: &lease, Created: started, Updated: started.Add(2 * time.Second), Expires: started.Add(time.Hour),
			InputRequests: 1, Idempotent: true, RoundGeneration: 1, RoundStarted: started,
		}},
	}}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"--tasks"}, 0, `2 tasks run in this process, 1 ran here and settled:
TASK      TOOL          GENERATION  STATUS                     STARTED               LEASE UNTIL
V24ROQPB  countdown     1           working                    2026-11-20T10:02:11Z  2026-11-20T10:02:41Z
K45TYYIJ  slow_compute  2           working, cancel requested  2026-11-20T10:02:12Z  none
B7QH2MZA  countdown     1           cancelled                  2026-11-20T10:01:11Z  none
`, ""},
		{[]string{"--tasks", "V24"}, 0, `task              V24ROQPB
tool              countdown
status            working (3 left)
generation        1
executor          r1, lease until 2026-11-20T10:02:41Z
round here        generation 1, started 2026-11-20T10:02:11Z
created           2026-11-20T10:02:11Z
updated           2026-11-20T10:02:13Z
expires           2026-11-20T11:02:11Z
cancel requested  no
input requests    1 outstanding
idempotent        yes, re-run 0 times
`, ""},
		{[]string{"--tasks", "--json", "K45"}, 1, "", `tidemark inspect: ` + srv.URL + `/debug/tasks/K45 answered 404: no task this process runs, or ran and settled, has an ID starting with "K45"; GET /debug/tasks lists them (a task of another replica, or one whose record expired, is not looked up: not every store can be searched by ID prefix)
`},
		{[]string{"--tasks", "--fleet", "--redis", "127.0.0.1:6379"}, 2, "", "tidemark inspect: --tasks reads one server's listener (--metrics-addr), not a fleet's Redis: drop --fleet\n"},
	} {
		var stdout, stderr strings.Builder
		code := run(append([]string{"inspect", "--metrics-addr", addr}, tc.args...), &stdout, &stderr)
		if code != tc.code || stdout.String() != tc.stdout || stderr.String() != tc.errs {
			t.Errorf("inspect %v: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d\nstdout:\n%s\nstderr:\n%s", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.errs)
		}
	}
	var stdout, stderr strings.Builder
	if code := run([]string{"inspect", "--metrics-addr", addr, "--tasks", "--json"}, &stdout, &stderr); code != 0 ||
		!strings.HasPrefix(stdout.String(), "{\n  \"count\": 2,\n  \"settled\": 1,\n  \"tasks\": [\n    {\n      \"task\": \"V24ROQPB\",") {
		t.Errorf("inspect --tasks --json: exit %d, stdout %q, stderr %q; want the answer as it is", code, stdout.String(), stderr.String())
	}
}

// TestInspectTasksServe: `tidemark inspect --tasks` against `tidemark
// serve` lists the countdown task a sessionless request created, by its
// ID's prefix, and shows its stored state by that prefix.
func TestInspectTasksServe(t *testing.T) {
	_, endpoint, metricsAddr := startObserved(t, nil)
	created := sessionless(t, endpoint, "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": 100, "delay_ms": 100}, "_meta": declaration})
	id, _ := created["taskId"].(string)
	if len(id) != 26 {
		t.Fatalf("countdown answered %v, want a CreateTaskResult", created)
	}
	var stdout, stderr strings.Builder
	if code := run([]string{"inspect", "--metrics-addr", metricsAddr, "--tasks"}, &stdout, &stderr); code != 0 {
		t.Fatalf("inspect --tasks: exit %d, stderr %q", code, stderr.String())
	}
	row := regexp.MustCompile(`(?m)^` + id[:8] + ` +countdown +1 +working +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +none$`)
	if !strings.HasPrefix(stdout.String(), "1 task runs in this process:\nTASK ") || !row.MatchString(stdout.String()) || strings.Contains(stdout.String(), id) {
		t.Errorf("inspect --tasks printed\n%s\nwant one countdown row for %s, never the whole ID", stdout.String(), id[:8])
	}
	stdout.Reset()
	if code := run([]string{"inspect", "--metrics-addr", metricsAddr, "--tasks", id[:8]}, &stdout, &stderr); code != 0 ||
		!strings.HasPrefix(stdout.String(), "task              "+id[:8]+"\ntool              countdown\nstatus            working\n") || strings.Contains(stdout.String(), id) {
		t.Errorf("inspect --tasks %s: exit %d\n%s\nstderr %q", id[:8], code, stdout.String(), stderr.String())
	}
}
