package demo_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/demo"
)

// rawSession is a client of the demo server that reads and writes
// JSON-RPC messages as they are, so that it can send answers the go-sdk
// client would refuse to send.
type rawSession struct {
	t    *testing.T
	conn mcp.Connection
}

func newRawSession(t *testing.T, version string) *rawSession {
	t.Helper()
	ctx := t.Context()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := demo.NewServer().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &rawSession{t: t, conn: conn}
	s.write(call(1, "initialize", map[string]any{
		"protocolVersion": version, "capabilities": map[string]any{"elicitation": map[string]any{}},
		"clientInfo": map[string]any{"name": "raw", "version": "1"},
	}))
	s.read()
	s.write(&jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)})
	return s
}

func call(id int64, method string, params any) *jsonrpc.Request {
	raw, _ := json.Marshal(params)
	return &jsonrpc.Request{ID: mustID(id), Method: method, Params: raw}
}

func mustID(v int64) jsonrpc.ID {
	id, err := jsonrpc.MakeID(float64(v))
	if err != nil {
		panic(err)
	}
	return id
}

func (s *rawSession) write(m jsonrpc.Message) {
	s.t.Helper()
	if err := s.conn.Write(s.t.Context(), m); err != nil {
		s.t.Fatal(err)
	}
}

func (s *rawSession) read() jsonrpc.Message {
	s.t.Helper()
	m, err := s.conn.Read(s.t.Context())
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

// TestConfirmAnswerNotMatchingSchema: an accepted answer to confirm's
// question without its required field fails the call with -32602 naming
// the client's answer, at 2025-11-25 (its answer to the server's
// elicitation/create) and at 2026-07-28 (its inputResponses), never with
// code 0 or the go-sdk's words about its own retry loop.
func TestConfirmAnswerNotMatchingSchema(t *testing.T) {
	confirm := map[string]any{"name": "confirm", "arguments": map[string]any{"question": "Proceed?"}}
	empty := map[string]any{"action": "accept", "content": map[string]any{}}

	s := newRawSession(t, "2025-11-25")
	s.write(call(2, "tools/call", confirm))
	ask, ok := s.read().(*jsonrpc.Request)
	if !ok || ask.Method != "elicitation/create" {
		t.Fatalf("got %v, want elicitation/create", ask)
	}
	answer, _ := json.Marshal(empty)
	s.write(&jsonrpc.Response{ID: ask.ID, Result: answer})
	wantError(t, "2025-11-25", s.read(), `the answer to elicitation/create does not match its requestedSchema: validating root: required: missing properties: ["confirmed"]`)

	s = newRawSession(t, "2026-07-28")
	s.write(call(2, "tools/call", confirm))
	first, ok := s.read().(*jsonrpc.Response)
	var res struct {
		RequestState string `json:"requestState"`
	}
	if !ok || first.Error != nil || json.Unmarshal(first.Result, &res) != nil || res.RequestState == "" {
		t.Fatalf("got %v, want an input-required result with a requestState", first)
	}
	retry := map[string]any{"name": "confirm", "arguments": map[string]any{"question": "Proceed?"},
		"requestState": res.RequestState, "inputResponses": map[string]any{"confirm": empty}}
	s.write(call(3, "tools/call", retry))
	wantError(t, "2026-07-28", s.read(), `inputResponses["confirm"] does not match its requestedSchema: validating root: required: missing properties: ["confirmed"]`)
}

func wantError(t *testing.T, what string, m jsonrpc.Message, message string) {
	t.Helper()
	r, ok := m.(*jsonrpc.Response)
	var we *jsonrpc.Error
	if !ok || !errors.As(r.Error, &we) || we.Code != jsonrpc.CodeInvalidParams || we.Message != message {
		t.Errorf("%s: got %v; want error -32602 %q", what, m, message)
	}
}
