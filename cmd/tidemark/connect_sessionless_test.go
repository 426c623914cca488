package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// responses returns the responses to call id the host received so far.
func (h *host) responses(id int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.all {
		if r, ok := m.(*jsonrpc.Response); ok && r.ID == mustID(id) {
			n++
		}
	}
	return n
}

// onlyAnswer waits for the answer to call id, then checks for a second
// one for a while: the host must get exactly one.
func (h *host) onlyAnswer(id int64, timeout time.Duration) *jsonrpc.Response {
	h.t.Helper()
	r, _ := h.answer(id, timeout)
	time.Sleep(500 * time.Millisecond)
	if n := h.responses(id); n != 1 {
		h.t.Errorf("the host received %d answers to call %d, want 1", n, id)
	}
	return r
}

// TestConnectSessionlessTasks: `tidemark connect --protocol 2026-07-28`
// against `tidemark serve` (memory): the bridge answers the host's
// initialize itself from server/discover (the host's revision, the
// server's info, no extensions), tools/list passes, and countdown runs as
// a task (the server logs one "task created") whose result reaches the
// host, once.
func TestConnectSessionlessTasks(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--task-poll", "50ms")
	h := startConnect(t, bin, "--protocol", "2026-07-28", "--log-level", "DEBUG", testenv.ServeURL(t, p))
	var init struct {
		ProtocolVersion string                     `json:"protocolVersion"`
		ServerInfo      map[string]any             `json:"serverInfo"`
		Capabilities    map[string]json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(h.initialize(), &init); err != nil {
		t.Fatal(err)
	}
	if init.ProtocolVersion != "2025-11-25" || init.ServerInfo["name"] != "tidemark-demo" {
		t.Errorf("initialize result: protocol %q, serverInfo %v; want 2025-11-25 and tidemark-demo", init.ProtocolVersion, init.ServerInfo)
	}
	if _, ok := init.Capabilities["extensions"]; ok || init.Capabilities["tools"] == nil {
		t.Errorf("initialize capabilities %v: want tools and no extensions", init.Capabilities)
	}

	h.request(2, "tools/list", map[string]any{})
	r, _ := h.answer(2, 10*time.Second)
	var tools struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Result, &tools); err != nil {
		t.Fatalf("tools/list: %s: %v (error %v)", r.Result, err, r.Error)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if got := strings.Join(names, ","); got != "confirm,countdown,echo,notify" {
		t.Errorf("tools/list: %s, want confirm,countdown,echo,notify", got)
	}

	h.request(3, "tools/call", countdown(3, 50))
	r = h.onlyAnswer(3, 20*time.Second)
	if got, want := toolText(t, r), "countdown of 3 finished"; got != want {
		t.Errorf("countdown as a task: %q, want %q", got, want)
	}
	if n := strings.Count(p.Output(), `msg="task created"`); n != 1 {
		t.Errorf("the server logged %d \"task created\", want 1", n)
	}
	if !strings.Contains(h.stderr.String(), "answered from server/discover") {
		t.Errorf("the bridge did not log answering initialize from server/discover")
	}
	if n := h.initializeAnswers(2, 3); n != 1 {
		t.Errorf("the host received %d initialize answers, want 1", n)
	}
}

// TestConnectSessionlessTaskThroughCuts: a proxy cuts every other answer
// to the bridge's tasks/get of the working countdown task in its middle;
// the host gets exactly one answer, the result, and the tool ran once.
func TestConnectSessionlessTaskThroughCuts(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--task-poll", "50ms")
	u := testenv.ServeURL(t, p)
	var polls, cuts atomic.Int64
	px, err := faultproxy.New(strings.TrimPrefix(strings.TrimSuffix(u, "/mcp"), "http://"), func(conn int, chunk []byte) faultproxy.Decision {
		if bytes.Contains(chunk, []byte(`"status":"working"`)) && bytes.Contains(chunk, []byte(`"resultType":"complete"`)) {
			if polls.Add(1)%2 == 1 {
				cuts.Add(1)
				return faultproxy.Decision{Forward: len(chunk) - 20, Cut: true}
			}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	h := startConnect(t, bin, "--protocol", "2026-07-28", "http://"+px.Addr()+"/mcp")
	h.initialize()
	h.request(4, "tools/call", countdown(10, 100))
	r := h.onlyAnswer(4, 30*time.Second)
	if got, want := toolText(t, r), "countdown of 10 finished"; got != want {
		t.Errorf("countdown through cuts: %q, want %q", got, want)
	}
	if cuts.Load() < 3 {
		t.Errorf("the proxy cut %d poll answers, want at least 3 (the test did not cut)", cuts.Load())
	}
	if n := strings.Count(p.Output(), `msg="task created"`); n != 1 {
		t.Errorf("the server logged %d \"task created\", want 1", n)
	}
	t.Logf("%d tasks/get answers of the working task, %d cut", polls.Load(), cuts.Load())
}

// TestConnectSessionlessTaskAcrossKill: countdown runs as a task on
// `tidemark serve`; the server is killed with SIGKILL mid-task and started
// again on the same port (and directory). The host gets exactly one
// answer, the task's error as the restarted server gives it: with
// --data-dir the settled task's -32603, data.reason executor_lost; with
// the memory store, which forgot the task, tasks/get's -32602
// task_not_found. The first process logged one "task created", the second
// none and no "task re-run": countdown ran once.
func TestConnectSessionlessTaskAcrossKill(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   func(t *testing.T) []string
		code   int64
		reason replay.Reason
	}{
		{"durable", func(t *testing.T) []string { return []string{"--data-dir", filepath.Join(t.TempDir(), "data")} }, jsonrpc.CodeInternalError, replay.ReasonExecutorLost},
		{"memory", func(*testing.T) []string { return nil }, jsonrpc.CodeInvalidParams, replay.ReasonTaskNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := testenv.BuildTidemark(t)
			port := testenv.FreePort(t)
			args := append(tc.args(t), "--task-poll", "50ms")
			first := startOn(t, bin, port, args...)
			h := startConnect(t, bin, "--protocol", "2026-07-28", "http://127.0.0.1:"+strconv.Itoa(port)+"/mcp")
			h.initialize()
			h.request(5, "tools/call", countdown(1000, 100))
			first.WaitFor(t, `msg="task created"`, 20*time.Second)
			time.Sleep(300 * time.Millisecond) // a few polls of the working task
			kill9(t, first)
			second := startOn(t, bin, port, args...)

			r := h.onlyAnswer(5, 30*time.Second)
			var we *jsonrpc.Error
			if !errors.As(r.Error, &we) {
				t.Fatalf("answer %s, want the task's error", r.Result)
			}
			var data struct {
				Reason string `json:"reason"`
			}
			json.Unmarshal(we.Data, &data)
			if we.Code != tc.code || data.Reason != tc.reason.String() {
				t.Errorf("error %d %s (data %s), want %d with data.reason %s", we.Code, we.Message, we.Data, tc.code, tc.reason)
			}
			if n := strings.Count(first.Output(), `msg="task created"`); n != 1 {
				t.Errorf("the first server logged %d \"task created\", want 1", n)
			}
			for _, msg := range []string{`msg="task created"`, `msg="task re-run"`} {
				if n := strings.Count(second.Output(), msg); n != 0 {
					t.Errorf("the restarted server logged %d %s, want 0", n, msg)
				}
			}
		})
	}
}

// TestConnectSessionlessCutCall: a call that is not a task (tools/list)
// whose answer the proxy cuts mid-body fails at once toward the host with
// data.reason stream_lost, is not sent again, and the host's next call
// works.
func TestConnectSessionlessCutCall(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0")
	u := testenv.ServeURL(t, p)
	var lists, cut atomic.Int64
	px, err := faultproxy.New(strings.TrimPrefix(strings.TrimSuffix(u, "/mcp"), "http://"), func(conn int, chunk []byte) faultproxy.Decision {
		if bytes.Contains(chunk, []byte(`"tools":[`)) {
			if lists.Add(1) == 1 {
				cut.Add(1)
				return faultproxy.Decision{Forward: len(chunk) / 2, Cut: true}
			}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	h := startConnect(t, bin, "--protocol", "2026-07-28", "http://"+px.Addr()+"/mcp")
	h.initialize()
	h.request(6, "tools/list", map[string]any{})
	r := h.onlyAnswer(6, 10*time.Second)
	wantCallError(t, r, hostErrorData{Reason: replay.ReasonStreamLost.String()})
	if cut.Load() != 1 || lists.Load() != 1 {
		t.Errorf("the server answered tools/list %d times (%d cut), want once, cut: the bridge must not send it again", lists.Load(), cut.Load())
	}
	h.request(7, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "after the cut"}})
	r, _ = h.answer(7, 10*time.Second)
	if got := toolText(t, r); got != "after the cut" {
		t.Errorf("the next call: %q, want %q", got, "after the cut")
	}
}

// TestConnectAutoPicksStateful: with the default --protocol auto, the
// bridge asks `tidemark serve` server/discover, finds it serves
// 2025-11-25, and speaks the stateful era (the existing connect tests show
// the rest of that era).
func TestConnectAutoPicksStateful(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0")
	h := startConnect(t, bin, "--log-level", "DEBUG", testenv.ServeURL(t, p))
	h.initialize()
	if log := h.stderr.String(); !strings.Contains(log, `msg="connect: stateful era"`) || !strings.Contains(log, "supported=\"[2026-07-28 2025-11-25") {
		t.Errorf("the bridge did not log picking the stateful era after server/discover:\n%s", log)
	}
	h.request(2, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "stateful"}})
	r, _ := h.answer(2, 10*time.Second)
	if got := toolText(t, r); got != "stateful" {
		t.Errorf("echo: %q, want %q", got, "stateful")
	}
	if !strings.Contains(p.Output(), "session created") {
		t.Errorf("the server logged no session created: the bridge did not speak the stateful era")
	}
}
