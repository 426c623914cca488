package taskrun_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/metrics/prom"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// fixture is a go-sdk server behind its stateless handler behind a
// taskrun.Handler on a memory store, on loopback HTTP.
type fixture struct {
	t       *testing.T
	url     string
	st      *memory.Store
	h       *taskrun.Handler
	ttl     time.Duration // the tasks' ttlMs
	reg     *prometheus.Registry
	spans   *tracetest.SpanRecorder
	release chan struct{} // closing it lets "work" finish
	calls   atomic.Int32  // executions of "work"
	nextID  int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureTTL(t, 0)
}

// newFixtureTTL is newFixture with tasks living ttl (0: the default).
func newFixtureTTL(t *testing.T, ttl time.Duration) *fixture {
	t.Helper()
	return newFixtureStore(t, ttl, nil)
}

// newFixtureStore is newFixtureTTL whose Handler keeps its tasks in
// wrap(the memory store) when wrap is not nil.
func newFixtureStore(t *testing.T, ttl time.Duration, wrap func(store.Tasks) store.Tasks) *fixture {
	t.Helper()
	before := goleak.IgnoreCurrent()
	f := &fixture{t: t, st: memory.New(memory.Options{}), release: make(chan struct{}), ttl: ttl}
	if ttl == 0 {
		f.ttl = taskrun.DefaultTTL
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "taskrun-test", Version: "1"}, nil)
	type noArgs struct{}
	mcp.AddTool(s, &mcp.Tool{Name: "work"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
		f.calls.Add(1)
		select {
		case <-f.release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}, StructuredContent: map[string]any{"n": 42}}, nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	mcp.AddTool(s, &mcp.Tool{Name: "broken"}, func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "tool failed"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash"}, func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, any, error) {
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal failure"}
	})
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, func(_ context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
		p := req.Params
		missing := mcp.InputRequestMap{}
		for _, k := range []string{"a", "b"} {
			if _, ok := p.InputResponses[k]; !ok {
				missing[k] = &mcp.ElicitParams{Message: "question " + k, RequestedSchema: map[string]any{"type": "object"}}
			}
		}
		if len(missing) > 0 {
			return &mcp.CallToolResult{InputRequests: missing}, nil, nil
		}
		a, _ := p.InputResponses["a"].(*mcp.ElicitResult)
		b, _ := p.InputResponses["b"].(*mcp.ElicitResult)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Content["v"].(string) + "+" + b.Content["v"].(string)}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Stateless: true, DisableLocalhostProtection: true, PropagateRequestCancellation: true,
	})
	support := map[string]tasks.Support{"work": tasks.Optional, "broken": tasks.Optional, "crash": tasks.Optional, "ask": tasks.Required}
	f.reg = prometheus.NewRegistry()
	rec, err := prom.New(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	f.spans = tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	var st store.Tasks = f.st
	if wrap != nil {
		st = wrap(st)
	}
	f.h = taskrun.New(inner, taskrun.Options{
		Store: st, Metrics: rec, Tracer: tracing.New(tp),
		Tools:   func(name string) taskrun.Tool { return taskrun.Tool{Support: support[name]} },
		Replica: "r1", Poll: 50 * time.Millisecond, TTL: ttl,
		Subject: func(r *http.Request) string { return r.Header.Get("X-User") },
	})
	if err := f.h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f.h)
	f.url = srv.URL
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		select {
		case <-f.release:
		default:
			close(f.release)
		}
		f.h.Shutdown(ctx)
		tp.Shutdown(ctx)
		srv.Close()
		f.st.Close()
		http.DefaultClient.CloseIdleConnections()
		goleak.VerifyNone(t, before)
	})
	return f
}

// reply is one answer: its HTTP status and the JSON-RPC response.
type reply struct {
	status int
	result map[string]any
	raw    json.RawMessage
	err    *jsonrpc.Error
}

// post sends method with params; declare adds the Tasks extension to the
// request's client capabilities; hdr overrides headers ("" deletes one, a
// name starting with + adds a second value).
func (f *fixture) post(method string, params map[string]any, declare bool, hdr map[string]string) reply {
	f.t.Helper()
	caps := map[string]any{}
	if declare {
		caps["extensions"] = map[string]any{tasks.ExtensionID: map[string]any{}}
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
	meta["io.modelcontextprotocol/clientCapabilities"] = caps
	meta["io.modelcontextprotocol/clientInfo"] = map[string]any{"name": "test", "version": "1"}
	params["_meta"] = meta
	f.nextID++
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": f.nextID, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, f.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	if id, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", id)
	}
	for k, v := range hdr {
		if name, ok := strings.CutPrefix(k, "+"); ok {
			req.Header.Add(name, v)
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for line := range strings.SplitSeq(string(data), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = []byte(d)
			}
		}
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		f.t.Fatalf("%s: answer %d %q: %v", method, resp.StatusCode, data, err)
	}
	r := reply{status: resp.StatusCode}
	jr := msg.(*jsonrpc.Response)
	if jr.Error != nil {
		r.err = jr.Error.(*jsonrpc.Error)
		return r
	}
	r.raw = jr.Result
	json.Unmarshal(jr.Result, &r.result)
	return r
}

func (f *fixture) get(id string) reply {
	f.t.Helper()
	return f.post("tasks/get", map[string]any{"taskId": id}, true, nil)
}

// create calls tool as a task and returns its ID.
func (f *fixture) create(tool string) string {
	f.t.Helper()
	r := f.post("tools/call", map[string]any{"name": tool, "arguments": map[string]any{}}, true, nil)
	if r.err != nil || r.result["resultType"] != "task" || r.result["taskId"] == nil {
		f.t.Fatalf("tools/call %s: %+v %v, want a CreateTaskResult", tool, r.result, r.err)
	}
	for _, k := range []string{"result", "error", "inputRequests", "requestState", "ttl", "pollInterval"} {
		if _, ok := r.result[k]; ok {
			f.t.Errorf("CreateTaskResult carries %s: %s", k, r.raw)
		}
	}
	if r.result["ttlMs"] != float64(f.ttl.Milliseconds()) || r.result["pollIntervalMs"] != float64(50) {
		f.t.Errorf("CreateTaskResult ttlMs %v pollIntervalMs %v, want %d and 50", r.result["ttlMs"], r.result["pollIntervalMs"], f.ttl.Milliseconds())
	}
	return r.result["taskId"].(string)
}

// await polls task id until its status is want, and returns that answer.
func (f *fixture) await(id, want string) reply {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := f.get(id)
		if r.err != nil {
			f.t.Fatalf("tasks/get: %v", r.err)
		}
		if r.result["status"] == want {
			return r
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("task %s is %v after 10 s, want %s", id, r.result["status"], want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCompletedResultByteForByte(t *testing.T) {
	f := newFixture(t)
	id := f.create("work")
	if r := f.get(id); r.result["status"] != "working" || r.result["resultType"] != "complete" {
		t.Fatalf("tasks/get while the call runs: %s, want status working, resultType complete", r.raw)
	}
	close(f.release)
	got := f.await(id, "completed")
	// The same call answered at once (no declaration) is the result the
	// task must show, byte for byte.
	plain := f.post("tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, false, nil)
	var task struct {
		Result json.RawMessage `json:"result"`
	}
	json.Unmarshal(got.raw, &task)
	if !bytes.Equal(task.Result, plain.raw) {
		t.Errorf("task result %s, want the call's own %s", task.Result, plain.raw)
	}
	if n := f.calls.Load(); n != 2 {
		t.Errorf("work ran %d times, want 2 (the task once, the plain call once)", n)
	}
}

func TestToolErrorIsCompleted(t *testing.T) {
	f := newFixture(t)
	r := f.await(f.create("broken"), "completed")
	res, _ := r.result["result"].(map[string]any)
	if res["isError"] != true {
		t.Errorf("result %v, want isError true", r.result["result"])
	}
}

func TestJSONRPCErrorIsFailed(t *testing.T) {
	f := newFixture(t)
	r := f.await(f.create("crash"), "failed")
	e, _ := r.result["error"].(map[string]any)
	if e["code"] != float64(jsonrpc.CodeInternalError) || e["message"] != "internal failure" {
		t.Errorf("error %v, want code -32603 message \"internal failure\"", r.result["error"])
	}
	if _, ok := r.result["result"]; ok {
		t.Errorf("a failed task carries result: %s", r.raw)
	}
}

func TestCancel(t *testing.T) {
	f := newFixture(t)
	id := f.create("work")
	ack := f.post("tasks/cancel", map[string]any{"taskId": id}, true, nil)
	if string(ack.raw) != `{"resultType":"complete"}` {
		t.Fatalf("tasks/cancel answered %s %v, want {\"resultType\":\"complete\"}", ack.raw, ack.err)
	}
	f.await(id, "cancelled")
	// A settled task acknowledges a cancel the same way, and stays.
	ack = f.post("tasks/cancel", map[string]any{"taskId": id}, true, nil)
	if string(ack.raw) != `{"resultType":"complete"}` {
		t.Errorf("second tasks/cancel answered %s %v", ack.raw, ack.err)
	}
	if r := f.get(id); r.result["status"] != "cancelled" {
		t.Errorf("after a second cancel: %s", r.raw)
	}
}

func TestNotFound(t *testing.T) {
	f := newFixture(t)
	check := func(what string, r reply) {
		t.Helper()
		if r.err == nil || r.err.Code != jsonrpc.CodeInvalidParams || !strings.Contains(string(r.err.Data), `"reason":"task_not_found"`) {
			t.Errorf("%s: %+v %s, want -32602 task_not_found", what, r.err, r.raw)
		}
	}
	check("unknown ID", f.get("NOSUCHTASKNOSUCHTASKNOSUCH"))
	id := f.create("work")
	check("another subject's task", f.post("tasks/get", map[string]any{"taskId": id}, true, map[string]string{"X-User": "mallory"}))
	check("another subject's cancel", f.post("tasks/cancel", map[string]any{"taskId": id}, true, map[string]string{"X-User": "mallory"}))
	if r := f.get(id); r.result["status"] != "working" {
		t.Errorf("the owner's task after another's cancel: %s, want working", r.raw)
	}
}

func TestUndeclared(t *testing.T) {
	f := newFixture(t)
	r := f.post("tasks/get", map[string]any{"taskId": "x"}, false, nil)
	if r.err == nil || r.err.Code != -32021 || !strings.Contains(string(r.err.Data), `"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`) {
		t.Errorf("undeclared tasks/get: %+v, want -32021 naming the extension", r.err)
	}
	r = f.post("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{}}, false, nil)
	if r.err == nil || r.err.Code != -32021 {
		t.Errorf("undeclared call of a required tool: %+v %s, want -32021", r.err, r.raw)
	}
	close(f.release)
	r = f.post("tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, false, nil)
	if r.err != nil || r.result["resultType"] != "complete" {
		t.Errorf("undeclared call of an optional tool: %s %v, want a plain result", r.raw, r.err)
	}
	for _, m := range []string{"tasks/result", "tasks/list"} {
		if r := f.post(m, map[string]any{}, true, nil); r.err == nil || r.err.Code != jsonrpc.CodeMethodNotFound {
			t.Errorf("%s: %+v, want -32601", m, r.err)
		}
	}
}

func TestHeaderMismatch(t *testing.T) {
	f := newFixture(t)
	id := f.create("work")
	for _, hdr := range []map[string]string{
		{"Mcp-Name": "another"}, {"Mcp-Name": ""}, {"Mcp-Method": "tasks/cancel"}, {"Mcp-Method": ""},
		{"+Mcp-Name": id}, {"+Mcp-Method": "tasks/get"},
	} {
		r := f.post("tasks/get", map[string]any{"taskId": id}, true, hdr)
		if r.status != http.StatusBadRequest || r.err == nil || r.err.Code != -32020 || !strings.Contains(string(r.err.Data), "header_mismatch") {
			t.Errorf("headers %v: %d %+v, want 400 -32020 header_mismatch", hdr, r.status, r.err)
		}
	}
	// A tools/call that declares the extension is answered here, not by
	// the wrapped handler: the same checks apply, and no task starts.
	for _, hdr := range []map[string]string{
		{"Mcp-Name": "echo"}, {"Mcp-Name": ""}, {"Mcp-Method": "tasks/get"}, {"Mcp-Method": "", "Mcp-Name": ""},
		{"+Mcp-Name": "work"},
	} {
		r := f.post("tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, true, hdr)
		if r.status != http.StatusBadRequest || r.err == nil || r.err.Code != -32020 || !strings.Contains(string(r.err.Data), "header_mismatch") {
			t.Errorf("tools/call with headers %v: %d %+v, want 400 -32020 header_mismatch", hdr, r.status, r.err)
		}
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("work ran %d times, want 1 (the refused calls start nothing)", n)
	}
}

func TestDiscoverAddsTheExtension(t *testing.T) {
	f := newFixture(t)
	r := f.post("server/discover", map[string]any{}, false, nil)
	caps, _ := r.result["capabilities"].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	if _, ok := ext[tasks.ExtensionID]; !ok || caps["tasks"] != nil {
		t.Errorf("capabilities %v, want extensions[%s] and no tasks", caps, tasks.ExtensionID)
	}
}

func TestExecutorLost(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	rec, err := tasks.New(tasks.Spec{
		ID: "LOSTLOSTLOSTLOSTLOSTLOSTLO", Tool: "work", Call: []byte(`{"name":"work"}`),
		Executor: tasks.Executor{Replica: "r1", Boot: "an-earlier-boot"}, Now: now,
		TTL: time.Hour, PollInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.CreateTask(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	r := f.get(rec.ID)
	e, _ := r.result["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if r.result["status"] != "failed" || e["code"] != float64(-32603) || data["reason"] != "executor_lost" || data["replica"] != "r1" ||
		!strings.Contains(e["message"].(string), "may or may not have taken effect") {
		t.Fatalf("a task of an earlier boot reads %s, want failed, -32603, executor_lost, replica r1", r.raw)
	}
	got, _, _ := f.st.GetTask(context.Background(), rec.ID)
	if got.Executor.Generation != 2 || got.Cause != tasks.ExecutorLost {
		t.Errorf("stored generation %d cause %v, want 2 ExecutorLost", got.Executor.Generation, got.Cause)
	}
	if f.calls.Load() != 0 {
		t.Errorf("the lost call ran again")
	}
}

func TestInputRequiredPartialAnswers(t *testing.T) {
	f := newFixture(t)
	id := f.create("ask")
	r := f.await(id, "input_required")
	reqs, _ := r.result["inputRequests"].(map[string]any)
	if len(reqs) != 2 || reqs["1-a"] == nil || reqs["1-b"] == nil {
		t.Fatalf("inputRequests %v, want keys 1-a and 1-b", r.result["inputRequests"])
	}
	if m, _ := reqs["1-a"].(map[string]any); m["method"] != "elicitation/create" {
		t.Errorf("inputRequests[1-a] %v, want method elicitation/create", reqs["1-a"])
	}
	answer := func(key, v string) {
		t.Helper()
		ack := f.post("tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{
			key: map[string]any{"action": "accept", "content": map[string]any{"v": v}},
		}}, true, nil)
		if string(ack.raw) != `{"resultType":"complete"}` {
			t.Fatalf("tasks/update answered %s %v", ack.raw, ack.err)
		}
	}
	answer("1-b", "B")
	r = f.get(id)
	reqs, _ = r.result["inputRequests"].(map[string]any)
	if r.result["status"] != "input_required" || len(reqs) != 1 || reqs["1-a"] == nil {
		t.Fatalf("after one answer: %s, want input_required with 1-a only", r.raw)
	}
	answer("1-a", "A")
	r = f.await(id, "completed")
	res, _ := r.result["result"].(map[string]any)
	content, _ := res["content"].([]any)
	if len(content) != 1 || content[0].(map[string]any)["text"] != "A+B" {
		t.Errorf("result %v, want the text A+B", r.result["result"])
	}
}

// TestMetrics checks the task metrics after a task that completes, one
// cancelled while it works, and one whose executor was lost.
func TestMetrics(t *testing.T) {
	f := newFixture(t)
	f.await(f.create("broken"), "completed")
	f.post("tasks/cancel", map[string]any{"taskId": f.create("work")}, true, nil)
	now := time.Now()
	lost, _ := tasks.New(tasks.Spec{
		ID: "LOSTMETRICSLOSTMETRICSLOST", Tool: "work", Call: []byte(`{"name":"work"}`),
		Executor: tasks.Executor{Replica: "r1", Boot: "an-earlier-boot"}, Now: now,
		TTL: time.Hour, PollInterval: time.Second,
	})
	if err := f.st.CreateTask(context.Background(), lost); err != nil {
		t.Fatal(err)
	}
	f.await(lost.ID, "failed")
	deadline := time.Now().Add(10 * time.Second)
	for f.h.Running() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	want := `
# HELP tidemark_tasks_created_total Tasks created by this process (Tasks extension).
# TYPE tidemark_tasks_created_total counter
tidemark_tasks_created_total 2
# HELP tidemark_tasks_settled_total Tasks this process stored as terminal, by status (completed, failed, cancelled) and reason: none when the call's own outcome settled it, else why Tidemark did (executor_lost, task_expired, result_too_large).
# TYPE tidemark_tasks_settled_total counter
tidemark_tasks_settled_total{reason="executor_lost",status="failed"} 1
tidemark_tasks_settled_total{reason="none",status="cancelled"} 1
tidemark_tasks_settled_total{reason="none",status="completed"} 1
# HELP tidemark_tasks_cancel_requests_total tasks/cancel requests received by this process that asked a working or input_required task to stop.
# TYPE tidemark_tasks_cancel_requests_total counter
tidemark_tasks_cancel_requests_total 1
# HELP tidemark_tasks_running Rounds of tasks running in this process.
# TYPE tidemark_tasks_running gauge
tidemark_tasks_running 0
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want),
		"tidemark_tasks_created_total", "tidemark_tasks_settled_total", "tidemark_tasks_cancel_requests_total", "tidemark_tasks_running"); err != nil {
		t.Error(err)
	}
}

// TestDrainRenewsLeases: while Shutdown waits for a running task, the
// process still renews the task's lease, so that a replica reading the
// task during the drain finds its executor alive rather than lost; once
// the call ends the task reads what it reached: draining, a replica waits
// for its tasks up to its grace (DESIGN.md, "Tasks: the executor rule").
func TestDrainRenewsLeases(t *testing.T) {
	before := goleak.IgnoreCurrent()
	st := memory.New(memory.Options{})
	defer st.Close()
	release := make(chan struct{})
	s := mcp.NewServer(&mcp.Implementation{Name: "taskrun-test", Version: "1"}, nil)
	type noArgs struct{}
	mcp.AddTool(s, &mcp.Tool{Name: "work"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
		select {
		case <-release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Stateless: true, DisableLocalhostProtection: true, PropagateRequestCancellation: true,
	})
	const lease, renew = 300 * time.Millisecond, 50 * time.Millisecond
	h := taskrun.New(inner, taskrun.Options{
		Store: st, Replica: "r1", Lease: lease, Renew: renew, Poll: 50 * time.Millisecond,
		Tools: func(string) taskrun.Tool { return taskrun.Tool{Support: tasks.Optional} },
	})
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	f := &fixture{t: t, url: srv.URL, ttl: taskrun.DefaultTTL}
	id := f.create("work")

	drained := make(chan struct{})
	go func() {
		defer close(drained)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Shutdown(ctx)
	}()
	// Three lease times into the drain, another replica of a shared store
	// reads the task: its executor lives.
	time.Sleep(3 * lease)
	rec, _, err := st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	other := tasks.Reader{Replica: "r2", Boot: "another-process", Lease: lease}
	if now := time.Now(); rec.Status != tasks.Working || !tasks.Alive(rec, now, other) {
		t.Fatalf("during the drain: %v, lease until %v (now %v), want working with a live lease",
			rec.Status, rec.Executor.LeaseUntil.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	close(release)
	<-drained
	if rec, _, _ := st.GetTask(context.Background(), id); rec.Status != tasks.Completed || rec.Executor.Generation != 1 {
		t.Errorf("after the drain: %v at generation %d, want completed at generation 1", rec.Status, rec.Executor.Generation)
	}
	srv.Close()
	http.DefaultClient.CloseIdleConnections()
	goleak.VerifyNone(t, before)
}

// TestExpiredWhileWorking: a task still working when its ttlMs ends reads
// failed with data.reason task_expired (not -32602: the store keeps the
// record past its expiry for readers to settle), its call is cancelled,
// and it stays readable Keep longer, its ttlMs grown to say so.
func TestExpiredWhileWorking(t *testing.T) {
	const ttl = 400 * time.Millisecond
	f := newFixtureTTL(t, ttl)
	id := f.create("work")
	time.Sleep(ttl + 100*time.Millisecond)
	r := f.get(id)
	e, _ := r.result["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if r.err != nil || r.result["status"] != "failed" || e["code"] != float64(-32603) || data["reason"] != "task_expired" {
		t.Fatalf("tasks/get after the TTL: %s %v, want failed, -32603, task_expired", r.raw, r.err)
	}
	if ms, _ := r.result["ttlMs"].(float64); ms < float64(taskrun.DefaultKeep.Milliseconds()) {
		t.Errorf("ttlMs %v after the settle, want at least Keep (%v)", r.result["ttlMs"], taskrun.DefaultKeep)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.h.Running() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the expired task's call still runs 5 s after its settle")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := f.get(id); r.result["status"] != "failed" {
		t.Errorf("after the call ended: %s, want it still failed", r.raw)
	}
}

// unreachable is a task store whose next writes fail as a store that
// cannot be reached fails (store.ErrUnavailable), then work again.
type unreachable struct {
	store.Tasks
	fail       atomic.Int32 // writes still to fail
	failCreate atomic.Bool  // every CreateTask fails
}

func (u *unreachable) CreateTask(ctx context.Context, rec tasks.Record) error {
	if u.failCreate.Load() {
		return fmt.Errorf("test store: %w: dial tcp 127.0.0.1:6379: connection refused", store.ErrUnavailable)
	}
	return u.Tasks.CreateTask(ctx, rec)
}

func (u *unreachable) UpdateTask(ctx context.Context, rec tasks.Record, rev uint64) (uint64, error) {
	if u.fail.Add(-1) >= 0 {
		return 0, fmt.Errorf("test store: %w: connection refused", store.ErrUnavailable)
	}
	return u.Tasks.UpdateTask(ctx, rec, rev)
}

// TestStoreErrorsStayInTheLog: when the task store cannot be reached, a
// tools/call and a tasks/get are answered 503 unavailable with a message
// that says so, never with the store's error, which names this host's
// addresses (and, for Redis, its scripts' hashes).
func TestStoreErrorsStayInTheLog(t *testing.T) {
	u := &unreachable{}
	f := newFixtureStore(t, 0, func(st store.Tasks) store.Tasks { u.Tasks = st; return u })
	id := f.create("work")
	u.fail.Store(1)
	u.failCreate.Store(true)
	for _, c := range []struct {
		method string
		params map[string]any
		want   string
	}{
		{"tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, "the task store cannot take the task now: try again shortly"},
		{"tasks/cancel", map[string]any{"taskId": id}, "the task store cannot be read now: try again shortly"},
	} {
		r := f.post(c.method, c.params, true, nil)
		if r.status != http.StatusServiceUnavailable || r.err == nil || r.err.Message != c.want {
			t.Errorf("%s: %d %v; want 503 %q", c.method, r.status, r.err, c.want)
		}
	}
}

// TestOutcomeOutlivesAnOutage: the store cannot be reached when the call
// ends; the outcome is written again until it can, and the task reads
// completed with its result, not executor_lost, and the call ran once.
func TestOutcomeOutlivesAnOutage(t *testing.T) {
	u := &unreachable{}
	f := newFixtureStore(t, 0, func(st store.Tasks) store.Tasks { u.Tasks = st; return u })
	id := f.create("work")
	u.fail.Store(4)
	close(f.release)
	r := f.await(id, "completed")
	if res, _ := r.result["result"].(map[string]any); res == nil {
		t.Errorf("completed task without its result: %s", r.raw)
	}
	if n := u.fail.Load(); n > -1 {
		t.Errorf("%d failing writes left, want every one spent before the outcome was stored", n+1)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("work ran %d times, want 1", n)
	}
}

// TestSettledTasks: a task whose round ran here leaves RunningTasks when
// it settles and is listed by SettledTasks, with its final status, the
// generation and start of that round, its settle time (lastUpdatedAt) and
// its record's expiry, the most recently settled first.
func TestSettledTasks(t *testing.T) {
	f := newFixture(t)
	failed := f.create("crash")
	f.await(failed, "failed")
	cancelled := f.create("work")
	f.post("tasks/cancel", map[string]any{"taskId": cancelled}, true, nil)
	f.await(cancelled, "cancelled")
	deadline := time.Now().Add(10 * time.Second)
	for len(f.h.RunningTasks()) > 0 || len(f.h.SettledTasks()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d running, %d settled; want 0 and 2", len(f.h.RunningTasks()), len(f.h.SettledTasks()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := f.h.SettledTasks()
	for i, want := range []struct {
		id, tool string
		status   tasks.Status
	}{{cancelled, "work", tasks.Cancelled}, {failed, "crash", tasks.Failed}} {
		rec, _, err := f.st.GetTask(context.Background(), want.id)
		if err != nil {
			t.Fatal(err)
		}
		s := got[i]
		if s.ID != want.id || s.Tool != want.tool || s.Status != want.status || s.Generation != 1 ||
			!s.Settled.Equal(rec.Updated) || !s.Expires.Equal(rec.Expires()) || s.Started.IsZero() || s.Started.After(s.Settled) {
			t.Errorf("settled task %d: %+v, want %s %s %s at generation 1, settled %v, expiring %v", i, s, tasks.Prefix(want.id), want.tool, want.status, rec.Updated, rec.Expires())
		}
	}
}

// TestSettledTasksCancelRequested: a task cancelled while it waited for
// input (input_required: no round runs) is settled cancelled by the
// cancel itself; once the round that asked for input ran here, it is
// listed by SettledTasks as a task cancelled on request, as one cancelled
// while its round ran is, with the generation and start of that round.
// A task that settled without a cancel is listed without one.
func TestSettledTasksCancelRequested(t *testing.T) {
	f := newFixture(t)
	waiting := f.create("ask")
	f.await(waiting, "input_required")
	ack := f.post("tasks/cancel", map[string]any{"taskId": waiting}, true, nil)
	if string(ack.raw) != `{"resultType":"complete"}` {
		t.Fatalf("tasks/cancel answered %s %v, want {\"resultType\":\"complete\"}", ack.raw, ack.err)
	}
	if r := f.await(waiting, "cancelled"); r.result["statusMessage"] != "cancelled by the client while waiting for input" {
		t.Errorf("cancelled while waiting for input: %s", r.raw)
	}
	working := f.create("work")
	f.post("tasks/cancel", map[string]any{"taskId": working}, true, nil)
	f.await(working, "cancelled")
	failed := f.create("crash")
	f.await(failed, "failed")
	deadline := time.Now().Add(10 * time.Second)
	for len(f.h.RunningTasks()) > 0 || len(f.h.SettledTasks()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d running, %d settled %+v; want 0 and 3", len(f.h.RunningTasks()), len(f.h.SettledTasks()), f.h.SettledTasks())
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string]taskrun.SettledTask{}
	for _, s := range f.h.SettledTasks() {
		got[s.ID] = s
	}
	for _, want := range []struct {
		id, tool string
		status   tasks.Status
		cancel   bool
	}{{waiting, "ask", tasks.Cancelled, true}, {working, "work", tasks.Cancelled, true}, {failed, "crash", tasks.Failed, false}} {
		rec, _, err := f.st.GetTask(context.Background(), want.id)
		if err != nil {
			t.Fatal(err)
		}
		s, ok := got[want.id]
		if !ok || s.Tool != want.tool || s.Status != want.status || s.CancelRequested != want.cancel || s.Generation != 1 ||
			!s.Settled.Equal(rec.Updated) || !s.Expires.Equal(rec.Expires()) || s.Started.IsZero() || s.Started.After(s.Settled) {
			t.Errorf("settled task %s: %+v (listed %v), want %s %s cancel requested %v at generation 1, settled %v, expiring %v",
				tasks.Prefix(want.id), s, ok, want.tool, want.status, want.cancel, rec.Updated, rec.Expires())
		}
	}
}
