package wire_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// TestReadResponse: the response to the request's id is found in an SSE
// stream after a priming event and other messages, and in a JSON body; a
// stream that ends first is io.ErrUnexpectedEOF.
func TestReadResponse(t *testing.T) {
	id, _ := jsonrpc.MakeID(float64(7))
	answer := func(ct, body string) *http.Response {
		return &http.Response{Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(strings.NewReader(body))}
	}
	for _, c := range []struct{ name, ct, body, want string }{
		{"sse", "text/event-stream", "id: a0\ndata:\n\n" +
			`data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}` + "\n\n" +
			`data: {"jsonrpc":"2.0","id":6,"result":{"n":6}}` + "\n\n" +
			`data: {"jsonrpc":"2.0","id":7,"result":{"n":7}}` + "\n\n", `{"n":7}`},
		{"json", "application/json", `{"jsonrpc":"2.0","id":7,"result":{"n":7}}`, `{"n":7}`},
		{"json batch", "application/json; charset=utf-8", `[{"jsonrpc":"2.0","id":6,"result":{}},{"jsonrpc":"2.0","id":7,"result":{"n":7}}]`, `{"n":7}`},
	} {
		r, err := wire.ReadResponse(answer(c.ct, c.body), id, 1<<20)
		if err != nil || string(r.Result) != c.want {
			t.Errorf("%s: %+v, %v; want result %s", c.name, r, err, c.want)
		}
	}
	_, err := wire.ReadResponse(answer("text/event-stream", "id: a0\ndata:\n\n"), id, 1<<20)
	if err != io.ErrUnexpectedEOF {
		t.Errorf("stream ending first: %v, want io.ErrUnexpectedEOF", err)
	}
	_, err = wire.ReadResponse(answer("application/json", `{"jsonrpc":"2.0","id":6,"result":{}}`), id, 1<<20)
	if err == nil || err.Error() != "the answer holds no response to the request" {
		t.Errorf("JSON body without it: %v", err)
	}
}

// TestEndedByDelete: only an error response with reason deleted or
// superseded in an event without id is the end of an ended session's
// stream.
func TestEndedByDelete(t *testing.T) {
	deleted := `{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"m","data":{"reason":"deleted"}}}`
	for _, c := range []struct {
		name  string
		hasID bool
		data  string
		want  bool
	}{
		{"the deleted answer", false, deleted, true},
		{"the superseded answer", false, `{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"m","data":{"reason":"superseded"}}}`, true},
		{"with an id: a stored answer", true, deleted, false},
		{"another reason", false, `{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"m","data":{"reason":"session_not_found"}}}`, false},
		{"no data", false, `{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"m"}}`, false},
		{"a result", false, `{"jsonrpc":"2.0","id":2,"result":{"reason":"deleted"}}`, false},
		{"a notification", false, `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":{"reason":"deleted"}}}`, false},
	} {
		msg, err := jsonrpc.DecodeMessage([]byte(c.data))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ev := sse.Event{HasID: c.hasID, Data: []byte(c.data)}
		if c.hasID {
			ev.ID = "a-1-2-3"
		}
		if got := wire.EndedByDelete(ev, msg); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
