package transport

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestUnanswered: the calls of a JSON answer that its session's DELETE
// answers when the session keeps no ledger of their stream are those no
// response already read answers (regression: in a Redis fleet with
// --json-response, a DELETE at another replica left such calls with 503
// "send the request again", which a deleted session can never honour).
func TestUnanswered(t *testing.T) {
	call := func(id any) *jsonrpc.Request {
		jid, err := jsonrpc.MakeID(id)
		if err != nil {
			t.Fatal(err)
		}
		return &jsonrpc.Request{ID: jid, Method: "tools/call"}
	}
	calls := []*jsonrpc.Request{call("a"), call(float64(5)), call(float64(9))}
	out := []json.RawMessage{
		json.RawMessage(`{"jsonrpc":"2.0","id":5,"result":{}}`),
		json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`),
	}
	got, err := json.Marshal(unanswered(calls, out))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `["a",9]` {
		t.Fatalf("unanswered = %s, want [\"a\",9]", got)
	}
}
