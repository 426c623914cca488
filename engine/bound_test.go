package engine_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
)

// TestAdmit checks each bound of State.Admit at its boundary: the largest
// input admitted and the smallest refused.
func TestAdmit(t *testing.T) {
	id1, _ := jsonrpc.MakeID(float64(1))
	call := func(method string, params any) *jsonrpc.Request {
		b, err := json.Marshal(params)
		if err != nil {
			t.Fatal(err)
		}
		return &jsonrpc.Request{ID: id1, Method: method, Params: b}
	}
	sub := func(uri string) *jsonrpc.Request { return call("resources/subscribe", map[string]string{"uri": uri}) }
	subs := func(n int) (r []*jsonrpc.Request) {
		for i := range n {
			r = append(r, sub(fmt.Sprintf("demo://%d", i)))
		}
		return r
	}
	uris := func(n int) (u []string) {
		for i := range n {
			u = append(u, fmt.Sprintf("demo://%d", i))
		}
		return u
	}
	// initialize params of exactly n bytes.
	initialize := func(n int) *jsonrpc.Request {
		p := `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"","version":"1"}}`
		p = strings.Replace(p, `"name":""`, `"name":"`+strings.Repeat("n", n-len(p))+`"`, 1)
		return &jsonrpc.Request{ID: id1, Method: "initialize", Params: json.RawMessage(p)}
	}
	long := strings.Repeat("u", engine.MaxSubscriptionBytes-len("demo://"))
	for _, tc := range []struct {
		name    string
		st      engine.State
		pending []*jsonrpc.Request
		calls   []*jsonrpc.Request
		refused bool
	}{
		{name: "initialize at the bound", calls: []*jsonrpc.Request{initialize(engine.MaxInitializeParams)}},
		{name: "initialize over the bound", calls: []*jsonrpc.Request{initialize(engine.MaxInitializeParams + 1)}, refused: true},
		{name: "a level of MCP", calls: []*jsonrpc.Request{call("logging/setLevel", map[string]string{"level": "emergency"})}},
		{name: "another level", calls: []*jsonrpc.Request{call("logging/setLevel", map[string]string{"level": "trace"})}, refused: true},
		{name: "a level that is no string is the engine's to refuse", calls: []*jsonrpc.Request{call("logging/setLevel", map[string]int{"level": 1})}},
		{name: "subscriptions at the bound", calls: subs(engine.MaxSubscriptions)},
		{name: "one subscription over", calls: subs(engine.MaxSubscriptions + 1), refused: true},
		{name: "held ones count", st: engine.State{Subscriptions: uris(engine.MaxSubscriptions)}, calls: []*jsonrpc.Request{sub("demo://new")}, refused: true},
		{name: "pending ones count", pending: subs(engine.MaxSubscriptions), calls: []*jsonrpc.Request{sub("demo://new")}, refused: true},
		{name: "a URI held already adds nothing", st: engine.State{Subscriptions: uris(engine.MaxSubscriptions)}, calls: []*jsonrpc.Request{sub("demo://0")}},
		{name: "URIs at the byte bound", calls: []*jsonrpc.Request{sub("demo://" + long)}},
		{name: "URIs one byte over", calls: []*jsonrpc.Request{sub("demo://" + long + "u")}, refused: true},
		{name: "URIs over together", st: engine.State{Subscriptions: []string{"demo://" + long}}, calls: []*jsonrpc.Request{sub("x")}, refused: true},
		{name: "other calls pass a full session", st: engine.State{Subscriptions: uris(engine.MaxSubscriptions + 1)}, calls: []*jsonrpc.Request{call("tools/call", map[string]string{"name": "x"})}},
	} {
		err := tc.st.Admit(tc.pending, tc.calls)
		if got := errors.Is(err, engine.ErrBound); got != tc.refused || (err != nil) != tc.refused {
			t.Errorf("%s: Admit = %v, want refused %v", tc.name, err, tc.refused)
		}
	}
}
