package admin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
)

// taskList is a TaskInspector over a fixed list; err fails every lookup.
type taskList struct {
	running []admin.Task
	settled []admin.Task
	details []admin.TaskDetail
	err     error
}

func (l taskList) RunningTasks() []admin.Task { return l.running }

func (l taskList) SettledTasks() []admin.Task { return l.settled }

func (l taskList) LookupTasks(_ context.Context, prefix string) ([]admin.TaskDetail, error) {
	if l.err != nil {
		return nil, l.err
	}
	var out []admin.TaskDetail
	for _, d := range l.details {
		if strings.HasPrefix(d.Task, prefix) {
			out = append(out, d)
		}
	}
	return out, nil
}

// TestTaskEndpoints: /debug/tasks lists the running tasks and
// /debug/tasks/{prefix} details those whose ID starts with it, as JSON;
// a prefix no running task has is 404 saying why a store is not
// searched; a store that cannot be read is 503 unavailable.
func TestTaskEndpoints(t *testing.T) {
	started := time.Date(2026, 11, 20, 10, 2, 11, 0, time.UTC)
	lease := started.Add(30 * time.Second)
	settledAt := started.Add(-50 * time.Second)
	in := taskList{
		running: []admin.Task{
			{Task: "V24ROQPB", Tool: "countdown", Generation: 1, Status: "working", Started: started, LeaseExpiry: &lease},
			{Task: "K45TYYIJ", Tool: "ask", Generation: 2, Status: "working", Started: started.Add(time.Second), CancelRequested: true},
		},
		settled: []admin.Task{
			{Task: "B7QH2MZA", Tool: "countdown", Generation: 1, Status: "completed", Started: started.Add(-time.Minute), Settled: &settledAt},
		},
		details: []admin.TaskDetail{{
			Task: "V24ROQPB", Tool: "countdown", Generation: 1, Status: "working", StatusMessage: "counting",
			Executor: "r1", LeaseExpiry: &lease, Created: started, Updated: started, Expires: started.Add(time.Hour),
			RoundGeneration: 1, RoundStarted: started,
		}},
	}
	srv := httptest.NewServer(admin.Handler(admin.Options{Tasks: in}))
	defer srv.Close()
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/debug/tasks", 200, `{
  "count": 2,
  "settled": 1,
  "tasks": [
    {
      "task": "V24ROQPB",
      "tool": "countdown",
      "generation": 1,
      "status": "working",
      "started": "2026-11-20T10:02:11Z",
      "lease_expiry": "2026-11-20T10:02:41Z",
      "cancel_requested": false
    },
    {
      "task": "K45TYYIJ",
      "tool": "ask",
      "generation": 2,
      "status": "working",
      "started": "2026-11-20T10:02:12Z",
      "cancel_requested": true
    },
    {
      "task": "B7QH2MZA",
      "tool": "countdown",
      "generation": 1,
      "status": "completed",
      "started": "2026-11-20T10:01:11Z",
      "settled": "2026-11-20T10:01:21Z",
      "cancel_requested": false
    }
  ]
}
`},
		{"/debug/tasks/V24", 200, `{
  "tasks": [
    {
      "task": "V24ROQPB",
      "tool": "countdown",
      "generation": 1,
      "status": "working",
      "status_message": "counting",
      "executor": "r1",
      "lease_expiry": "2026-11-20T10:02:41Z",
      "created": "2026-11-20T10:02:11Z",
      "updated": "2026-11-20T10:02:11Z",
      "expires": "2026-11-20T11:02:11Z",
      "cancel_requested": false,
      "input_requests": 0,
      "idempotent": false,
      "reruns": 0,
      "round_generation": 1,
      "round_started": "2026-11-20T10:02:11Z"
    }
  ]
}
`},
		{"/debug/tasks/ZZZ", 404, `{
  "error": "no task this process runs, or ran and settled, has an ID starting with \"ZZZ\"; GET /debug/tasks lists them (a task of another replica, or one whose record expired, is not looked up: not every store can be searched by ID prefix)"
}
`},
	} {
		if code, body := get(t, srv.URL+tc.path); code != tc.status || body != tc.body {
			t.Errorf("GET %s: %d\n%s\nwant %d\n%s", tc.path, code, body, tc.status, tc.body)
		}
	}
	empty := httptest.NewServer(admin.Handler(admin.Options{Tasks: taskList{err: errors.New("dial tcp 127.0.0.1:6379: connection refused")}}))
	defer empty.Close()
	if code, body := get(t, empty.URL+"/debug/tasks"); code != 200 || body != "{\n  \"count\": 0,\n  \"settled\": 0,\n  \"tasks\": []\n}\n" {
		t.Errorf("GET /debug/tasks with none running: %d %s", code, body)
	}
	want := "{\n  \"error\": \"dial tcp 127.0.0.1:6379: connection refused\",\n  \"reason\": \"unavailable\"\n}\n"
	if code, body := get(t, empty.URL+"/debug/tasks/V24"); code != 503 || body != want {
		t.Errorf("GET /debug/tasks/V24 with the store down: %d %s, want 503 %s", code, body, want)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/debug/tasks", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /debug/tasks: %d Allow %q, want 405 GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
	none := httptest.NewServer(admin.Handler(admin.Options{}))
	defer none.Close()
	if code, _ := get(t, none.URL+"/debug/tasks"); code != 404 {
		t.Errorf("GET /debug/tasks without a task inspector: %d, want 404", code)
	}
}
