// auth_test.go tests the binding of a session to the user who created it,
// behind the go-sdk's bearer-token middleware.

package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
)

// verifier accepts the bearer tokens "alice" (scope tools:slow) and "bob"
// (no scope) as the users of the same name; "expired" is refused as
// expired, "down" as if the authorization server could not be reached.
func verifier(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	switch token {
	case "alice":
		return &auth.TokenInfo{UserID: token, Scopes: []string{"tools:slow"}, Expiration: time.Now().Add(time.Hour)}, nil
	case "bob":
		return &auth.TokenInfo{UserID: token, Expiration: time.Now().Add(time.Hour)}, nil
	case "expired":
		return nil, fmt.Errorf("%w: the token expired at 2026-01-01T00:00:00Z", auth.ErrInvalidToken)
	case "down":
		return nil, errors.New("introspection: connection refused")
	}
	return nil, auth.ErrInvalidToken
}

// TestAuthBinding: behind the go-sdk's bearer-token middleware, a session
// belongs to the user who created it. Another user's POST, GET, resume
// and DELETE get 404 session_not_found with the very body a session that
// never existed gets, learn nothing of the session's events, and change
// nothing.
func TestAuthBinding(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, auth.RequireBearerToken(verifier, nil))
	alice := st.clientWith(http.Header{"Authorization": {"Bearer alice"}})
	bob := st.clientWith(http.Header{"Authorization": {"Bearer bob"}})

	as, err := alice.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	evs := countdown(t, ctx, as, 2, 3, "secret-token")
	before := st.bounds(t, as.Token)

	// Bob presents Alice's session token.
	bs := bob.SessionFor(as.Token, as.ProtocolVersion)
	var refusals []*mcptest.StatusError
	resp, err := bs.Post(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	refusals = append(refusals, refusalOf(t, resp, http.StatusNotFound, "session_not_found"))
	_, err = bs.Get(ctx)
	refusals = append(refusals, wantRefusal(t, err, http.StatusNotFound, "session_not_found"))
	for _, e := range evs {
		_, err = bs.Resume(ctx, e.ID)
		refusals = append(refusals, wantRefusal(t, err, http.StatusNotFound, "session_not_found"))
	}
	refusals = append(refusals, wantRefusal(t, bs.Delete(ctx), http.StatusNotFound, "session_not_found"))

	// A session that never existed answers each the same, byte for byte.
	nobody := bob.SessionFor(strings.Repeat("0", len(as.Token)), as.ProtocolVersion)
	resp, err = nobody.Post(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	unknown := refusalOf(t, resp, http.StatusNotFound, "session_not_found")
	for _, se := range refusals {
		if string(se.RawBody) != string(unknown.RawBody) {
			t.Fatalf("%s of another user's session: %s; a session that never existed: %s", se.Method, se.RawBody, unknown.RawBody)
		}
	}

	for _, se := range refusals {
		// The body is exactly {jsonrpc, id: null, error: {code, message,
		// data: {reason}}} and mentions none of the session's events.
		var env struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   map[string]json.RawMessage
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(se.RawBody, &top) != nil || len(top) != 3 || json.Unmarshal(se.RawBody, &env) != nil ||
			len(env.Error) != 3 || len(se.Body.Data) != 1 {
			t.Fatalf("%s refusal body %s: want only jsonrpc, id, error{code, message, data{reason}}", se.Method, se.RawBody)
		}
		if se.Body.Code != -32001 {
			t.Fatalf("%s refusal code %d, want -32001", se.Method, se.Body.Code)
		}
		body := string(se.RawBody)
		for _, leak := range []string{"secret-token", "countdown", "progress", as.Token, evs[0].ID[:8]} {
			if strings.Contains(body, leak) {
				t.Fatalf("%s refusal body %s reveals %q", se.Method, body, leak)
			}
		}
	}
	// Bob initializing while presenting Alice's token gets a session of
	// his own and does not supersede hers.
	bobInit := st.clientWith(http.Header{"Authorization": {"Bearer bob"}, "Mcp-Session-Id": {as.Token}})
	b1, err := bobInit.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if b1.Token == as.Token {
		t.Fatal("bob was given alice's session")
	}
	if status, rec, err := st.h.Registry().Status(ctx, as.Token); err != nil || status != replay.Live || rec.UserID != "alice" {
		t.Fatalf("alice's session after bob's initialize: %v %q %v, want live and alice's", status, rec.UserID, err)
	}
	if after := st.bounds(t, as.Token); after != before {
		t.Fatalf("bob's requests changed alice's log: %+v → %+v", before, after)
	}

	// Alice's session is unharmed: it serves and resumes.
	stillWorks(t, ctx, as, 4)
	// Without a token the middleware answers 401 before the handler.
	anon := st.client.SessionFor(as.Token, as.ProtocolVersion)
	resp, err = anon.Post(ctx, mcptest.ToolCall(5, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no bearer token: HTTP %d, want 401", resp.StatusCode)
	}
	// Bob's own sessions work.
	b2, err := bob.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	countdown(t, ctx, b2, 2, 1, "b")
}
