// sessionless_test.go tests what the handler answers itself to requests of
// the sessionless era (MCP-Protocol-Version 2026-07-28): the methods it has
// not, and the headers of the stateful era it ignores.

package transport_test

import (
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// sessionlessEcho is a tools/call of echo as a 2026-07-28 client sends it:
// the request's protocol version, client info and capabilities in _meta.
const sessionlessEcho = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},` +
	`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},` +
	`"io.modelcontextprotocol/clientCapabilities":{}}}}`

// sessionlessRequest returns a request of the sessionless era to st, with
// the headers 2026-07-28 asks for (MCP-Protocol-Version, Mcp-Method,
// Mcp-Name) on a POST of sessionlessEcho.
func sessionlessRequest(t *testing.T, st *stack, method string) *http.Request {
	t.Helper()
	var body []byte
	if method == http.MethodPost {
		body = []byte(sessionlessEcho)
	}
	req, err := st.client.NewRequest(testContext(t), method, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	if method == http.MethodPost {
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "echo")
	}
	return req
}

// TestSessionlessMethods: under 2026-07-28 the endpoint serves POST alone
// (MCP 2026-07-28, basic/transports, "Earlier Streamable HTTP Revisions":
// GET or DELETE answers 405). GET, DELETE and any other method are refused
// 405 method_not_allowed with Allow: POST and a JSON-RPC error body, with
// or without a session's token, and that session is unharmed.
func TestSessionlessMethods(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	live := st.initialize(t, ctx, "")
	cursor := countdown(t, ctx, live, 2, 1, "l")[1].ID
	for _, method := range []string{http.MethodGet, http.MethodDelete, http.MethodPut} {
		for _, token := range []string{"", live.Token} {
			req := sessionlessRequest(t, st, method)
			if token != "" {
				req.Header.Set("Mcp-Session-Id", token)
				req.Header.Set("Last-Event-ID", cursor)
			}
			resp, err := st.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			se := refusalOf(t, resp, http.StatusMethodNotAllowed, "method_not_allowed")
			want := "method " + method + " is not allowed under protocol version 2026-07-28, which has no standalone stream and no sessions: send each request with POST"
			if se.Body.Code != -32600 || se.Body.Message != want || se.Header.Get("Allow") != "POST" {
				t.Errorf("%s (token %v): code %d, message %q, Allow %q; want -32600, %q, POST",
					method, token != "", se.Body.Code, se.Body.Message, se.Header.Get("Allow"), want)
			}
		}
	}
	// The session the refused DELETE named lives on.
	countdown(t, ctx, live, 3, 1, "after")
}

// TestSessionlessIgnoresSessionHeaders: a 2026-07-28 POST that carries
// Mcp-Session-Id (a live session's token, or any value) or Last-Event-ID is
// served as if it did not: the headers are ignored, no session ID is
// echoed or minted, and the session named is untouched (MCP 2026-07-28,
// basic/transports, "Earlier Streamable HTTP Revisions").
func TestSessionlessIgnoresSessionHeaders(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	live := st.initialize(t, ctx, "")
	cursor := countdown(t, ctx, live, 2, 1, "l")[1].ID
	before := st.bounds(t, live.Token)
	for _, tc := range []struct {
		name   string
		header map[string]string
	}{
		{"a live token", map[string]string{"Mcp-Session-Id": live.Token}},
		{"an unknown token", map[string]string{"Mcp-Session-Id": "NEVERISSUED"}},
		{"a malformed token", map[string]string{"Mcp-Session-Id": "a b"}},
		{"Last-Event-ID", map[string]string{"Last-Event-ID": cursor}},
	} {
		req := sessionlessRequest(t, st, http.MethodPost)
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := st.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			se := mcptest.ReadStatusError(resp)
			t.Errorf("%s: HTTP %d %s, want 200", tc.name, se.Status, se.RawBody)
			continue
		}
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			t.Errorf("%s: the answer carries Mcp-Session-Id %q, want none", tc.name, sid)
		}
		msgs, err := mcptest.ReadAnswer(resp)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("%s: %v, %d messages, want the response", tc.name, err, len(msgs))
		}
		r, ok := msgs[0].(*jsonrpc.Response)
		if !ok {
			t.Fatalf("%s: answered %+v, want a response", tc.name, msgs[0])
		}
		if got := toolText(t, r); got != "hi" {
			t.Errorf("%s: echo answered %q, want %q", tc.name, got, "hi")
		}
	}
	// The live session is untouched: no event was added to its log, and it
	// serves on at the same generation.
	if after := st.bounds(t, live.Token); after != before {
		t.Fatalf("the live session's bounds went from %+v to %+v", before, after)
	}
	if c := parseCursor(t, countdown(t, ctx, live, 3, 1, "after")[0].ID); c.Generation != 1 {
		t.Fatalf("generation %d after the sessionless requests, want 1", c.Generation)
	}
}
