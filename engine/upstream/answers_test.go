package upstream_test

// How the gateway relays what its client answered and how the upstream
// failed: an elicitation answer the upstream refuses, the client's own
// error answer, an upstream error without a JSON-RPC code, and the
// input-required result of the sessionless era.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// answerConfirm calls the demo's confirm tool through g, answers its
// elicitation/create with answer (the response's result, or its error
// when errorAnswer), and returns that elicitation/create as the client
// got it and the call's response.
func answerConfirm(t *testing.T, ctx context.Context, s *mcptest.Session, answer json.RawMessage, errorAnswer *jsonrpc.Error) (*jsonrpc.Request, *jsonrpc.Response) {
	t.Helper()
	confirm := mcptest.ToolCall(2, "confirm", map[string]any{"question": "Proceed?"}, nil)
	st, err := s.Call(ctx, confirm)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.Until(func(e mcptest.Event) bool {
		r, ok := e.Request()
		return ok && r.Method == "elicitation/create"
	})
	if err != nil {
		t.Fatalf("no elicitation/create on the call's stream: %v (events %v)", err, evs)
	}
	ask, _ := evs[len(evs)-1].Request()
	resp, err := s.Post(ctx, &jsonrpc.Response{ID: ask.ID, Result: answer, Error: errorAnswer})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the client's answer got HTTP %d, want 202", resp.StatusCode)
	}
	rest, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(confirm.ID) })
	if err != nil {
		t.Fatal(err)
	}
	return ask, response(t, rest)
}

// wantError checks that r is a JSON-RPC error with exactly code and
// message.
func wantError(t *testing.T, what string, r *jsonrpc.Response, code int64, message string) {
	t.Helper()
	var werr *jsonrpc.Error
	if !errors.As(r.Error, &werr) || werr.Code != code || werr.Message != message {
		t.Errorf("%s: response %v (result %s); want error %d %q", what, r.Error, r.Result, code, message)
	}
}

// TestElicitationAnswerRefused: through the gateway, the demo's confirm
// answered with an elicitation result whose content misses the required
// field fails with -32602 saying what of the client's answer is wrong, and
// answered with the client's own JSON-RPC error fails with that error's
// code and wording; neither with code 0 or the go-sdk's internal words.
func TestElicitationAnswerRefused(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{})
	g.client.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}

	_, r := answerConfirm(t, ctx, g.initialize(t, ctx), json.RawMessage(`{"action":"accept","content":{}}`), nil)
	wantError(t, "content {}", r, jsonrpc.CodeInvalidParams,
		`the answer to elicitation/create does not match its requestedSchema: validating root: required: missing properties: ["confirmed"]`)

	_, r = answerConfirm(t, ctx, g.initialize(t, ctx), nil, &jsonrpc.Error{Code: -32042, Message: "the user closed the dialog"})
	wantError(t, "the client's error", r, -32042, "the user closed the dialog")
}

// TestUpstreamErrorWithoutCode: an upstream error whose code is 0 (the
// go-sdk's for a Go error without a JSON-RPC code) reaches the client as
// -32603 (internal error, JSON-RPC 2.0 section 5.1) with the upstream's
// message.
func TestUpstreamErrorWithoutCode(t *testing.T) {
	ctx := testContext(t)
	server := mcp.NewServer(&mcp.Implementation{Name: "failing", Version: "1.0.0"}, nil)
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/call" {
				return nil, errors.New("the disk is full")
			}
			return next(ctx, method, req)
		}
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	g := newGateway(t, srv.URL, upstream.Options{})
	r := response(t, call(t, ctx, g.initialize(t, ctx), mcptest.ToolCall(2, "any", nil, nil)))
	wantError(t, "code 0 upstream", r, jsonrpc.CodeInternalError, "the disk is full")
}

// TestInputRequiredResultHasNoNull: in the sessionless era (2026-07-28),
// the demo's confirm answers through the gateway with an input-required
// result (resultType input_required, inputRequests, requestState) holding
// no null where the schema's CallToolResult has an array: content, if
// present, is an array.
func TestInputRequiredResultHasNoNull(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{Stateless: true})
	g := newGateway(t, up.URL(), upstream.Options{})
	body, err := jsonrpc.EncodeMessage(mcptest.MustCall(9, "tools/call", map[string]any{
		"name": "confirm", "arguments": map[string]any{"question": "Proceed?"},
		"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientInfo":         map[string]string{"name": "mcptest", "version": "1.0.0"},
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{}},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	req, err := g.client.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "confirm")
	msgs := postSessionless(t, g, req, http.StatusOK)
	r, ok := msgs[0].(*jsonrpc.Response)
	if !ok || r.Error != nil {
		t.Fatalf("answer %v, want a result", msgs[0])
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatal(err)
	}
	if string(res["resultType"]) != `"input_required"` || res["inputRequests"] == nil || res["requestState"] == nil {
		t.Errorf("result %s, want resultType input_required with inputRequests and requestState", r.Result)
	}
	if c, ok := res["content"]; ok && (len(c) == 0 || c[0] != '[') {
		t.Errorf("result %s: content is %s, want an array or no content", r.Result, c)
	}
}
