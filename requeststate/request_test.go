package requeststate_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// TestRequestOf: ToolCall, PromptGet and ResourceRead take the principal,
// the method, the target and the arguments from go-sdk requests, so that a
// state sealed for one request opens only with an equal one.
func TestRequestOf(t *testing.T) {
	alice := &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: "alice"}}
	bob := &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: "bob"}}
	tool := func(extra *mcp.RequestExtra, name, args string) requeststate.Request {
		return requeststate.ToolCall(&mcp.CallToolRequest{Extra: extra, Params: &mcp.CallToolParamsRaw{Name: name, Arguments: json.RawMessage(args)}})
	}
	prompt := func(extra *mcp.RequestExtra, name string, args map[string]string) requeststate.Request {
		return requeststate.PromptGet(&mcp.GetPromptRequest{Extra: extra, Params: &mcp.GetPromptParams{Name: name, Arguments: args}})
	}
	resource := func(extra *mcp.RequestExtra, uri string) requeststate.Request {
		return requeststate.ResourceRead(&mcp.ReadResourceRequest{Extra: extra, Params: &mcp.ReadResourceParams{URI: uri}})
	}
	if got, want := tool(alice, "confirm", `{"q":1}`), (requeststate.Request{
		Principal: "alice", Method: "tools/call", Target: "confirm", Arguments: json.RawMessage(`{"q":1}`),
	}); got.Principal != want.Principal || got.Method != want.Method || got.Target != want.Target || string(got.Arguments) != string(want.Arguments) {
		t.Errorf("ToolCall = %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name       string
		seal, open requeststate.Request
		want       replay.Reason // "" for accepted
	}{
		{"tool, same", tool(alice, "t", `{"a":1,"b":[true,null]}`), tool(alice, "t", `{"b":[true,null],"a":1}`), ""},
		{"tool, no extra", tool(nil, "t", ``), tool(&mcp.RequestExtra{}, "t", `{}`), ""},
		{"tool, other user", tool(alice, "t", `{}`), tool(bob, "t", `{}`), replay.ReasonStatePrincipalMismatch},
		{"tool, no user", tool(alice, "t", `{}`), tool(nil, "t", `{}`), replay.ReasonStatePrincipalMismatch},
		{"tool, other name", tool(alice, "t", `{}`), tool(alice, "u", `{}`), replay.ReasonStateRequestMismatch},
		{"tool, other argument", tool(alice, "t", `{"a":1}`), tool(alice, "t", `{"a":2}`), replay.ReasonStateRequestMismatch},
		{"tool, nested order", tool(alice, "t", `{"o":{"x":1,"y":2}}`), tool(alice, "t", `{"o":{"y":2,"x":1}}`), ""},
		{"tool, escapes", tool(alice, "t", `{"s":"\u00e9"}`), tool(alice, "t", `{"s":"é"}`), ""},
		{"prompt, same", prompt(alice, "p", map[string]string{"x": "1"}), prompt(alice, "p", map[string]string{"x": "1"}), ""},
		{"prompt, none and empty", prompt(alice, "p", nil), prompt(alice, "p", map[string]string{}), ""},
		{"prompt, other argument", prompt(alice, "p", map[string]string{"x": "1"}), prompt(alice, "p", map[string]string{"x": "2"}), replay.ReasonStateRequestMismatch},
		{"prompt vs tool", prompt(alice, "p", nil), tool(alice, "p", `{}`), replay.ReasonStateRequestMismatch},
		{"resource, same", resource(alice, "test://a"), resource(alice, "test://a"), ""},
		{"resource, other", resource(alice, "test://a"), resource(alice, "test://b"), replay.ReasonStateRequestMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := requeststate.New(requeststate.RandomRing(), requeststate.Options{TTL: time.Minute})
			state, err := s.Seal(tc.seal, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Open(t.Context(), tc.open, state, nil)
			if got := requeststate.ReasonOf(err); got != tc.want || (tc.want == "") != (err == nil) {
				t.Errorf("Open: %v (reason %q), want reason %q", err, got, tc.want)
			}
		})
	}
}
