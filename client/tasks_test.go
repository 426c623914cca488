package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/client"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/transport"
)

// taskClient connects an mcp.Client (protocol 2026-07-28 by default, so
// the SDK sends server/discover first) through a TaskTransport over the
// SDK's own streamable transport to endpoint.
func taskClient(t *testing.T, endpoint string, opts *mcp.ClientOptions, tune func(*client.TaskTransport)) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	tr := &client.TaskTransport{
		Transport:      &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc},
		InitialBackoff: 20 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
		ResumeTimeout:  10 * time.Second,
		Logger:         testLogger(t),
	}
	if tune != nil {
		tune(tr)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "tasks-test", Version: "1.0.0"}, opts)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// plainClient connects an mcp.Client through the SDK's streamable
// transport alone: it never declares the Tasks extension.
func plainClient(t *testing.T, endpoint string) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	c := mcp.NewClient(&mcp.Implementation{Name: "plain-test", Version: "1.0.0"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callCountdown(ctx context.Context, cs *mcp.ClientSession, n, delayMS int) (*mcp.CallToolResult, error) {
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": n, "delay_ms": delayMS}})
}

func contentJSON(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	b, err := json.Marshal(res.Content)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startTaskServe runs `tidemark serve` with a 50 ms poll interval on addr.
func startTaskServe(t *testing.T, addr string, extra ...string) (*testenv.Process, string) {
	t.Helper()
	return startServe(t, addr, append([]string{"--task-poll", "50ms"}, extra...)...)
}

// TestTaskCountdownAgainstServe: a go-sdk client with TaskTransport calls
// the demo's countdown against `tidemark serve`: the call runs as one task
// (the server logs one "task created") and returns exactly what the same
// call returns without the extension.
func TestTaskCountdownAgainstServe(t *testing.T) {
	srv, endpoint := startTaskServe(t, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	plain, err := callCountdown(ctx, plainClient(t, endpoint), 3, 50)
	if err != nil {
		t.Fatalf("plain countdown: %v", err)
	}
	if n := strings.Count(srv.Output(), "msg=\"task created\""); n != 0 {
		t.Fatalf("a call without the extension created %d tasks, want 0", n)
	}

	cs := taskClient(t, endpoint, nil, nil)
	res, err := callCountdown(ctx, cs, 3, 50)
	if err != nil {
		t.Fatalf("countdown as a task: %v", err)
	}
	if got, want := contentJSON(t, res), contentJSON(t, plain); got != want {
		t.Errorf("countdown as a task returned %s, want %s (the plain call's)", got, want)
	}
	if got, want := contentJSON(t, res), `[{"type":"text","text":"countdown of 3 finished"}]`; got != want {
		t.Errorf("content %s, want %s", got, want)
	}
	if res.IsError {
		t.Errorf("isError true")
	}
	if n := strings.Count(srv.Output(), "msg=\"task created\""); n != 1 {
		t.Errorf("server logged %d \"task created\", want 1:\n%s", n, srv.Output())
	}
}

// TestTaskSurvivesCuts: while countdown runs as a task, the proxy cuts
// every other tasks/get answer in its middle; the call still returns its
// one result, and the task was created once.
func TestTaskSurvivesCuts(t *testing.T) {
	srv, serveURL := startTaskServe(t, "127.0.0.1:0")
	u, err := url.Parse(serveURL)
	if err != nil {
		t.Fatal(err)
	}
	var polls, cuts atomic.Int64
	p := proxyTo(t, u.Host, func(conn int, chunk []byte) faultproxy.Decision {
		// A tasks/get answer of a working task: cut half of them inside
		// the body.
		if bytes.Contains(chunk, []byte(`"status":"working"`)) && bytes.Contains(chunk, []byte(`"resultType":"complete"`)) {
			if polls.Add(1)%2 == 1 {
				cuts.Add(1)
				return faultproxy.Decision{Forward: len(chunk) - 20, Cut: true}
			}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	})
	endpoint := "http://" + p.Addr() + u.Path
	cs := taskClient(t, endpoint, nil, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := callCountdown(ctx, cs, 10, 100)
	if err != nil {
		t.Fatalf("countdown through cuts: %v", err)
	}
	if got, want := contentJSON(t, res), `[{"type":"text","text":"countdown of 10 finished"}]`; got != want {
		t.Errorf("content %s, want %s", got, want)
	}
	if cuts.Load() < 3 {
		t.Errorf("the proxy cut %d poll answers, want at least 3 (the test did not cut)", cuts.Load())
	}
	if n := strings.Count(srv.Output(), "msg=\"task created\""); n != 1 {
		t.Errorf("server logged %d \"task created\", want 1", n)
	}
	t.Logf("%d tasks/get answers of a working task, %d cut", polls.Load(), cuts.Load())
}

// TestTaskAcrossKill: countdown runs as a task on `tidemark serve`; the
// server is killed with SIGKILL mid-task and a new one started on the
// same port (and directory) half a second later. The call fails, well within its deadline,
// with the task's error as the server sent it: with --data-dir, -32603
// and data.reason executor_lost; with the memory store, which forgot the
// task, tasks/get's -32602 task_not_found. countdown ran once: one task
// created, by the first process; none created or re-run by the second.
func TestTaskAcrossKill(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   func(t *testing.T) []string
		code   int64
		reason string
		status string // TaskError.Status
	}{
		{"durable", func(t *testing.T) []string { return []string{"--data-dir", t.TempDir()} }, jsonrpc.CodeInternalError, "executor_lost", "failed"},
		{"memory", func(*testing.T) []string { return nil }, jsonrpc.CodeInvalidParams, "task_not_found", "working"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args(t)
			addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			first, endpoint := startTaskServe(t, addr, args...)
			cs := taskClient(t, endpoint, nil, func(tr *client.TaskTransport) { tr.ResumeTimeout = 20 * time.Second })

			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			type outcome struct {
				res *mcp.CallToolResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := callCountdown(ctx, cs, 100, 100)
				done <- outcome{res, err}
			}()
			first.WaitFor(t, `msg="task created"`, 10*time.Second)
			time.Sleep(300 * time.Millisecond) // a few polls of the working task
			first.Kill()
			first.Wait()
			// Down for a while: the polls meanwhile cannot connect.
			time.Sleep(500 * time.Millisecond)
			second, _ := startTaskServe(t, addr, args...)

			var o outcome
			select {
			case o = <-done:
			case <-time.After(35 * time.Second):
				t.Fatal("the call did not end within 35 s of the kill")
			}
			if o.err == nil {
				t.Fatalf("the call returned %s, want the task's failure", contentJSON(t, o.res))
			}
			var te *client.TaskError
			if !errors.As(o.err, &te) || te.Status != tc.status {
				t.Fatalf("error %v (%T), want a *client.TaskError of a %s task", o.err, o.err, tc.status)
			}
			var we *jsonrpc.Error
			if !errors.As(o.err, &we) {
				t.Fatalf("error %v does not wrap the server's *jsonrpc.Error", o.err)
			}
			var data struct {
				Reason string `json:"reason"`
			}
			if err := json.Unmarshal(we.Data, &data); err != nil || we.Code != tc.code || data.Reason != tc.reason {
				t.Errorf("error code %d data %s, want %d with reason %s", we.Code, we.Data, tc.code, tc.reason)
			}
			if n := strings.Count(first.Output(), "msg=\"task created\""); n != 1 {
				t.Errorf("the first server logged %d \"task created\", want 1", n)
			}
			for _, line := range []string{`msg="task created"`, `msg="task re-run"`} {
				if strings.Contains(second.Output(), line) {
					t.Errorf("the restarted server logged %s: the call ran again", line)
				}
			}
		})
	}
}

// recording is an http.Handler that keeps the body of every POST before
// passing it on.
type recording struct {
	next   http.Handler
	mu     sync.Mutex
	bodies []string
}

func (r *recording) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodPost {
		b, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(b))
		r.mu.Lock()
		r.bodies = append(r.bodies, string(b))
		r.mu.Unlock()
	}
	r.next.ServeHTTP(w, req)
}

func (r *recording) posts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies...)
}

// TestTaskTransportWithoutExtension: toward a server whose
// server/discover does not offer the extension (the go-sdk's own
// sessionless handler), the calls pass unchanged: no request declares
// the extension, and countdown answers its plain result.
func TestTaskTransportWithoutExtension(t *testing.T) {
	rec := &recording{next: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return demo.NewServer() },
		&mcp.StreamableHTTPOptions{Stateless: true})}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	cs := taskClient(t, srv.URL, nil, nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q, want the sessionless 2026-07-28 (server/discover)", v)
	}
	res, err := callCountdown(t.Context(), cs, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := contentJSON(t, res), `[{"type":"text","text":"countdown of 2 finished"}]`; got != want {
		t.Errorf("content %s, want %s", got, want)
	}
	posts := rec.posts()
	var calls int
	for _, b := range posts {
		if strings.Contains(b, tasks.ExtensionID) {
			t.Errorf("a request declared the extension: %s", b)
		}
		if strings.Contains(b, `"method":"tools/call"`) {
			calls++
		}
	}
	if calls != 1 {
		t.Errorf("%d tools/call sent, want 1: %q", calls, posts)
	}
}

// inProcess serves the demo with the Tasks extension from an in-process
// Tidemark (memory store) whose tools in taskTools run as tasks, behind a
// recording handler.
func inProcess(t *testing.T, taskTools map[string]taskrun.Tool) (*recording, string) {
	t.Helper()
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Transport: transport.Options{Logger: testLogger(t)},
		Tasks:     &tidemark.TaskOptions{Tools: taskTools, Poll: 20 * time.Millisecond},
	})
	rec := &recording{next: h}
	srv := httptest.NewServer(rec)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	})
	return rec, srv.URL
}

// TestTaskCancelledWithContext: a call whose context ends while its task
// works sends tasks/cancel for that task, which the server settles
// cancelled.
func TestTaskCancelledWithContext(t *testing.T) {
	rec, endpoint := inProcess(t, map[string]taskrun.Tool{"countdown": {Support: tasks.Optional}})
	cs := taskClient(t, endpoint, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := callCountdown(ctx, cs, 600, 100)
		errc <- err
	}()
	// Once a tasks/get was sent, the task exists: give the call up.
	taskID := waitForPost(t, rec, `"method":"tasks/get"`)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("call error %v, want context.Canceled", err)
	}
	waitForPost(t, rec, `"method":"tasks/cancel"`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := taskStatus(t, endpoint, taskID); got == "cancelled" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("task %s still %s 10 s after tasks/cancel", taskID, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitForPost waits up to 10 s for a POST whose body contains what, and
// returns its params.taskId.
func waitForPost(t *testing.T, rec *recording, what string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, b := range rec.posts() {
			if strings.Contains(b, what) {
				var m struct {
					Params struct {
						TaskID string `json:"taskId"`
					} `json:"params"`
				}
				json.Unmarshal([]byte(b), &m)
				return m.Params.TaskID
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no POST with %s within 10 s", what)
	return ""
}

// taskStatus reads a task's status with a tasks/get of its own.
func taskStatus(t *testing.T, endpoint, id string) string {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":%q,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{%q:{}}}}}}`, id, tasks.ExtensionID)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tasks/get")
	req.Header.Set("Mcp-Name", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Result struct {
			Status string `json:"status"`
		} `json:"result"`
	}
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("tasks/get answered %d %q", resp.StatusCode, data)
	}
	return m.Result.Status
}

// TestTaskInputRequired: confirm run as a task asks for input inside the
// task; the SDK answers through its own elicitation handler, the
// transport sends the answer with tasks/update, and the call returns the
// tool's result.
func TestTaskInputRequired(t *testing.T) {
	rec, endpoint := inProcess(t, map[string]taskrun.Tool{"confirm": {Support: tasks.Optional}})
	var asked atomic.Int64
	cs := taskClient(t, endpoint, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirmed": true}}, nil
		},
	}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "confirm", Arguments: map[string]any{"question": "proceed?"}})
	if err != nil {
		t.Fatalf("confirm as a task: %v", err)
	}
	if got, want := contentJSON(t, res), `[{"type":"text","text":"accepted"}]`; got != want {
		t.Errorf("content %s, want %s", got, want)
	}
	if asked.Load() != 1 {
		t.Errorf("the elicitation handler ran %d times, want 1", asked.Load())
	}
	var created, updates int
	for _, b := range rec.posts() {
		if strings.Contains(b, `"method":"tools/call"`) {
			created++
		}
		if strings.Contains(b, `"method":"tasks/update"`) {
			updates++
		}
	}
	if created != 1 || updates != 1 {
		t.Errorf("%d tools/call and %d tasks/update sent, want 1 and 1", created, updates)
	}
}

// cutMarkedOnce returns a proxy filter that cuts, once, the connection whose
// chunk holds marker, forwarding the chunk up to marker's start: the
// client gets the answer's headers and part of its body. The int64 counts
// the cuts.
func cutMarkedOnce(marker string) (faultproxy.Filter, *atomic.Int64) {
	var cuts atomic.Int64
	return func(_ int, chunk []byte) faultproxy.Decision {
		if i := bytes.Index(chunk, []byte(marker)); i >= 0 && cuts.CompareAndSwap(0, 1) {
			return faultproxy.Decision{Forward: i, Cut: true}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	}, &cuts
}

// cutNthMarked is cutMarkedOnce for the nth chunk (from 1) that holds
// marker.
func cutNthMarked(marker string, n int64) (faultproxy.Filter, *atomic.Int64) {
	var seen, cuts atomic.Int64
	return func(_ int, chunk []byte) faultproxy.Decision {
		if i := bytes.Index(chunk, []byte(marker)); i >= 0 && seen.Add(1) == n && cuts.CompareAndSwap(0, 1) {
			return faultproxy.Decision{Forward: i, Cut: true}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	}, &cuts
}

// TestTaskCreateAnswerCut: the proxy cuts the application/json answer
// that creates the task inside its body, or inside its header block (the
// second answer, after the discover's). That call fails with
// ErrStreamLost, saying it was sent (NotSent false), and is not sent
// again; the next call on the same ClientSession runs as a task and
// returns its result. Regression for the header block: the call failed
// with the SDK's own "rejected by transport" error, which no caller can
// tell from a call that was not sent.
func TestTaskCreateAnswerCut(t *testing.T) {
	for _, tc := range []struct {
		name   string
		marker string
		n      int64
	}{{"body", `"resultType":"task"`, 1}, {"headers", "HTTP/1.1 200", 2}} {
		t.Run(tc.name, func(t *testing.T) { createAnswerCut(t, tc.marker, tc.n) })
	}
}

func createAnswerCut(t *testing.T, marker string, n int64) {
	rec, serveURL := inProcess(t, map[string]taskrun.Tool{"countdown": {Support: tasks.Optional}})
	u, err := url.Parse(serveURL)
	if err != nil {
		t.Fatal(err)
	}
	filter, cuts := cutNthMarked(marker, n)
	p := proxyTo(t, u.Host, filter)
	cs := taskClient(t, "http://"+p.Addr(), nil, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	_, err = callCountdown(ctx, cs, 3, 10)
	if cuts.Load() != 1 {
		t.Fatalf("the proxy cut %d answers, want 1", cuts.Load())
	}
	var ce *client.CallError
	if !errors.As(err, &ce) || !errors.Is(err, client.ErrStreamLost) || ce.NotSent || ce.Method != "tools/call" {
		t.Errorf("cut call: error %v (%T), want a *client.CallError of tools/call wrapping ErrStreamLost, NotSent false", err, err)
	}
	if err != nil && !strings.Contains(err.Error(), "may run") {
		t.Errorf("cut call: error %q does not say the call may run", err)
	}
	t.Logf("cut call: %v", err)

	res, err := callCountdown(ctx, cs, 2, 10)
	if err != nil {
		t.Fatalf("the next call on the same session: %v", err)
	}
	if got, want := contentJSON(t, res), `[{"type":"text","text":"countdown of 2 finished"}]`; got != want {
		t.Errorf("next call: content %s, want %s", got, want)
	}
	var calls int
	for _, b := range rec.posts() {
		if strings.Contains(b, `"method":"tools/call"`) {
			calls++
		}
	}
	if calls != 2 {
		t.Errorf("%d tools/call sent, want 2 (the cut one is not sent again)", calls)
	}
}

// TestTaskDiscoverCut: the proxy cuts the answer to server/discover at
// Connect, before its headers or inside its body. The transport sends the
// discover again, so the session is of the sessionless era (2026-07-28)
// and a call runs as a task, instead of the SDK falling back to
// initialize, where nothing runs as a task.
func TestTaskDiscoverCut(t *testing.T) {
	for _, tc := range []struct {
		name   string
		marker string // the cut comes where this begins
	}{
		{"headers", "HTTP/1.1 200"},
		{"body", `"supportedVersions"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, serveURL := inProcess(t, map[string]taskrun.Tool{"countdown": {Support: tasks.Optional}})
			u, err := url.Parse(serveURL)
			if err != nil {
				t.Fatal(err)
			}
			filter, cuts := cutMarkedOnce(tc.marker)
			p := proxyTo(t, u.Host, filter)
			cs := taskClient(t, "http://"+p.Addr(), nil, nil)
			if cuts.Load() != 1 {
				t.Fatalf("the proxy cut %d answers, want 1", cuts.Load())
			}
			if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
				t.Errorf("negotiated %q, want the sessionless 2026-07-28 (server/discover sent again)", v)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			res, err := callCountdown(ctx, cs, 2, 10)
			if err != nil {
				t.Fatalf("countdown: %v", err)
			}
			if got, want := contentJSON(t, res), `[{"type":"text","text":"countdown of 2 finished"}]`; got != want {
				t.Errorf("content %s, want %s", got, want)
			}
			var discovers, initializes, polls int
			for _, b := range rec.posts() {
				switch {
				case strings.Contains(b, `"method":"server/discover"`):
					discovers++
				case strings.Contains(b, `"method":"initialize"`):
					initializes++
				case strings.Contains(b, `"method":"tasks/get"`):
					polls++
				}
			}
			if discovers != 2 || initializes != 0 || polls == 0 {
				t.Errorf("server got %d server/discover, %d initialize, %d tasks/get; want 2, 0 and at least 1", discovers, initializes, polls)
			}
		})
	}
}

// TestTaskDiscoverNeverAnswered: every server/discover answer is cut in
// its body. The transport sends it again within ResumeTimeout (300 ms);
// then the SDK falls back to initialize, and the transport logs one WARN
// line saying that no call of the session runs as a task.
func TestTaskDiscoverNeverAnswered(t *testing.T) {
	rec, serveURL := inProcess(t, map[string]taskrun.Tool{"countdown": {Support: tasks.Optional}})
	u, err := url.Parse(serveURL)
	if err != nil {
		t.Fatal(err)
	}
	p := proxyTo(t, u.Host, func(_ int, chunk []byte) faultproxy.Decision {
		if i := bytes.Index(chunk, []byte(`"supportedVersions"`)); i >= 0 {
			return faultproxy.Decision{Forward: i, Cut: true}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	})
	var logs testenv.LogBuffer
	start := time.Now()
	cs := taskClient(t, "http://"+p.Addr(), nil, func(tr *client.TaskTransport) {
		tr.ResumeTimeout = 300 * time.Millisecond
		tr.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	took := time.Since(start)
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Errorf("negotiated %q, want the SDK's fallback 2025-11-25", v)
	}
	var discovers int
	for _, b := range rec.posts() {
		if strings.Contains(b, `"method":"server/discover"`) {
			discovers++
		}
	}
	if discovers < 2 {
		t.Errorf("%d server/discover sent, want at least 2", discovers)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "got no answer, and one more try would end past the resume timeout; the SDK falls back to initialize, and no call of this session runs as a task") {
		t.Errorf("%d WARN lines, want 1 saying the session fell back:\n%s", n, logs.String())
	}
	t.Logf("Connect took %v with %d server/discover", took.Round(time.Millisecond), discovers)
}

// TestTaskDiscoverCannotConnect: nothing listens at the endpoint. The
// server/discover that cannot connect is not sent again, and Connect
// fails, as it does without a TaskTransport.
func TestTaskDiscoverCannotConnect(t *testing.T) {
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/mcp", testenv.FreePort(t))
	var logs testenv.LogBuffer
	tr := &client.TaskTransport{
		Transport:     &mcp.StreamableClientTransport{Endpoint: endpoint},
		ResumeTimeout: 10 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "tasks-test", Version: "1.0.0"}, nil)
	cs, err := c.Connect(t.Context(), tr, nil)
	if err == nil {
		cs.Close()
		t.Fatal("Connect succeeded with nothing listening")
	}
	if strings.Contains(logs.String(), "sending it again") {
		t.Errorf("Connect (error %v) sent server/discover again:\n%s", err, logs.String())
	}
}
