package mcptest_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

func TestParseError(t *testing.T) {
	eb, err := mcptest.ParseError([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"gone",` +
		`"data":{"reason":"cursor_ahead","hwm":12,"cursorSequence":9223372036854775807}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(eb.ID) != "null" || eb.Code != -32001 || eb.Message != "gone" || eb.Reason != "cursor_ahead" ||
		eb.Data["hwm"] != json.Number("12") || eb.Data["cursorSequence"] != json.Number("9223372036854775807") {
		t.Fatalf("parsed %+v", eb)
	}
	for _, bad := range []string{``, `{}`, `{"jsonrpc":"2.0","id":1,"result":{}}`, `{"jsonrpc":"1.0","error":{}}`, `[1]`} {
		if _, err := mcptest.ParseError([]byte(bad)); err == nil {
			t.Fatalf("ParseError(%q) succeeded", bad)
		}
	}
	eb, err = mcptest.ParseError([]byte(`{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"m"}}`))
	if err != nil || eb.Reason != "" || eb.Data != nil || string(eb.ID) != "7" {
		t.Fatalf("error without data: %+v, %v", eb, err)
	}
}

func TestEncodeDecode(t *testing.T) {
	one, err := mcptest.Encode(mcptest.ToolCall(3, "echo", map[string]string{"text": "x"}, "tok"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":{"progressToken":"tok"},"name":"echo","arguments":{"text":"x"}}}`
	if string(one) != want {
		t.Fatalf("Encode = %s, want %s", one, want)
	}
	batch, err := mcptest.Encode(mcptest.MustCall(1, "ping", nil), mcptest.MustNotify("notifications/initialized", nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]`; string(batch) != want {
		t.Fatalf("Encode batch = %s, want %s", batch, want)
	}
	msgs, err := mcptest.DecodeJSON(batch)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("DecodeJSON: %v, %v", msgs, err)
	}
	if r, ok := msgs[0].(*jsonrpc.Request); !ok || r.ID != mcptest.ID(1) || r.Method != "ping" {
		t.Fatalf("first message %#v", msgs[0])
	}
}

// TestStatusError: a refused Call returns a *StatusError with the exact
// status, header and parsed body.
func TestStatusError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Session-Id") != "tok" || r.Header.Get("Mcp-Protocol-Version") != "2025-06-18" ||
			r.Header.Get("Accept") != "application/json, text/event-stream" || r.Header.Get("X-Test") != "1" {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"no such session","data":{"reason":"session_not_found"}}}`))
	}))
	defer srv.Close()
	c := &mcptest.Client{URL: srv.URL, HTTP: srv.Client(), Header: http.Header{"X-Test": {"1"}}}
	s := c.SessionFor("tok", "2025-06-18")
	_, err := s.Call(t.Context(), mcptest.MustCall(1, "ping", nil))
	se, ok := mcptest.AsStatusError(err)
	if !ok || se.Status != http.StatusNotFound || se.Reason() != "session_not_found" || se.Method != http.MethodPost {
		t.Fatalf("Call: %v", err)
	}
	if got, want := se.Error(), "mcptest: POST: HTTP 404: session_not_found: no such session"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if old := c.SessionFor("tok", "2025-03-26"); old.VersionHeader != "" {
		t.Fatalf("a 2025-03-26 session sends MCP-Protocol-Version %q", old.VersionHeader)
	}
}
