// sessionlessbody_test.go tests the bodies the handler refuses in the
// sessionless era (MCP-Protocol-Version 2026-07-28) before the go-sdk's
// handler reads them: each answer, and that no tool runs.

package transport_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// sessionlessMeta is the _meta a 2026-07-28 request carries.
const sessionlessMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

// tallyCall is the body of a 2026-07-28 tools/call of tally whose id is
// written as id, verbatim.
func tallyCall(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"tally","arguments":{},"_meta":` + sessionlessMeta + `}}`
}

// addTally adds to server the tool tally, which counts its runs in runs.
func addTally(server *mcp.Server, runs *atomic.Int64) {
	mcp.AddTool(server, &mcp.Tool{Name: "tally"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "counted"}}}, nil, nil
	})
}

// sessionlessBodyCase is a body sent in the sessionless era and the
// refusal it gets: HTTP status, JSON-RPC code, reason and id (its JSON).
// stateful says a session's POST of the same body is refused alike.
type sessionlessBodyCase struct {
	name     string
	body     string
	header   map[string]string // set on the request; "" deletes
	status   int
	code     int64
	reason   string
	id       string
	stateful bool
}

// TestSessionlessBodyRefusals: the bodies a newcomer sent under
// 2026-07-28 (nc14, findings 3 and 4) are refused before any tool runs,
// with a JSON-RPC error body and its reason. The failing inputs: ids the
// go-sdk's decoder rounds or clamps (2^53+1 answered as 2^53,
// 18446744073709551617 as -2^63, 1e3 as 1000, 1.0 and 1.5 as 1) ran the
// tool and answered under another id; the other bodies got the go-sdk's
// plain-text 400, or its JSON-RPC error (-32020, 404 -32601), with no
// reason. Where stateful is set, a session's POST of the same body gets
// the same status, code and reason.
func TestSessionlessBodyRefusals(t *testing.T) {
	ctx := testContext(t)
	var runs atomic.Int64
	server := demo.NewServer()
	addTally(server, &runs)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")

	invalid := func(name, id string) sessionlessBodyCase {
		return sessionlessBodyCase{name: name, body: tallyCall(id), status: 400, code: -32600, reason: "invalid_request", id: "null", stateful: true}
	}
	invalidBody := func(name, body string) sessionlessBodyCase {
		return sessionlessBodyCase{name: name, body: body, status: 400, code: -32600, reason: "invalid_request", id: "null", stateful: true}
	}
	mismatch := func(name, header, value string) sessionlessBodyCase {
		return sessionlessBodyCase{name: name, body: tallyCall("1"), header: map[string]string{header: value},
			status: 400, code: -32020, reason: "header_mismatch", id: "1"}
	}
	cases := []sessionlessBodyCase{
		// Finding 3: ids the decoder would alter.
		invalid("id 2^53+1", "9007199254740993"),
		invalid("id -(2^53+1)", "-9007199254740993"),
		invalid("id 2^64+1", "18446744073709551617"),
		invalid("id 1e3", "1e3"),
		invalid("id 1.0", "1.0"),
		invalid("id 1.5", "1.5"),
		// Finding 4: the go-sdk's plain-text 400s.
		invalid("id true", "true"),
		invalid("id {}", "{}"),
		invalid("id []", "[]"),
		invalid("id null", "null"),
		{name: "invalid JSON", body: `{"jsonrpc":`, status: 400, code: -32700, reason: "parse_error", id: "null", stateful: true},
		{name: "empty body", body: "", status: 400, code: -32700, reason: "parse_error", id: "null", stateful: true},
		{name: "nesting 1001", body: strings.Replace(tallyCall("1"), `"arguments":{}`, `"arguments":{"z":`+strings.Repeat("[", 999)+strings.Repeat("]", 999)+`}`, 1),
			status: 400, code: -32700, reason: "parse_error", id: "null", stateful: true},
		{name: "UTF-8 BOM", body: "\ufeff" + tallyCall("1"), status: 400, code: -32700, reason: "parse_error", id: "null", stateful: true},
		{name: "jsonrpc 1.0", body: strings.Replace(tallyCall("1"), `"2.0"`, `"1.0"`, 1), status: 400, code: -32600, reason: "invalid_request", id: "null", stateful: true},
		{name: "no jsonrpc", body: strings.Replace(tallyCall("1"), `"jsonrpc":"2.0",`, "", 1), status: 400, code: -32600, reason: "invalid_request", id: "null", stateful: true},
		{name: "top-level string", body: `"x"`, status: 400, code: -32600, reason: "invalid_request", id: "null", stateful: true},
		{name: "top-level null", body: `null`, status: 400, code: -32600, reason: "invalid_request", id: "null", stateful: true},
		{name: "method a number", body: `{"jsonrpc":"2.0","id":1,"method":5}`, header: map[string]string{"Mcp-Method": "5", "Mcp-Name": ""},
			status: 400, code: -32600, reason: "invalid_request", id: "null", stateful: true},
		{name: "response without id", body: `{"jsonrpc":"2.0","result":{}}`, header: map[string]string{"Mcp-Method": "", "Mcp-Name": ""},
			status: 400, code: -32600, reason: "invalid_request", id: "null", stateful: true},
		{name: "response with result and error", body: `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`, header: map[string]string{"Mcp-Method": "", "Mcp-Name": ""},
			status: 400, code: -32600, reason: "invalid_request", id: "null", stateful: true},
		// Finding 7: a routed member sent twice, which the go-sdk's
		// decoder takes the last of and an intermediary may take the
		// first of, past the Mcp-Method and Mcp-Name checks.
		invalidBody("id twice", `{"jsonrpc":"2.0","id":16,"id":17,"method":"tools/call","params":{"name":"tally","arguments":{},"_meta":`+sessionlessMeta+`}}`),
		invalidBody("method twice", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"tally","arguments":{},"_meta":`+sessionlessMeta+`}}`),
		invalidBody("jsonrpc twice", `{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tally","arguments":{},"_meta":`+sessionlessMeta+`}}`),
		invalidBody("params twice", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"params":{"name":"tally","arguments":{},"_meta":`+sessionlessMeta+`}}`),
		invalidBody("params.name twice", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"tally","arguments":{},"_meta":`+sessionlessMeta+`}}`),
		invalidBody("method twice, one escaped", `{"jsonrpc":"2.0","id":1,"method":"tools/list","\u006dethod":"tools/call","params":{"name":"tally","arguments":{},"_meta":`+sessionlessMeta+`}}`),
		// Finding 4: the go-sdk's own refusals, without a reason. The
		// routing headers' (MCP 2026-07-28, basic/transports, "Server
		// Validation": 400 and -32020) and an unknown method's (ibid.,
		// "Protocol Version Header": 404 and -32601) keep the
		// specification's status and code; the stateful era answers a
		// notification's method with an id, and an unknown method, with
		// -32600 and -32601 on a call's stream.
		mismatch("no Mcp-Method", "Mcp-Method", ""),
		mismatch("Mcp-Method another method", "Mcp-Method", "tools/list"),
		mismatch("no Mcp-Name", "Mcp-Name", ""),
		mismatch("Mcp-Name another tool", "Mcp-Name", "echo"),
		{name: "unknown method", body: `{"jsonrpc":"2.0","id":1,"method":"nope/nope","params":{"_meta":` + sessionlessMeta + `}}`,
			header: map[string]string{"Mcp-Method": "nope/nope", "Mcp-Name": ""}, status: 404, code: -32601, reason: "method_not_found", id: "1"},
		{name: "notification with an id", body: `{"jsonrpc":"2.0","id":3,"method":"notifications/cancelled","params":{"requestId":1,"_meta":` + sessionlessMeta + `}}`,
			header: map[string]string{"Mcp-Method": "notifications/cancelled", "Mcp-Name": ""}, status: 400, code: -32600, reason: "invalid_request", id: "3"},
		{name: "call without an id", body: strings.Replace(tallyCall("1"), `"id":1,`, "", 1), status: 400, code: -32600, reason: "invalid_request", id: "null"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := st.client.NewRequest(ctx, http.MethodPost, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("MCP-Protocol-Version", "2026-07-28")
			req.Header.Set("Mcp-Method", "tools/call")
			req.Header.Set("Mcp-Name", "tally")
			for k, v := range tc.header {
				if v == "" {
					req.Header.Del(k)
				} else {
					req.Header.Set(k, v)
				}
			}
			checkBodyRefusal(t, st, req, tc)
			if tc.stateful {
				req, err := s.NewRequest(ctx, http.MethodPost, []byte(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				checkBodyRefusal(t, st, req, tc)
			}
		})
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("tally ran %d times for refused requests, want 0", n)
	}
	// The tool runs when its call is well formed, a member no one routes
	// on repeated in its _meta: the count can move.
	resp, err := st.client.Do(func() *http.Request {
		body := strings.Replace(tallyCall("9007199254740992"), `"_meta":{`, `"_meta":{"k":1,"k":2,`, 1)
		req, _ := st.client.NewRequest(ctx, http.MethodPost, []byte(body))
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "tally")
		return req
	}())
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := firstResponse(msgs); !ok || r.ID.Raw() != int64(9007199254740992) || toolText(t, r) != "counted" {
		t.Errorf("call of id 2^53: answer %v, want the result of tally under id 9007199254740992", msgs)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("tally ran %d times after one call, want 1", n)
	}
}

// checkBodyRefusal sends req and checks that it is refused as tc says.
func checkBodyRefusal(t *testing.T, st *stack, req *http.Request, tc sessionlessBodyCase) {
	t.Helper()
	resp, err := st.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	se := mcptest.ReadStatusError(resp)
	era := "2026-07-28"
	if req.Header.Get("Mcp-Session-Id") != "" {
		era = "session"
	}
	if se.Body == nil || se.Status != tc.status || se.Body.Code != tc.code || se.Reason() != tc.reason || string(se.Body.ID) != tc.id {
		t.Fatalf("%s: got HTTP %d %q %q, want HTTP %d code %d reason %s id %s", era, se.Status, se.Header.Get("Content-Type"), se.RawBody, tc.status, tc.code, tc.reason, tc.id)
	}
	if ct := se.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q, want application/json", era, ct)
	}
}
