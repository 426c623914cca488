package tidemark_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// postSessionless sends one request of protocol 2026-07-28 that declares
// the Tasks extension, and returns the body of its answer.
func postSessionless(t *testing.T, url, method string, params map[string]any) string {
	t.Helper()
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "test", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{tasks.ExtensionID: map[string]any{}}},
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	for _, k := range []string{"name", "taskId"} {
		if v, ok := params[k].(string); ok {
			req.Header.Set("Mcp-Name", v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

// getJSON GETs url and returns its status and body.
func getJSON(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTaskInspector: a Handler serving tasks answers the operator's
// /debug/tasks with the task it runs (the ID's prefix, never the whole
// ID), /debug/tasks/{prefix} with its stored record, and 404 for a prefix
// it does not run; the round's span reaches the Handler's
// TracerProvider.
func TestTaskInspector(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	release := make(chan struct{})
	s := mcp.NewServer(&mcp.Implementation{Name: "inspect-test", Version: "1"}, nil)
	type noArgs struct{}
	mcp.AddTool(s, &mcp.Tool{Name: "work"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
		select {
		case <-release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	h := tidemark.NewHandler(s, &tidemark.Options{
		TracerProvider: tp,
		Tasks:          &tidemark.TaskOptions{Tools: map[string]taskrun.Tool{"work": {Support: tasks.Optional}}},
	})
	mcpSrv := httptest.NewServer(h)
	adminSrv := httptest.NewServer(admin.Handler(admin.Options{Sessions: h, Tasks: h}))
	defer func() {
		adminSrv.Close()
		mcpSrv.Close()
		h.Close()
		tp.Shutdown(context.Background())
		http.DefaultClient.CloseIdleConnections()
	}()

	if code, body := getJSON(t, adminSrv.URL+"/debug/tasks"); code != 200 || body != "{\n  \"count\": 0,\n  \"settled\": 0,\n  \"tasks\": []\n}\n" {
		t.Errorf("/debug/tasks before any task: %d %s", code, body)
	}
	before := time.Now()
	answer := postSessionless(t, mcpSrv.URL, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}})
	var created struct {
		Result struct {
			TaskID string `json:"taskId"`
		} `json:"result"`
	}
	for line := range strings.SplitSeq(answer, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			answer = d
		}
	}
	if err := json.Unmarshal([]byte(answer), &created); err != nil || len(created.Result.TaskID) != 26 {
		t.Fatalf("tools/call work answered %s, want a CreateTaskResult", answer)
	}
	id := created.Result.TaskID
	prefix := tasks.Prefix(id)
	after := time.Now()

	code, body := getJSON(t, adminSrv.URL+"/debug/tasks")
	shown := body
	var list admin.TaskList
	if err := json.Unmarshal([]byte(body), &list); err != nil || code != 200 || list.Count != 1 || len(list.Tasks) != 1 {
		t.Fatalf("/debug/tasks with one task: %d %s", code, body)
	}
	started := list.Tasks[0].Started
	if started.Before(before) || started.After(after) {
		t.Errorf("started %v, want between %v and %v", started, before, after)
	}
	want := admin.Task{Task: prefix, Tool: "work", Generation: 1, Status: "working", Started: started}
	if list.Tasks[0] != want {
		t.Errorf("/debug/tasks: %+v, want %+v", list.Tasks[0], want)
	}

	code, body = getJSON(t, adminSrv.URL+"/debug/tasks/"+prefix[:4])
	var details admin.TaskDetails
	if err := json.Unmarshal([]byte(body), &details); err != nil || code != 200 || len(details.Tasks) != 1 {
		t.Fatalf("/debug/tasks/%s: %d %s", prefix[:4], code, body)
	}
	d := details.Tasks[0]
	wantDetail := admin.TaskDetail{
		Task: prefix, Tool: "work", Generation: 1, Status: "working", Executor: "local",
		Created: d.Created, Updated: d.Created, Expires: d.Created.Add(time.Hour),
		RoundGeneration: 1, RoundStarted: started,
	}
	if d != wantDetail || d.Created.Before(before) || d.Created.After(after) {
		t.Errorf("/debug/tasks/%s: %+v, want %+v", prefix[:4], d, wantDetail)
	}
	if strings.Contains(shown+body, id) {
		t.Errorf("the inspector shows the whole task ID: %s %s", shown, body)
	}
	// A prefix longer than the one shown is refused alike whether it is
	// right or wrong: the lookup confirms no character of the ID beyond
	// those /debug/tasks shows, so the ID cannot be guessed one character
	// at a time.
	wrong := id[:8] + "A"
	if id[8] == 'A' {
		wrong = id[:8] + "B"
	}
	rightCode, rightBody := getJSON(t, adminSrv.URL+"/debug/tasks/"+id[:9])
	wrongCode, wrongBody := getJSON(t, adminSrv.URL+"/debug/tasks/"+wrong)
	wantLonger := "{\n  \"error\": \"a task ID prefix is 8 characters at most, as GET /debug/tasks shows it\"\n}\n"
	if rightCode != http.StatusBadRequest || rightBody != wantLonger || wrongCode != rightCode || wrongBody != rightBody {
		t.Errorf("/debug/tasks/ with 9 characters: right %d %s, wrong %d %s; want both 400 %s", rightCode, rightBody, wrongCode, wrongBody, wantLonger)
	}
	wantMissing := "{\n  \"error\": \"no task this process runs, or ran and settled, has an ID starting with \\\"ZZZZ\\\"; GET /debug/tasks lists them (a task of another replica, or one whose record expired, is not looked up: not every store can be searched by ID prefix)\"\n}\n"
	if code, body := getJSON(t, adminSrv.URL+"/debug/tasks/ZZZZ"); code != 404 || body != wantMissing {
		t.Errorf("/debug/tasks/ZZZZ: %d %s, want 404 %s", code, body, wantMissing)
	}

	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for len(spans.Ended()) == 0 || len(h.RunningTasks()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d spans, %d tasks running", len(spans.Ended()), len(h.RunningTasks()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	var rounds []string
	for _, sp := range spans.Ended() {
		if sp.Name() != "task round" {
			continue
		}
		line := ""
		for _, kv := range sp.Attributes() {
			line += " " + string(kv.Key) + "=" + kv.Value.String()
		}
		if l := sp.Links(); len(l) == 1 {
			line += " link=" + l[0].SpanContext.TraceID().String()
		}
		rounds = append(rounds, line)
	}
	wantRound := " tidemark.task=" + prefix + " tidemark.generation=1 gen_ai.tool.name=work gen_ai.operation.name=execute_tool tidemark.task.status=completed link=4bf92f3577b34da6a3ce929d0e0e4736"
	if len(rounds) != 1 || rounds[0] != wantRound {
		t.Errorf("round spans %q, want [%q]", rounds, wantRound)
	}
	// Settled, the task is still listed, with its final status, while its
	// record is kept; looking it up reads that record.
	code, body = getJSON(t, adminSrv.URL+"/debug/tasks")
	var settled struct {
		Count   int              `json:"count"`
		Settled int              `json:"settled"`
		Tasks   []map[string]any `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(body), &settled); err != nil || code != 200 || settled.Count != 0 || settled.Settled != 1 ||
		len(settled.Tasks) != 1 || settled.Tasks[0]["task"] != prefix || settled.Tasks[0]["status"] != "completed" || settled.Tasks[0]["settled"] == nil {
		t.Errorf("/debug/tasks once the task completed: %d %s, want count 0, settled 1: task %s completed", code, body, prefix)
	}
	code, body = getJSON(t, adminSrv.URL+"/debug/tasks/"+prefix)
	details = admin.TaskDetails{}
	if err := json.Unmarshal([]byte(body), &details); err != nil || code != 200 || len(details.Tasks) != 1 ||
		details.Tasks[0].Status != "completed" || details.Tasks[0].Task != prefix || details.Tasks[0].RoundGeneration != 1 || details.Tasks[0].RoundStarted != started {
		t.Errorf("/debug/tasks/%s once the task completed: %d %s, want 200 with its record, completed", prefix, code, body)
	}
}

// TestInspectorShowsHibernated: of two sessions, one hibernated and one
// live (its standalone stream read), /debug/sessions counts both, says
// which is hibernated and how long it has been idle, and lists it after
// the live one; /debug/sessions/{prefix} finds the hibernated one with
// the bounds of its log it had live, no owner and no lease. Inspecting
// wakes nothing: the session is still hibernated after, and the next call
// wakes it.
func TestInspectorShowsHibernated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := testenv.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	h, c, ops := hibernatingInspector(t, clk, nil)
	dormant, _, _ := callHoldingCursor(t, ctx, c)
	live, _, _ := callHoldingCursor(t, ctx, c)
	standalone, err := live.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer standalone.Close()
	if _, err := standalone.Next(); err != nil { // its priming event: the reader is attached
		t.Fatal(err)
	}
	d, l := dormant.Token[:8], live.Token[:8]
	var before admin.Details
	if code, body := getJSON(t, ops.URL+"/debug/sessions/"+d); code != http.StatusOK || json.Unmarshal([]byte(body), &before) != nil || len(before.Sessions) != 1 {
		t.Fatalf("/debug/sessions/%s while live: %d %s", d, code, body)
	}

	sweepUntilHibernated(t, ctx, h, clk, 1)

	want := `{
  "count": 2,
  "hibernated": 1,
  "sessions": [
    {
      "session": "` + l + `",
      "state": "live",
      "generation": 1,
      "calls_in_flight": 0,
      "readers": 1,
      "idle_seconds": 0
    },
    {
      "session": "` + d + `",
      "state": "hibernated",
      "generation": 1,
      "calls_in_flight": 0,
      "readers": 0,
      "idle_seconds": 120
    }
  ]
}
`
	if code, body := getJSON(t, ops.URL+"/debug/sessions"); code != http.StatusOK || body != want {
		t.Errorf("/debug/sessions: %d\n%s\nwant 200\n%s", code, body, want)
	}
	// The bounds of its log are those it had live: initialize's priming
	// event and answer, the echo stream's priming event and answer.
	wantDetail := admin.Detail{
		Summary:         admin.Summary{Session: d, State: admin.StateHibernated, Generation: 1, IdleSeconds: 120},
		ProtocolVersion: "2025-11-25",
		ReplayFloor:     1, HighWaterMark: 4, Events: 4, Bytes: before.Sessions[0].Bytes,
		Owner: "", Created: before.Sessions[0].Created, Streams: []admin.Stream{},
	}
	if b := before.Sessions[0]; b.HighWaterMark != 4 || b.Events != 4 || b.Bytes <= 0 {
		t.Errorf("while live: %+v, want high-water mark 4, 4 events and their bytes", b)
	}
	for range 2 { // the second look finds it hibernated still
		var after admin.Details
		code, body := getJSON(t, ops.URL+"/debug/sessions/"+d)
		if code != http.StatusOK || json.Unmarshal([]byte(body), &after) != nil || len(after.Sessions) != 1 || !reflect.DeepEqual(after.Sessions[0], wantDetail) {
			t.Fatalf("/debug/sessions/%s: %d %s\nwant one session %+v", d, code, body, wantDetail)
		}
	}
	if n, hib := h.Registry().Len(), h.Registry().Hibernated(); n != 1 || hib != 1 {
		t.Fatalf("after inspecting: %d live sessions, %d hibernated; want 1 and 1 (nothing woken)", n, hib)
	}

	st, err := dormant.Call(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "after"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	st.Collect()
	st.Close()
	want = `{
  "count": 2,
  "hibernated": 0,
  "sessions": [
`
	if code, body := getJSON(t, ops.URL+"/debug/sessions"); code != http.StatusOK || !strings.HasPrefix(body, want) || strings.Contains(body, `"hibernated",`) {
		t.Errorf("/debug/sessions after the wake: %d\n%s\nwant 2 live sessions", code, body)
	}
}

// TestInspectorCountsWhatItLists: of two sessions this process
// hibernated, one another replica has woken since (its record held by
// owner b): /debug/sessions neither lists nor counts that one, so its
// count and hibernated figures are those of the sessions it lists.
func TestInspectorCountsWhatItLists(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := testenv.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	st := memory.New(memory.Options{Now: clk.Now})
	h, c, ops := hibernatingInspector(t, clk, st)
	woken, _, _ := callHoldingCursor(t, ctx, c)
	dormant, _, _ := callHoldingCursor(t, ctx, c)
	sweepUntilHibernated(t, ctx, h, clk, 2)
	if _, err := st.Wake(ctx, woken.Token, "b", 1, clk.Now().Add(time.Minute)); err != nil {
		t.Fatalf("replica b's wake: %v", err)
	}
	code, body := getJSON(t, ops.URL+"/debug/sessions")
	var got admin.List
	if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("/debug/sessions: %d %s", code, body)
	}
	// It hibernated at the first sweep that found its request over:
	// idle for a whole number of the sweeps' 2 minutes.
	if len(got.Sessions) == 1 && got.Sessions[0].IdleSeconds > 0 && int(got.Sessions[0].IdleSeconds)%120 == 0 {
		got.Sessions[0].IdleSeconds = 0
	}
	want := admin.List{Count: 1, Hibernated: 1, Sessions: []admin.Summary{
		{Session: dormant.Token[:8], State: admin.StateHibernated, Generation: 1},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("/debug/sessions: %s\nwant count 1, hibernated 1, and %s alone, hibernated at generation 1, idle a multiple of 120 s", body, dormant.Token[:8])
	}
}

// TestSessionLookupRevealsOnlyThePrefix: /debug/sessions/{prefix} answers
// a prefix of the 8 characters /debug/sessions shows, and refuses a
// longer one with the same 400 whether it continues the token rightly or
// not, so the token cannot be guessed one character at a time.
func TestSessionLookupRevealsOnlyThePrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := tidemark.NewHandler(demo.NewServer(), nil)
	srv := httptest.NewServer(h)
	hc := &http.Client{}
	ops := httptest.NewServer(admin.Handler(admin.Options{Sessions: h}))
	defer func() {
		ops.Close()
		hc.CloseIdleConnections()
		srv.Close()
		h.Close()
		http.DefaultClient.CloseIdleConnections()
	}()
	s, err := (&mcptest.Client{URL: srv.URL, HTTP: hc}).Initialize(ctx, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	tok := s.Token
	if code, body := getJSON(t, ops.URL+"/debug/sessions/"+tok[:8]); code != http.StatusOK || strings.Contains(body, tok) {
		t.Errorf("/debug/sessions/%s: %d %s, want 200 without the whole token", tok[:8], code, body)
	}
	wrong := tok[:8] + "A"
	if tok[8] == 'A' {
		wrong = tok[:8] + "B"
	}
	want := "{\n  \"error\": \"a session token prefix is 8 characters at most, as GET /debug/sessions shows it\"\n}\n"
	for _, p := range []string{tok[:9], wrong, tok} {
		if code, body := getJSON(t, ops.URL+"/debug/sessions/"+p); code != http.StatusBadRequest || body != want {
			t.Errorf("/debug/sessions/ with %d characters: %d %s, want 400 %s", len(p), code, body, want)
		}
	}
}

// hibernatingInspector serves the demo server on st (nil: a memory store
// of its own), its sessions restorable and hibernating after a minute of
// clk's time, swept only by the test; it returns the handler, a client of
// it and its inspector's server, all closed when t ends.
func hibernatingInspector(t *testing.T, clk *testenv.Clock, st store.Store) (*tidemark.Handler, *mcptest.Client, *httptest.Server) {
	t.Helper()
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Store:         st,
		Restorable:    true,
		Sessions:      session.Options{HibernateAfter: time.Minute, Now: clk.Now, Logger: slog.New(slog.DiscardHandler)},
		SweepInterval: time.Hour, // the test sweeps
	})
	srv := httptest.NewServer(h)
	hc := &http.Client{}
	ops := httptest.NewServer(admin.Handler(admin.Options{Sessions: h}))
	t.Cleanup(func() {
		ops.Close()
		hc.CloseIdleConnections()
		srv.Close()
		h.Close()
	})
	return h, &mcptest.Client{URL: srv.URL, HTTP: hc}, ops
}

// sweepUntilHibernated sweeps h's sessions, 2 minutes of clk apart, until
// n are hibernated: a request whose handler has not returned yet holds its
// session, which is idle from then on, so one sweep may not be enough.
func sweepUntilHibernated(t *testing.T, ctx context.Context, h *tidemark.Handler, clk *testenv.Clock, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); h.Registry().Hibernated() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions hibernated after 10 s of sweeps, want %d", h.Registry().Hibernated(), n)
		}
		clk.Advance(2 * time.Minute)
		h.Registry().Sweep(ctx)
	}
}
