package requeststate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// transferArgs are the arguments of the test's transfer tool.
type transferArgs struct {
	Amount int `json:"amount"`
}

// transferState is what the transfer tool carries between its rounds.
type transferState struct {
	Asked int `json:"asked"`
}

// newTransferServer returns a server whose tool "transfer" asks the user to
// confirm (an elicitation) and carries the amount it asked about in a
// sealed requestState, the way a library user writes such a tool.
func newTransferServer(sealer *requeststate.Sealer) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "transfer", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "transfer"}, func(ctx context.Context, req *mcp.CallToolRequest, args transferArgs) (*mcp.CallToolResult, any, error) {
		binding := requeststate.ToolCall(req)
		if req.Params.RequestState == "" {
			state, err := sealer.Seal(binding, transferState{Asked: args.Amount})
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{
					Message:         fmt.Sprintf("Transfer %d?", args.Amount),
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
				}},
				RequestState: state,
			}, nil, nil
		}
		var st transferState
		if err := sealer.Open(ctx, binding, req.Params.RequestState, &st); err != nil {
			return nil, nil, err
		}
		answer, _ := req.Params.InputResponses["confirm"].(*mcp.ElicitResult)
		if answer == nil || answer.Action != "accept" || answer.Content["ok"] != true {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "not transferred"}}}, nil, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("transferred %d", st.Asked)}}}, nil, nil
	})
	return s
}

// tokenUsers accepts the bearer tokens "alice" and "bob" as the users of
// the same name.
func tokenUsers(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	switch token {
	case "alice", "bob":
		return &auth.TokenInfo{UserID: token, Expiration: time.Now().Add(time.Hour)}, nil
	}
	return nil, auth.ErrInvalidToken
}

// startReplica serves a transfer server sealing with ring through
// Tidemark's handler, behind the go-sdk's bearer-token middleware, on a
// loopback port, and returns its URL.
func startReplica(t *testing.T, ring *requeststate.Ring) string {
	t.Helper()
	h := tidemark.NewHandler(newTransferServer(requeststate.New(ring, requeststate.Options{})), nil)
	t.Cleanup(func() { h.Close() })
	srv := httptest.NewServer(auth.RequireBearerToken(tokenUsers, nil)(h))
	t.Cleanup(srv.Close)
	return srv.URL
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connectAs connects the go-sdk client to url as user, with its default
// protocol version unless version is set, and with the multi round-trip
// middleware off, so that the test sends each round itself.
func connectAs(t *testing.T, url, user, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	httpClient := &http.Client{Transport: bearer{user, &http.Transport{}}}
	t.Cleanup(httpClient.CloseIdleConnections)
	client := mcp.NewClient(&mcp.Implementation{Name: "requeststate-test", Version: "1.0.0"}, opts)
	var sopts *mcp.ClientSessionOptions
	if version != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: httpClient}, sopts)
	if err != nil {
		t.Fatalf("connect %s as %s: %v", url, user, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestSealedStateAcrossReplicas: with the go-sdk client at its default
// protocol (2026-07-28), a state one replica sealed opens on another that
// shares the key ring, for the same user; another user presenting it, or a
// replica with another ring, is refused with the documented reason.
func TestSealedStateAcrossReplicas(t *testing.T) {
	ring := requeststate.RandomRing()
	a, b := startReplica(t, ring), startReplica(t, ring)
	stranger := startReplica(t, requeststate.RandomRing())
	noMRTR := &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}
	aliceA := connectAs(t, a, "alice", "", noMRTR)
	if got := aliceA.InitializeResult().ProtocolVersion; got != "2026-07-28" {
		t.Fatalf("the go-sdk client negotiated %s by default, want 2026-07-28", got)
	}
	args := map[string]any{"amount": 5}
	first, err := aliceA.CallTool(t.Context(), &mcp.CallToolParams{Name: "transfer", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if !first.NeedsInput() || first.RequestState == "" {
		t.Fatalf("first round: NeedsInput %v, state %q; want an input-required result with a state", first.NeedsInput(), first.RequestState)
	}
	retry := &mcp.CallToolParams{
		Name: "transfer", Arguments: args, RequestState: first.RequestState,
		InputResponses: mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}},
	}

	// Bob, on the replica that will accept Alice's retry, is refused.
	_, err = connectAs(t, b, "bob", "", noMRTR).CallTool(t.Context(), retry)
	wantRefusal(t, err, replay.ReasonStatePrincipalMismatch)
	// A replica with another key ring cannot open it.
	_, err = connectAs(t, stranger, "alice", "", noMRTR).CallTool(t.Context(), retry)
	wantRefusal(t, err, replay.ReasonStateKeyUnknown)
	// Other arguments than the state was issued for.
	changed := *retry
	changed.Arguments = map[string]any{"amount": 500}
	_, err = connectAs(t, b, "alice", "", noMRTR).CallTool(t.Context(), &changed)
	wantRefusal(t, err, replay.ReasonStateRequestMismatch)

	res, err := connectAs(t, b, "alice", "", noMRTR).CallTool(t.Context(), retry)
	if err != nil {
		t.Fatalf("Alice's retry on replica B: %v", err)
	}
	if got := resultText(res); got != "transferred 5" {
		t.Errorf("Alice's retry on replica B: %q, want %q", got, "transferred 5")
	}
}

// TestSealedStateStatefulSession: on a 2025-11-25 session the go-sdk server
// asks through elicitation itself and calls the tool again with the answer
// and the state, which opens with the session's principal.
func TestSealedStateStatefulSession(t *testing.T) {
	url := startReplica(t, requeststate.RandomRing())
	asked := ""
	cs := connectAs(t, url, "alice", "2025-11-25", &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		},
	})
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "transfer", Arguments: map[string]any{"amount": 7}})
	if err != nil {
		t.Fatal(err)
	}
	if asked != "Transfer 7?" || resultText(res) != "transferred 7" {
		t.Errorf("asked %q, result %q; want %q and %q", asked, resultText(res), "Transfer 7?", "transferred 7")
	}
}

func wantRefusal(t *testing.T, err error, reason replay.Reason) {
	t.Helper()
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInvalidParams || requeststate.ReasonOf(err) != reason {
		t.Fatalf("error = %v (reason %q), want JSON-RPC error %d with reason %s", err, requeststate.ReasonOf(err), jsonrpc.CodeInvalidParams, reason)
	}
}

func resultText(res *mcp.CallToolResult) string {
	var s string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s += tc.Text
		}
	}
	return s
}

// TestRefusalStatus: under 2026-07-28 a refused requestState (-32602) is
// answered with HTTP 400, as SEP-2575 requires of invalid params, and the
// body is the JSON-RPC error with its reason (docs/requeststate.md,
// "Sealed requestState").
func TestRefusalStatus(t *testing.T) {
	url := startReplica(t, requeststate.RandomRing())
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"transfer","arguments":{"amount":5},` +
		`"requestState":"AAAA","inputResponses":{"confirm":{"action":"accept","content":{"ok":true}}},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},` +
		`"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer alice", "MCP-Protocol-Version": "2026-07-28",
		"Mcp-Method": "tools/call", "Mcp-Name": "transfer",
	} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), `"code":-32602`) ||
		!strings.Contains(string(raw), `"reason":"`+string(replay.ReasonStateInvalid)+`"`) {
		t.Errorf("retry with a state no ring sealed: %d %s; want 400 with JSON-RPC error -32602, reason %s", resp.StatusCode, raw, replay.ReasonStateInvalid)
	}
}
