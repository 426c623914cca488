package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// declaration is the _meta of a request that declares the Tasks extension.
var declaration = map[string]any{
	"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
	"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "test", "version": "1"},
	"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{tasks.ExtensionID: map[string]any{}}},
}

// TestServeTasksStayOutOf20251125: a 2025-11-25 session of `tidemark
// serve` is offered neither the Tasks extension nor the experimental
// 2025-11-25 tasks, and countdown answers with a plain result even when
// the call's _meta declares the extension: SEP-2663 forbids reading it
// there (DESIGN.md, "Tasks: the executor rule").
func TestServeTasksStayOutOf20251125(t *testing.T) {
	endpoint := startTidemarkServe(t)
	c := &mcptest.Client{URL: endpoint}
	s, err := c.Initialize(t.Context(), "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	var init struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(s.Result, &init); err != nil {
		t.Fatal(err)
	}
	if _, ok := init.Capabilities["tasks"]; ok {
		t.Errorf("initialize offers capabilities.tasks: %s", s.Result)
	}
	if strings.Contains(string(init.Capabilities["extensions"]), tasks.ExtensionID) {
		t.Errorf("initialize offers the extension: %s", s.Result)
	}
	call := mcptest.MustCall(2, "tools/call", map[string]any{
		"name": "countdown", "arguments": map[string]any{"n": 1, "delay_ms": 1}, "_meta": declaration,
	})
	stream, err := s.Call(t.Context(), call)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	events, err := stream.Until(func(e mcptest.Event) bool { return e.IsResponseTo(call.ID) })
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := events[len(events)-1].Response()
	if resp == nil || resp.Error != nil || !strings.Contains(string(resp.Result), "countdown of 1 finished") || strings.Contains(string(resp.Result), "taskId") {
		t.Errorf("countdown in a 2025-11-25 session answered %+v, want the plain result", resp)
	}
}

// TestServeCountdownAsTask: in the sessionless era countdown runs as a
// task for a request that declares the extension, and tasks/get shows its
// result once it completed.
func TestServeCountdownAsTask(t *testing.T) {
	endpoint := startTidemarkServe(t)
	created := sessionless(t, endpoint, "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": 2, "delay_ms": 50}, "_meta": declaration})
	id, _ := created["taskId"].(string)
	if created["resultType"] != "task" || id == "" {
		t.Fatalf("countdown answered %v, want a CreateTaskResult", created)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := sessionless(t, endpoint, "tasks/get", map[string]any{"taskId": id, "_meta": declaration})
		if got["status"] == "completed" {
			if !strings.Contains(string(mustMarshal(t, got["result"])), "countdown of 2 finished") {
				t.Errorf("completed task's result %v", got["result"])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still %v after 10 s", got["status"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sessionless POSTs one request of protocol 2026-07-28 and returns its
// result.
func sessionless(t *testing.T, endpoint, method string, params map[string]any) map[string]any {
	t.Helper()
	body := mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if n, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", n)
	}
	if n, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", n)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	msgs, err := mcptest.DecodeJSON(data)
	if err != nil || len(msgs) != 1 {
		for line := range strings.SplitSeq(string(data), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				msgs, err = mcptest.DecodeJSON([]byte(d))
			}
		}
	}
	if err != nil || len(msgs) == 0 {
		t.Fatalf("%s: answer %d %q: %v", method, resp.StatusCode, data, err)
	}
	r, ok := msgs[0].(*jsonrpc.Response)
	if !ok || r.Error != nil {
		t.Fatalf("%s: answer %q, want a result", method, data)
	}
	var out map[string]any
	json.Unmarshal(r.Result, &out)
	return out
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
