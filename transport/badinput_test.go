// badinput_test.go sends hostile and malformed requests and checks that
// each gets its exact refusal and leaves the session working.

package transport_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/transport"
)

// badInputBodyLimit is the MaxBodyBytes of the bad-input stack, in bytes.
const badInputBodyLimit = 8 << 10

// TestBadInput sends one bad request per case and checks the exact status,
// reason and JSON-RPC code; that the refusal changed nothing in the
// session's log (its bounds are identical); and that the same session then
// still works: a countdown call succeeds and a resume of it replays.
func TestBadInput(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{Transport: transport.Options{MaxBodyBytes: badInputBodyLimit}}, nil)
	s := st.initialize(t, ctx, "")
	other := st.initialize(t, ctx, "") // another session, for its cursors
	otherEvs := countdown(t, ctx, other, 2, 1, "o")
	old := st.initialize(t, ctx, "2025-06-18")   // batches are refused from 2025-06-18 on
	v0326 := st.initialize(t, ctx, "2025-03-26") // takes batches; sends no MCP-Protocol-Version
	evs := countdown(t, ctx, s, 2, 2, "p")
	cursor := evs[1].ID // a valid cursor of s
	callID := int64(100)

	echo := func(id int64) []byte {
		b, err := mcptest.Encode(mcptest.ToolCall(id, "echo", map[string]any{"text": "x"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	post := func(body []byte) func(*mcptest.Session) *http.Request {
		return func(s *mcptest.Session) *http.Request {
			req, _ := s.NewRequest(ctx, http.MethodPost, body)
			return req
		}
	}
	del := func() func(*mcptest.Session) *http.Request {
		return func(s *mcptest.Session) *http.Request {
			req, _ := s.NewRequest(ctx, http.MethodDelete, nil)
			return req
		}
	}
	get := func(lastEventID ...string) func(*mcptest.Session) *http.Request {
		return func(s *mcptest.Session) *http.Request {
			req, _ := s.NewRequest(ctx, http.MethodGet, nil)
			for _, v := range lastEventID {
				req.Header.Add("Last-Event-ID", v)
			}
			return req
		}
	}
	with := func(mk func(*mcptest.Session) *http.Request, change func(*http.Request)) func(*mcptest.Session) *http.Request {
		return func(s *mcptest.Session) *http.Request {
			req := mk(s)
			change(req)
			return req
		}
	}

	cases := []struct {
		name    string
		session *mcptest.Session // nil: s
		req     func(*mcptest.Session) *http.Request
		status  int
		reason  string
		code    int64
		id      string // the refusal's id as JSON; "": null
		check   func(t *testing.T, se *mcptest.StatusError)
	}{
		// Mcp-Session-Id
		{name: "POST without Mcp-Session-Id", req: with(post(echo(1)), func(r *http.Request) { r.Header.Del("Mcp-Session-Id") }),
			status: 400, reason: "session_required", code: -32600},
		{name: "GET without Mcp-Session-Id", req: with(get(), func(r *http.Request) { r.Header.Del("Mcp-Session-Id") }),
			status: 400, reason: "session_required", code: -32600},
		{name: "DELETE without Mcp-Session-Id", req: func(s *mcptest.Session) *http.Request {
			req, _ := s.NewRequest(ctx, http.MethodDelete, nil)
			req.Header.Del("Mcp-Session-Id")
			return req
		}, status: 400, reason: "session_required", code: -32600},
		{name: "duplicated Mcp-Session-Id on POST", req: with(post(echo(1)), func(r *http.Request) { r.Header.Add("Mcp-Session-Id", s.Token) }),
			status: 400, reason: "session_id_invalid", code: -32600},
		{name: "duplicated Mcp-Session-Id on GET", req: with(get(cursor), func(r *http.Request) { r.Header.Add("Mcp-Session-Id", s.Token) }),
			status: 400, reason: "session_id_invalid", code: -32600},
		{name: "duplicated Mcp-Session-Id on DELETE", req: func(s *mcptest.Session) *http.Request {
			req, _ := s.NewRequest(ctx, http.MethodDelete, nil)
			req.Header.Add("Mcp-Session-Id", s.Token)
			return req
		}, status: 400, reason: "session_id_invalid", code: -32600},
		{name: "Mcp-Session-Id of 129 bytes", req: with(post(echo(1)), func(r *http.Request) {
			r.Header.Set("Mcp-Session-Id", s.Token+strings.Repeat("A", 129-len(s.Token)))
		}), status: 400, reason: "session_id_invalid", code: -32600},
		{name: "Mcp-Session-Id of 128 bytes (unknown)", req: with(post(echo(1)), func(r *http.Request) {
			r.Header.Set("Mcp-Session-Id", s.Token+strings.Repeat("A", 128-len(s.Token)))
		}), status: 404, reason: "session_not_found", code: -32001},
		{name: "Mcp-Session-Id with a non-ASCII byte", req: with(post(echo(1)), func(r *http.Request) {
			r.Header.Set("Mcp-Session-Id", s.Token[:10]+"\xff"+s.Token[11:])
		}), status: 400, reason: "session_id_invalid", code: -32600},

		// Last-Event-ID
		{name: "empty Last-Event-ID", req: get(""), status: 400, reason: "cursor_malformed", code: -32600},
		{name: "Last-Event-ID of 10 KB", req: get(cursor + strings.Repeat("9", 10<<10)), status: 400, reason: "cursor_malformed", code: -32600,
			check: func(t *testing.T, se *mcptest.StatusError) {
				// The message quotes a bounded prefix of the value, never all of it.
				if len(se.RawBody) > 2<<10 {
					t.Fatalf("refusal body is %d bytes: it echoes the 10 KB value", len(se.RawBody))
				}
			}},
		{name: "Last-Event-ID with a tab", req: get(strings.Replace(cursor, "-", "\t-", 1)), status: 400, reason: "cursor_malformed", code: -32600},
		{name: "Last-Event-ID with a byte above 0x7f", req: get(cursor + "\xff"), status: 400, reason: "cursor_malformed", code: -32600},
		{name: "negative Last-Event-ID", req: get("-1"), status: 400, reason: "cursor_malformed", code: -32600},
		{name: "cursor with a negative sequence", req: get(cursorOf(s, 1, 3, 4)[:len(cursorOf(s, 1, 3, 4))-1] + "-4"), status: 400, reason: "cursor_malformed", code: -32600},
		{name: "cursor with an overflowing sequence", req: get(cursorOf(s, 1, 3, 1) + "8446744073709551616"), status: 400, reason: "cursor_malformed", code: -32600},
		{name: "cursor with an overflowing generation", req: get(fmt.Sprintf("%s-4294967297-3-4", cursor[:8])), status: 400, reason: "cursor_malformed", code: -32600},
		{name: "cursor with an overflowing stream", req: get(fmt.Sprintf("%s-1-99999999999999999999-4", cursor[:8])), status: 400, reason: "cursor_malformed", code: -32600},
		{name: "another session's cursor", req: get(otherEvs[1].ID), status: 400, reason: "cursor_malformed", code: -32600},
		{name: "repeated Last-Event-ID", req: get(cursor, cursor), status: 400, reason: "cursor_malformed", code: -32600},

		// Media types, bodies, versions, methods
		{name: "GET without Accept text/event-stream", req: with(get(), func(r *http.Request) { r.Header.Set("Accept", "application/json") }),
			status: 406, reason: "not_acceptable", code: -32600},
		{name: "resume without Accept text/event-stream", req: with(get(cursor), func(r *http.Request) { r.Header.Del("Accept") }),
			status: 406, reason: "not_acceptable", code: -32600},
		{name: "POST accepting both with q=0", req: with(post(echo(1)), func(r *http.Request) {
			r.Header.Set("Accept", "application/json;q=0, text/event-stream;q=0")
		}), status: 406, reason: "not_acceptable", code: -32600},
		{name: "POST accepting */* but text/event-stream with q=0", req: with(post(echo(1)), func(r *http.Request) {
			r.Header.Set("Accept", "*/*, text/event-stream; q=0.0")
		}), status: 406, reason: "not_acceptable", code: -32600},
		{name: "POST accepting only application/json", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Accept", "application/json") }),
			status: 406, reason: "not_acceptable", code: -32600},
		{name: "batch under 2025-06-18", session: old, req: post([]byte(`[` + string(echo(1)) + `,` + string(echo(2)) + `]`)),
			status: 400, reason: "batch_not_allowed", code: -32600},
		{name: "batch without MCP-Protocol-Version on a 2025-11-25 session", req: with(post([]byte(`[`+string(echo(1))+`,`+string(echo(2))+`]`)), func(r *http.Request) { r.Header.Del("Mcp-Protocol-Version") }),
			status: 400, reason: "batch_not_allowed", code: -32600},
		{name: "batch claiming 2025-03-26 on a 2025-11-25 session", req: with(post([]byte(`[`+string(echo(1))+`,`+string(echo(2))+`]`)), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2025-03-26") }),
			status: 400, reason: "batch_not_allowed", code: -32600},
		{name: "initialize alone in a batch", req: with(post([]byte(`[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}]`)),
			func(r *http.Request) { r.Header.Del("Mcp-Protocol-Version") }),
			status: 400, reason: "invalid_request", code: -32600},
		{name: "batch under 2025-11-25", req: post([]byte(`[` + string(echo(1)) + `,` + string(echo(2)) + `]`)),
			status: 400, reason: "batch_not_allowed", code: -32600},
		{name: "invalid JSON", req: post([]byte(`{"jsonrpc":"2.0","id":1,"method":`)), status: 400, reason: "parse_error", code: -32700},
		{name: "empty body", req: post([]byte{}), status: 400, reason: "parse_error", code: -32700},
		{name: "JSON that is not JSON-RPC", req: post([]byte(`{"hello":"world"}`)), status: 400, reason: "invalid_request", code: -32600},
		{name: "body over the limit", req: post([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` +
			strings.Repeat("x", badInputBodyLimit) + `"}}}`)), status: 413, reason: "body_too_large", code: -32600},
		{name: "unsupported protocol version", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2024-10-07") }),
			status: 400, reason: "protocol_version", code: -32022, id: "1",
			check: wantUnsupported(`unsupported MCP-Protocol-Version "2024-10-07": this server serves 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05`,
				"2024-10-07", served...)},
		{name: "protocol version that is not a date", req: with(get(cursor), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "latest") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`MCP-Protocol-Version "latest" is not a protocol version (YYYY-MM-DD): this server serves 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05`,
				"latest", served...)},
		// Repeated, equal or not: error.data lists the versions served, as
		// for a single one not served, so that a client can pick one to
		// send once.
		{name: "repeated protocol version", req: with(post(echo(1)), func(r *http.Request) { r.Header.Add("Mcp-Protocol-Version", "2025-11-25") }),
			status: 400, reason: "protocol_version", code: -32600, id: "1",
			check: wantRepeatedVersion},
		{name: "repeated protocol version, two values", req: with(get(cursor), func(r *http.Request) { r.Header.Add("Mcp-Protocol-Version", "2025-03-26") }),
			status: 400, reason: "protocol_version", code: -32600,
			check: wantRepeatedVersion},
		{name: "hostile Origin on POST", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }),
			status: 403, reason: "origin_forbidden", code: -32000},
		{name: "hostile Origin on resume", req: with(get(cursor), func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }),
			status: 403, reason: "origin_forbidden", code: -32000},
		{name: "Origin null", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Origin", "null") }),
			status: 403, reason: "origin_forbidden", code: -32000},
		{name: "Content-Type text/plain", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }),
			status: 415, reason: "content_type", code: -32600},
		{name: "non-localhost Host", req: with(post(echo(1)), func(r *http.Request) { r.Host = "mcp.attacker.example" }),
			status: 403, reason: "host_forbidden", code: -32000},
		{name: "non-localhost Host on resume", req: with(get(cursor), func(r *http.Request) { r.Host = "mcp.attacker.example:80" }),
			status: 403, reason: "host_forbidden", code: -32000},
		{name: "PUT", req: func(s *mcptest.Session) *http.Request {
			req, _ := s.NewRequest(ctx, http.MethodPut, echo(1))
			return req
		}, status: 405, reason: "method_not_allowed", code: -32600,
			check: func(t *testing.T, se *mcptest.StatusError) {
				if got := se.Header.Get("Allow"); got != "GET, POST, DELETE" {
					t.Fatalf("Allow = %q, want %q", got, "GET, POST, DELETE")
				}
			}},
		{name: "Last-Event-ID on POST", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Last-Event-ID", cursor) }),
			status: 400, reason: "last_event_id_on_post", code: -32600},
		{name: "Content-Encoding gzip", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Content-Encoding", "gzip") }),
			status: 415, reason: "content_type", code: -32600},
		{name: "Content-Encoding identity then gzip", req: with(post(echo(1)), func(r *http.Request) {
			r.Header.Add("Content-Encoding", "identity")
			r.Header.Add("Content-Encoding", "gzip")
		}), status: 415, reason: "content_type", code: -32600},

		// Request ids (MCP 2025-11-25, basic: a string or an integer, not null)
		{name: "id null", req: post([]byte(`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)),
			status: 400, reason: "invalid_request", code: -32600},
		{name: "fractional id", req: post([]byte(`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)),
			status: 400, reason: "invalid_request", code: -32600},
		{name: "fractional id with spaces around the colon", req: post([]byte(`{"jsonrpc":"2.0", "id" : 2.5 ,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)),
			status: 400, reason: "invalid_request", code: -32600},
		{name: "fractional id after an integer id in params", req: post([]byte(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","arguments":{"id":3,"text":"x"}},"id":3.5}`)),
			status: 400, reason: "invalid_request", code: -32600},
		{name: "id 2^53+1", req: post([]byte(`{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)),
			status: 400, reason: "invalid_request", code: -32600},
		{name: "id -2^53-1", req: post([]byte(`{"jsonrpc":"2.0","id":-9007199254740993,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)),
			status: 400, reason: "invalid_request", code: -32600},
		{name: "id that is an object", req: post([]byte(`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)),
			status: 400, reason: "invalid_request", code: -32600},
		{name: "id 2^64", req: post([]byte(`{"jsonrpc":"2.0","id":18446744073709551616,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)),
			status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the id "18446744073709551616" is beyond ±2^53: send large ids as strings`)},
		{name: "id -2^63-1", req: post([]byte(`{"jsonrpc":"2.0","id":-9223372036854775809,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)),
			status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the id "-9223372036854775809" is beyond ±2^53: send large ids as strings`)},
		{name: "id 1e3", req: post([]byte(`{"jsonrpc":"2.0","id":1e3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)),
			status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the id "1e3" is not a string or an integer`)},

		// Nesting (the go-sdk decoder takes at most 1000 levels; encoding/json 10000)
		{name: "params nested 1001 levels deep", req: post(nested(999)), status: 400, reason: "parse_error", code: -32700,
			check: wantMessage("the message nests arrays and objects 1001 levels deep; at most 1000 are accepted (the MCP SDK decoder's limit)")},

		// A top-level array is judged by its depth first, whatever the
		// version says of batches.
		{name: "array nested 1001 levels deep", req: post([]byte(strings.Repeat("[", 1001) + strings.Repeat("]", 1001))),
			status: 400, reason: "parse_error", code: -32700,
			check: wantMessage("the body nests arrays and objects 1001 levels deep; at most 1000 are accepted (the MCP SDK decoder's limit)")},
		{name: "array nested 1001 levels deep under 2025-03-26", session: v0326, req: post([]byte(strings.Repeat("[", 1001) + strings.Repeat("]", 1001))),
			status: 400, reason: "parse_error", code: -32700,
			check: wantMessage("the body nests arrays and objects 1001 levels deep; at most 1000 are accepted (the MCP SDK decoder's limit)")},

		// Messages that are not JSON-RPC 2.0 (JSON-RPC 2.0, sections 4 and
		// 5), each told in the message's own terms.
		{name: "response with both result and error", req: post([]byte(`{"jsonrpc":"2.0","id":39,"result":{},"error":{"code":1,"message":"x"}}`)),
			status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`a response has a "result" or an "error", never both (JSON-RPC 2.0, section 5)`)},
		{name: "initialize without an id", req: post([]byte(`{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)),
			status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`initialize is a request: send it with an "id" (MCP 2025-11-25, lifecycle)`)},
		{name: "initialize without an id in a batch", session: v0326, req: post([]byte(`[{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}]`)),
			status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`initialize is a request: send it with an "id" (MCP 2025-11-25, lifecycle)`)},
		{name: "a string", req: post([]byte(`"hello"`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`a JSON-RPC message is a JSON object, not a string`)},
		{name: "null", req: post([]byte(`null`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`a JSON-RPC message is a JSON object, not null`)},
		{name: "a batch of numbers", session: v0326, req: post([]byte(`[1]`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`a JSON-RPC message is a JSON object, not a number`)},
		{name: "no jsonrpc member", req: post([]byte(`{"id":31,"method":"tools/list"}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the member "jsonrpc" is missing: it must be "2.0"`)},
		{name: "jsonrpc 1.0", req: post([]byte(`{"jsonrpc":"1.0","id":32,"method":"tools/list"}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the member "jsonrpc" must be "2.0", not "1.0"`)},
		{name: "jsonrpc a number", req: post([]byte(`{"jsonrpc":2,"id":32,"method":"tools/list"}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the member "jsonrpc" must be "2.0", not a number`)},
		{name: "method a number", req: post([]byte(`{"jsonrpc":"2.0","id":33,"method":5}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the member "method" must be a string, not a number`)},
		{name: "id a boolean", req: post([]byte(`{"jsonrpc":"2.0","id":true,"method":"tools/list"}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the member "id" must be a string or an integer, not a boolean`)},
		{name: "id an array", req: post([]byte(`{"jsonrpc":"2.0","id":[1],"method":"tools/list"}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the member "id" must be a string or an integer, not an array`)},
		{name: "error a string", req: post([]byte(`{"jsonrpc":"2.0","id":39,"error":"x"}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the member "error" must be an object with an integer "code" and a string "message"`)},
		{name: "error code a fraction", req: post([]byte(`{"jsonrpc":"2.0","id":39,"error":{"code":1.5,"message":"x"}}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the member "error" must be an object with an integer "code" and a string "message"`)},
		{name: "result without an id", req: post([]byte(`{"jsonrpc":"2.0","result":{}}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`a response needs the "id" of the request it answers`)},
		{name: "neither method nor result", req: post([]byte(`{"jsonrpc":"2.0","id":34}`)), status: 400, reason: "invalid_request", code: -32600,
			check: wantMessage(`the message has no "method" (a request or notification) and no "result" or "error" (a response)`)},

		// MCP-Protocol-Version: only the revisions served are routed; any
		// other is refused with the versions served (MCP 2025-11-25,
		// basic/transports, "Protocol Version Header"; MCP 2026-07-28,
		// basic/versioning: UnsupportedProtocolVersionError, -32022).
		{name: "protocol version after 2026-07-28 on POST", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2099-01-01") }),
			status: 400, reason: "protocol_version", code: -32022, id: "1",
			check: wantUnsupported(`unsupported MCP-Protocol-Version "2099-01-01": this server serves 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05`,
				"2099-01-01", served...)},
		{name: "protocol version after 2026-07-28 on GET", req: with(get(), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2026-07-29") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`unsupported MCP-Protocol-Version "2026-07-29": this server serves 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05`,
				"2026-07-29", served...)},
		{name: "protocol version that is no date, after 2026-07-28", req: with(get(cursor), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2030-13-45") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`unsupported MCP-Protocol-Version "2030-13-45": this server serves 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05`,
				"2030-13-45", served...)},
		{name: "protocol version after 2026-07-28 with the era's _meta", req: with(post([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}`)),
			func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2099-01-01") }),
			status: 400, reason: "protocol_version", code: -32022, id: "1",
			check: wantUnsupported(`unsupported MCP-Protocol-Version "2099-01-01": this server serves 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05`,
				"2099-01-01", served...)},

		// A header that contradicts the version the session negotiated
		// (MCP 2025-11-25, basic/transports, "Protocol Version Header": the
		// client sends the negotiated one) never changes its streams.
		{name: "2025-03-26 header on a 2025-11-25 session's POST", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2025-03-26") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`MCP-Protocol-Version "2025-03-26" contradicts this session, which negotiated 2025-11-25: send MCP-Protocol-Version: 2025-11-25, or initialize a new session to speak 2025-03-26`,
				"2025-03-26", "2025-11-25")},
		{name: "2025-06-18 header on a 2025-11-25 session's GET", req: with(get(), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2025-06-18") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`MCP-Protocol-Version "2025-06-18" contradicts this session, which negotiated 2025-11-25: send MCP-Protocol-Version: 2025-11-25, or initialize a new session to speak 2025-06-18`,
				"2025-06-18", "2025-11-25")},
		{name: "2025-03-26 header on a 2025-11-25 session's resume", req: with(get(cursor), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2025-03-26") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`MCP-Protocol-Version "2025-03-26" contradicts this session, which negotiated 2025-11-25: send MCP-Protocol-Version: 2025-11-25, or initialize a new session to speak 2025-03-26`,
				"2025-03-26", "2025-11-25")},
		// DELETE too: a DELETE whose header contradicts the session ends
		// nothing (regression: it answered 204 and the session was gone).
		{name: "2025-06-18 header on a 2025-11-25 session's DELETE", req: with(del(), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2025-06-18") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`MCP-Protocol-Version "2025-06-18" contradicts this session, which negotiated 2025-11-25: send MCP-Protocol-Version: 2025-11-25, or initialize a new session to speak 2025-06-18`,
				"2025-06-18", "2025-11-25")},
		{name: "2025-11-25 header on a 2025-03-26 session's POST", session: v0326, req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2025-11-25") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`MCP-Protocol-Version "2025-11-25" contradicts this session, which negotiated 2025-03-26: send MCP-Protocol-Version: 2025-03-26, or initialize a new session to speak 2025-11-25`,
				"2025-11-25", "2025-03-26")},
		// A batch is judged by the session's version: on a 2025-03-26
		// session, which takes batches, a header claiming 2025-11-25 is the
		// fault (regression: batch_not_allowed, by the header's version).
		{name: "2025-11-25 header on a 2025-03-26 session's batch", session: v0326, req: with(post([]byte(`[`+string(echo(1))+`,`+string(echo(2))+`]`)), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2025-11-25") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`MCP-Protocol-Version "2025-11-25" contradicts this session, which negotiated 2025-03-26: send MCP-Protocol-Version: 2025-03-26, or initialize a new session to speak 2025-11-25`,
				"2025-11-25", "2025-03-26")},
		{name: "2024-11-05 header on a 2025-03-26 session's POST", session: v0326, req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2024-11-05") }),
			status: 400, reason: "protocol_version", code: -32022,
			check: wantUnsupported(`MCP-Protocol-Version "2024-11-05" contradicts this session, which negotiated 2025-03-26: send MCP-Protocol-Version: 2025-03-26, or initialize a new session to speak 2024-11-05`,
				"2024-11-05", "2025-03-26")},

		// A session ID that holds a live token is not that token, and the
		// refusal names no part of it.
		{name: "Mcp-Session-Id T,T", req: with(post(echo(1)), func(r *http.Request) { r.Header.Set("Mcp-Session-Id", s.Token+","+s.Token) }),
			status: 404, reason: "session_not_found", code: -32001,
			check: func(t *testing.T, se *mcptest.StatusError) {
				if strings.Contains(string(se.RawBody), s.Token[:8]) {
					t.Fatalf("refusal %s names the live token's prefix %s", se.RawBody, s.Token[:8])
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sess := s
			if tc.session != nil {
				sess = tc.session
			}
			before := st.bounds(t, sess.Token)
			resp, err := st.client.Do(tc.req(sess))
			if err != nil {
				t.Fatal(err)
			}
			id := tc.id
			if id == "" {
				id = "null"
			}
			se := mcptest.ReadStatusError(resp)
			checkRefusalID(t, se, tc.status, tc.reason, id)
			if se.Body.Code != tc.code {
				t.Fatalf("code = %d, want %d", se.Body.Code, tc.code)
			}
			if tc.check != nil {
				tc.check(t, se)
			}
			if after := st.bounds(t, sess.Token); after != before {
				t.Fatalf("the refusal changed the session's log: %+v → %+v", before, after)
			}
			callID++
			stillWorks(t, ctx, sess, callID)
		})
	}
}

// wantMessage returns a check that a refusal's error.message is msg.
func wantMessage(msg string) func(*testing.T, *mcptest.StatusError) {
	return func(t *testing.T, se *mcptest.StatusError) {
		t.Helper()
		if se.Body.Message != msg {
			t.Fatalf("message %q, want %q", se.Body.Message, msg)
		}
	}
}

// served are the protocol versions a Handler of tidemark.NewHandler
// serves, newest first.
var served = []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// wantUnsupported returns a check that a refusal of a protocol version has
// the message msg and names the version requested and the versions
// supported in error.data (MCP 2026-07-28, UnsupportedProtocolVersionError).
func wantUnsupported(msg, requested string, supported ...string) func(*testing.T, *mcptest.StatusError) {
	return func(t *testing.T, se *mcptest.StatusError) {
		t.Helper()
		wantMessage(msg)(t, se)
		if got := se.Body.Data["requested"]; got != requested {
			t.Fatalf("error.data.requested = %v, want %q", got, requested)
		}
		if got := fmt.Sprint(se.Body.Data["supported"]); got != fmt.Sprint(supported) {
			t.Fatalf("error.data.supported = %s, want %v", got, supported)
		}
	}
}

// wantRepeatedVersion checks the refusal of a repeated MCP-Protocol-Version
// header: its message, and error.data holding the reason and the versions
// served, newest first, and nothing else (no version was requested alone).
func wantRepeatedVersion(t *testing.T, se *mcptest.StatusError) {
	t.Helper()
	wantMessage("MCP-Protocol-Version header is repeated")(t, se)
	want := map[string]any{"reason": "protocol_version", "supported": []any{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}}
	if !reflect.DeepEqual(se.Body.Data, want) {
		t.Fatalf("error.data = %v, want %v", se.Body.Data, want)
	}
}

// nested returns a notification whose params nest depth arrays below
// params: depth+2 levels in all, counting the message and params objects.
func nested(depth int) []byte {
	return []byte(`{"jsonrpc":"2.0","method":"notifications/tidemark/test","params":{"a":` +
		strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}`)
}

// TestNesting: a message nested exactly 1000 levels deep, the most the
// go-sdk decoder takes, is accepted; deeper ones are refused with a message
// that says so, also beyond the 10000 levels encoding/json takes.
func TestNesting(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	for _, depth := range []int{1000, 1001, 10000, 10001} {
		req, _ := s.NewRequest(ctx, http.MethodPost, nested(depth-2))
		resp, err := st.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if depth == 1000 {
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("a notification nested 1000 levels deep: %s", mcptest.ReadStatusError(resp))
			}
			resp.Body.Close()
			continue
		}
		se := refusalOf(t, resp, http.StatusBadRequest, "parse_error")
		want := fmt.Sprintf("the message nests arrays and objects %d levels deep; at most 1000 are accepted (the MCP SDK decoder's limit)", depth)
		if se.Body.Code != -32700 || se.Body.Message != want {
			t.Fatalf("nested %d levels deep: code %d message %q, want -32700 %q", depth, se.Body.Code, se.Body.Message, want)
		}
	}
	stillWorks(t, ctx, s, 2)
}

// stillWorks checks that a session serves a countdown call and that the
// call's stream resumes from its first progress event.
func stillWorks(t *testing.T, ctx context.Context, s *mcptest.Session, id int64) {
	t.Helper()
	st, err := s.Call(ctx, mcptest.ToolCall(id, "countdown", map[string]any{"n": 2}, "w"))
	if err != nil {
		t.Fatalf("the session no longer serves calls: %v", err)
	}
	evs, err := st.Collect()
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	primed := s.ProtocolVersion >= "2025-11-25"
	if primed {
		checkCountdown(t, evs, id, 2, "w")
		evs = evs[1:]
	} else if len(evs) != 3 {
		t.Fatalf("countdown %d: %v, want 2 progress events and the response", id, evs)
	}
	rs, err := s.Resume(ctx, evs[0].ID)
	if err != nil {
		t.Fatalf("the session no longer resumes: %v", err)
	}
	got, err := rs.Collect()
	rs.Close()
	if err != nil {
		t.Fatal(err)
	}
	if primed {
		wantResumePriming(t, got[0], evs[0].ID, time.Second)
		got = got[1:]
	}
	if want := ids(evs[1:]); !equal(ids(got), want) {
		t.Fatalf("resume replayed %v, want %v", ids(got), want)
	}
}

// TestBadInputControlCharacters sends Last-Event-ID and Mcp-Session-Id
// values with control characters, which Go's client refuses to send, over a
// raw connection. net/http refuses such header values itself (400) before
// any handler runs; the session is unharmed.
func TestBadInputControlCharacters(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	evs := countdown(t, ctx, s, 2, 2, "p")
	u, _ := url.Parse(st.srv.URL)
	sid := "Mcp-Session-Id: " + s.Token + "\r\n"
	for _, tc := range []struct{ name, headers string }{
		{"Last-Event-ID with 0x01", sid + "Last-Event-ID: " + evs[1].ID[:5] + "\x01" + evs[1].ID[5:] + "\r\n"},
		{"Last-Event-ID with DEL", sid + "Last-Event-ID: " + evs[1].ID + "\x7f\r\n"},
		{"Last-Event-ID with NUL", sid + "Last-Event-ID: " + evs[1].ID + "\x00\r\n"},
		{"Mcp-Session-Id with ESC", "Mcp-Session-Id: " + s.Token + "\x1b\r\nLast-Event-ID: " + evs[1].ID + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := st.bounds(t, s.Token)
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nMcp-Protocol-Version: 2025-11-25\r\n%sConnection: close\r\n\r\n",
				u.Host, tc.headers)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || string(body) != "400 Bad Request" {
				t.Fatalf("got HTTP %d %q, want net/http's 400 Bad Request", resp.StatusCode, body)
			}
			if after := st.bounds(t, s.Token); after != before {
				t.Fatalf("the refusal changed the session's log: %+v → %+v", before, after)
			}
			stillWorks(t, ctx, s, 10)
		})
	}
}

// TestBadInputDuplicateRequestID sends a request whose ID is already in
// flight on the session: 400 duplicate_request_id with that id, and the
// call in flight completes untouched.
func TestBadInputDuplicateRequestID(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")
	a, err := s.Call(ctx, gatedCall(7, "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	first := next(t, a)
	before := st.bounds(t, s.Token)
	resp, err := s.Post(ctx, mcptest.ToolCall(7, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	// The refusal names the request: its id is the duplicated one.
	se := mcptest.ReadStatusError(resp)
	if se.Status != http.StatusBadRequest || se.Reason() != "duplicate_request_id" || string(se.Body.ID) != "7" {
		t.Fatalf("got HTTP %d %q, want 400 duplicate_request_id with id 7", se.Status, se.RawBody)
	}
	if after := st.bounds(t, s.Token); after != before {
		t.Fatalf("the refusal changed the session's log: %+v → %+v", before, after)
	}
	g.release("a", 1)
	rest, err := a.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 2 || progressOf(t, rest[0]).Progress != 1 || !rest[1].IsResponseTo(mcptest.ID(7)) {
		t.Fatalf("the call in flight: %v after %v, want its progress and response", rest, first.Event)
	}
	stillWorks(t, ctx, s, 8)
}
