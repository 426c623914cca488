package connect_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/transport"
)

// taskPosts records the taskId of each tasks/get and tasks/cancel POSTed
// to next.
type taskPosts struct {
	next http.Handler

	mu     sync.Mutex
	gets   []string
	cancel []string
}

func (p *taskPosts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if m, err := jsonrpc.DecodeMessage(body); err == nil {
			if req, ok := m.(*jsonrpc.Request); ok && (req.Method == "tasks/get" || req.Method == "tasks/cancel") {
				var params struct {
					TaskID string `json:"taskId"`
				}
				json.Unmarshal(req.Params, &params)
				p.mu.Lock()
				if req.Method == "tasks/get" {
					p.gets = append(p.gets, params.TaskID)
				} else {
					p.cancel = append(p.cancel, params.TaskID)
				}
				p.mu.Unlock()
			}
		}
	}
	p.next.ServeHTTP(w, r)
}

// wait returns the taskIds of the tasks/get and tasks/cancel POSTed so
// far, once ok holds of them, or at timeout.
func (p *taskPosts) wait(timeout time.Duration, ok func(gets, cancels []string) bool) (gets, cancels []string) {
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		gets, cancels = append([]string(nil), p.gets...), append([]string(nil), p.cancel...)
		p.mu.Unlock()
		if ok(gets, cancels) || time.Now().After(deadline) {
			return gets, cancels
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSessionlessCloseCancelsTasks: toward a 2026-07-28 server with the
// Tasks extension, the host closes stdin while a countdown the bridge
// started runs as a task: the bridge sends tasks/cancel for that task
// before Run returns (nil), and the server no longer runs it, as the
// stateful era ends its session with DELETE.
func TestSessionlessCloseCancelsTasks(t *testing.T) {
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Transport: transport.Options{Logger: slog.New(slog.DiscardHandler)},
		Tasks:     &tidemark.TaskOptions{Tools: map[string]taskrun.Tool{"countdown": {Support: tasks.Optional}}, Poll: 20 * time.Millisecond},
	})
	rec := &taskPosts{next: h}
	srv := serveClosing(t, rec, h)
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolSessionless}, nil)
	host.send(rawInitialize)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"countdown","arguments":{"n":600,"delay_ms":100}}}`)
	gets, _ := rec.wait(hostTimeout, func(gets, _ []string) bool { return len(gets) > 0 })
	if len(gets) == 0 {
		t.Fatal("no tasks/get within 10s: the countdown did not run as a task")
	}
	if n := len(h.RunningTasks()); n != 1 {
		t.Fatalf("the server runs %d tasks, want 1", n)
	}
	host.out.Close() // the host goes away
	_, cancels := rec.wait(hostTimeout, func(_, cancels []string) bool { return len(cancels) > 0 })
	if len(cancels) != 1 || cancels[0] != gets[0] {
		t.Errorf("tasks/cancel sent for %q, want once for the countdown's task %q", cancels, gets[0])
	}
	deadline := time.Now().Add(hostTimeout)
	for len(h.RunningTasks()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if running := h.RunningTasks(); len(running) != 0 {
		t.Errorf("the server still runs %d tasks after the host closed stdin, want 0", len(running))
	}
}
