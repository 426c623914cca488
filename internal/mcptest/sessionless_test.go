package mcptest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

func TestSessionlessBody(t *testing.T) {
	params := map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}}
	got := string(mcptest.SessionlessBody(3, "tools/call", params, map[string]any{"extensions": map[string]any{}}))
	want := `{"id":3,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{}},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},` +
		`"arguments":{"text":"x"},"name":"echo"}}`
	if got != want {
		t.Fatalf("SessionlessBody = %s, want %s", got, want)
	}
	if _, ok := params["_meta"]; ok || len(params) != 2 {
		t.Fatalf("SessionlessBody changed its params: %v", params)
	}
	got = string(mcptest.SessionlessBody(2, "server/discover", nil, nil))
	want = `{"id":2,"jsonrpc":"2.0","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	if got != want {
		t.Fatalf("SessionlessBody without params = %s, want %s", got, want)
	}
}

// TestListen: Listen sends the headers of a 2026-07-28 listen and leaves
// its reader after the acknowledgment; a refusal is a *StatusError, and a
// stream that ends unacknowledged an error.
func TestListen(t *testing.T) {
	const ack = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\"}\n\n"
	answers := map[string]func(http.ResponseWriter){
		"/ok": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, ": before\n\n"+ack+": after\n\n")
		},
		"/refused": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"m"}}`)
		},
		"/unacknowledged": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, ": only\n\n")
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header
		if r.Method != http.MethodPost || h.Get("Content-Type") != "application/json" || h.Get("Accept") != "application/json, text/event-stream" ||
			h.Get("MCP-Protocol-Version") != "2026-07-28" || h.Get("Mcp-Method") != "subscriptions/listen" {
			http.Error(w, "headers", http.StatusTeapot)
			return
		}
		answers[r.URL.Path](w)
	}))
	defer srv.Close()
	ctx := context.Background()
	body := mcptest.SessionlessBody(7, "subscriptions/listen", nil, nil)

	resp, br, err := (&mcptest.Client{URL: srv.URL + "/ok"}).Listen(ctx, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "\n: after\n\n" {
		t.Fatalf("after the acknowledgment: %q, %v; want %q", rest, err, "\n: after\n\n")
	}

	_, _, err = (&mcptest.Client{URL: srv.URL + "/refused"}).Listen(ctx, body)
	if se, ok := mcptest.AsStatusError(err); !ok || se.Status != http.StatusBadRequest || se.Body == nil || se.Body.Code != -32602 {
		t.Fatalf("refused listen: %v, want a *StatusError 400 -32602", err)
	}

	_, _, err = (&mcptest.Client{URL: srv.URL + "/unacknowledged"}).Listen(ctx, body)
	if _, ok := mcptest.AsStatusError(err); err == nil || ok {
		t.Fatalf("unacknowledged listen: %v, want a read error", err)
	}
}
