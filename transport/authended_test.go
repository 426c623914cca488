// authended_test.go tests that an ended session stays bound to the user
// who created it: to anyone else its token answers as one that never
// existed, however it ended.

package transport_test

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// presentAll sends, as s's client, each request that names a session:
// a tool call (POST), the standalone stream (GET), a resume at cursor
// (GET with Last-Event-ID) and DELETE, and returns their refusals, each
// checked to be 404 session_not_found.
func presentAll(t *testing.T, ctx context.Context, s *mcptest.Session, cursor string) map[string]*mcptest.StatusError {
	t.Helper()
	out := make(map[string]*mcptest.StatusError)
	resp, err := s.Post(ctx, mcptest.ToolCall(9, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	out["POST"] = refusalOf(t, resp, http.StatusNotFound, "session_not_found")
	_, err = s.Get(ctx)
	out["GET"] = wantRefusal(t, err, http.StatusNotFound, "session_not_found")
	_, err = s.Resume(ctx, cursor)
	out["resume"] = wantRefusal(t, err, http.StatusNotFound, "session_not_found")
	out["DELETE"] = wantRefusal(t, s.Delete(ctx), http.StatusNotFound, "session_not_found")
	return out
}

// sameAnswer fails unless got and want are the same answer: status,
// headers (but Date) and body, byte for byte.
func sameAnswer(t *testing.T, what string, got, want *mcptest.StatusError) {
	t.Helper()
	gh, wh := got.Header.Clone(), want.Header.Clone()
	gh.Del("Date")
	wh.Del("Date")
	if got.Status != want.Status || string(got.RawBody) != string(want.RawBody) || !maps.EqualFunc(gh, wh, func(a, b []string) bool {
		return strings.Join(a, "\n") == strings.Join(b, "\n")
	}) {
		t.Errorf("%s: HTTP %d %v %s; a session that never existed: HTTP %d %v %s",
			what, got.Status, gh, got.RawBody, want.Status, wh, want.RawBody)
	}
}

// TestAuthEndedSession: once Alice's session has ended, deleted by her
// or evicted idle, Bob presenting its token gets, on POST, GET, resume
// and DELETE, exactly the answer of a token that never existed: nothing
// tells him that the session existed or why it ended. Alice still learns
// how her session ended.
func TestAuthEndedSession(t *testing.T) {
	ctx := testContext(t)
	clk := testenv.NewClock(time.Now())
	opts := &tidemark.Options{}
	opts.Sessions.Now = clk.Now
	opts.Sessions.IdleTTL = time.Hour
	st := newStack(t, nil, opts, auth.RequireBearerToken(verifier, nil))
	alice := st.clientWith(http.Header{"Authorization": {"Bearer alice"}})
	bob := st.clientWith(http.Header{"Authorization": {"Bearer bob"}})

	deleted, err := alice.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	delCursor := countdown(t, ctx, deleted, 2, 1, "d")[1].ID
	if err := deleted.Delete(ctx); err != nil {
		t.Fatalf("alice's DELETE: %v", err)
	}
	idle, err := alice.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	idleCursor := countdown(t, ctx, idle, 2, 1, "i")[1].ID
	clk.Advance(2 * time.Hour)
	st.h.Registry().Sweep(ctx)

	for _, tc := range []struct {
		name    string
		s       *mcptest.Session
		cursor  string
		message string // what Alice is told
	}{
		{"deleted", deleted, delCursor, "session is deleted: it was ended by DELETE; send initialize to start a new session"},
		{"idle", idle, idleCursor, "session is evicted: send initialize to start a new session"},
	} {
		unknown := presentAll(t, ctx, bob.SessionFor(strings.Repeat("7", len(tc.s.Token)), tc.s.ProtocolVersion), tc.cursor)
		for method, se := range presentAll(t, ctx, bob.SessionFor(tc.s.Token, tc.s.ProtocolVersion), tc.cursor) {
			sameAnswer(t, tc.name+" session, bob's "+method, se, unknown[method])
		}
		for method, se := range presentAll(t, ctx, tc.s, tc.cursor) {
			if se.Body.Message != tc.message {
				t.Errorf("%s session, alice's %s: message %q, want %q", tc.name, method, se.Body.Message, tc.message)
			}
		}
	}
}
