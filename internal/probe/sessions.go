// Checks unknown-session and deleted-session. Rule (MCP 2025-11-25,
// "Session Management"; DESIGN.md, "Where the rule comes from"): a session ID the
// server never issued, or one ended by DELETE, answers 404 on GET with
// Last-Event-ID and on POST; a deleted session's cursors are never
// replayed.

package probe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// unknownToken returns a session ID no server has issued.
func unknownToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "probe-unknown-" + hex.EncodeToString(b)
}

// listStatus POSTs tools/list on s and returns the status.
func listStatus(ctx context.Context, s *session) (int, error) {
	resp, err := s.post(ctx, &jsonrpc.Request{ID: s.p.nextID(), Method: "tools/list", Params: json.RawMessage("{}")})
	if err != nil {
		return 0, err
	}
	wire.Drain(resp)
	return resp.StatusCode, nil
}

// resumeStatus sends GET with Last-Event-ID on s and returns the status.
func resumeStatus(ctx context.Context, s *session, cursor string) (int, string, error) {
	rs, err := s.resume(ctx, cursor)
	if err == nil {
		rs.close()
		return rs.status, "", nil
	}
	if st := statusOf(err); st != 0 {
		return st, reasonOf(err), nil
	}
	return 0, "", err
}

func checkUnknownSession(ctx context.Context, e *env) Result {
	if r, ok := e.noSession(); ok {
		return r
	}
	s := &session{p: e.p, id: unknownToken(), version: e.base.sess.version}
	cursor := e.base.lastCursor
	if cursor == "" {
		cursor = "0"
	}
	get, reason, err := resumeStatus(ctx, s, cursor)
	if err != nil {
		return failed(nil, err, "GET with an unknown session")
	}
	post, err := listStatus(ctx, s)
	if err != nil {
		return failed([]int{get}, err, "POST with an unknown session")
	}
	statuses := []int{get, post}
	obs := fmt.Sprintf("GET %d%s, POST %d for an unknown session ID", get, withReason(reason), post)
	if get == http.StatusNotFound && post == http.StatusNotFound {
		return Result{Verdict: Pass, Statuses: statuses, Observed: obs}
	}
	return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; want 404 for both"}
}

// nonZero returns []int{status}, or nil for 0.
func nonZero(status int) []int {
	if status == 0 {
		return nil
	}
	return []int{status}
}

func checkDeletedSession(ctx context.Context, e *env) Result {
	if r, ok := e.noSession(); ok {
		return r
	}
	if r, ok := e.noStream(); ok {
		return r
	}
	s, err := e.p.initialize(ctx)
	if err != nil {
		return failed(nil, err, "initialize")
	}
	evs, status, err := e.callToEnd(ctx, s, "probe-deleted")
	if err != nil {
		return failed(nonZero(status), err, "tools/call")
	}
	cursor := ""
	if ms := messagesOf(evs); len(ms) > 0 {
		cursor = ms[0].id
	}
	if cursor == "" {
		cursor = lastCursor(evs)
	}
	del, err := s.delete(ctx)
	if err != nil {
		return failed(nil, err, "DELETE")
	}
	statuses := []int{del}
	if del == http.StatusMethodNotAllowed {
		return Result{Verdict: NA, Statuses: statuses, Observed: "DELETE 405: the server does not let clients end sessions"}
	}
	if del/100 != 2 {
		return Result{Verdict: Fail, Statuses: statuses, Observed: fmt.Sprintf("DELETE %d, want 2xx", del)}
	}
	get, reason, err := resumeStatus(ctx, s, cursor)
	if err != nil {
		return failed(statuses, err, "GET after DELETE")
	}
	post, err := listStatus(ctx, s)
	if err != nil {
		return failed(append(statuses, get), err, "POST after DELETE")
	}
	statuses = append(statuses, get, post)
	obs := fmt.Sprintf("DELETE %d, then GET %d%s with the session's cursor, POST %d", del, get, withReason(reason), post)
	if get == http.StatusNotFound && post == http.StatusNotFound {
		return Result{Verdict: Pass, Statuses: statuses, Observed: obs}
	}
	return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; want 404 for both"}
}
