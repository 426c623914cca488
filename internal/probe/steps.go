// Steps the checks share: skipping a check the server's answers make
// meaningless (no stream, no session), starting and cutting a tool call,
// waiting, reading the first messages, comparing a resumed call's messages
// with the uncut one's, and judging a GET that a careful server refuses.

package probe

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// noStream is the result of stream checks against a server that answers
// tool calls with application/json.
func (e *env) noStream() (Result, bool) {
	if e.base.sse {
		return Result{}, false
	}
	return Result{Verdict: Fail, Statuses: []int{http.StatusOK},
		Observed: "POST tools/call answered application/json: no stream, nothing to resume"}, true
}

// noSession is the result of session checks against a server that issues
// no session IDs (MCP 2025-11-25 makes them optional).
func (e *env) noSession() (Result, bool) {
	if e.base.sess.id != "" {
		return Result{}, false
	}
	return Result{Verdict: NA, Statuses: []int{http.StatusOK},
		Observed: "initialize answered without Mcp-Session-Id: the server keeps no sessions"}, true
}

// startCall opens a session and starts the configured tool call on it
// with progress token token.
func (e *env) startCall(ctx context.Context, token string) (*session, *jsonrpc.Request, *stream, error) {
	s, err := e.p.initialize(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("initialize: %w", err)
	}
	req, err := e.p.callRequest(e.cfg.Tool, e.cfg.Args, token)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := s.call(ctx, req)
	if err != nil {
		return nil, nil, nil, err
	}
	return s, req, st, nil
}

// cutCall opens a session, starts the tool call (progress token token)
// and reads half the baseline's messages (at least the first event), then
// cuts the connection. It returns the session, the request, the events
// read and the POST's status.
func (e *env) cutCall(ctx context.Context, token string) (*session, *jsonrpc.Request, []event, []int, error) {
	s, req, st, err := e.startCall(ctx, token)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	statuses := []int{st.status}
	before, err := readFirst(ctx, st, len(e.base.sigs)/2)
	st.close()
	if err != nil {
		return nil, nil, nil, statuses, fmt.Errorf("before the cut: %w", err)
	}
	if !sleep(ctx, settle) {
		return nil, nil, nil, statuses, ctx.Err()
	}
	return s, req, before, statuses, nil
}

// settle is how long the probe waits after cutting a connection before it
// resumes the stream: a server that allows one reader per stream must see
// the old connection end first (a loopback FIN takes microseconds). The
// takeover check covers resuming while the old connection is still open.
const settle = 100 * time.Millisecond

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// readFirst reads k messages, or the first event when k is 0.
func readFirst(ctx context.Context, st *stream, k int) ([]event, error) {
	if k > 0 {
		return readMessages(ctx, st, k)
	}
	e, err := st.next()
	if err != nil {
		return nil, err
	}
	return []event{e}, nil
}

// compare says how the messages received across a cut differ from the
// uncut call's; "" when they match.
func compare(got, want []string) string {
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			return fmt.Sprintf("%d messages, want %d (missing %q)", len(got), len(want), want[i])
		case i >= len(want):
			return fmt.Sprintf("%d messages, want %d (extra %q)", len(got), len(want), got[i])
		case got[i] != want[i]:
			return fmt.Sprintf("message %d is %q, want %q", i+1, got[i], want[i])
		}
	}
	return ""
}

// callToEnd calls the configured tool on s with progress token token and
// reads its stream up to the response. status is the POST's HTTP status
// (0 when none arrived).
func (e *env) callToEnd(ctx context.Context, s *session, token string) (evs []event, status int, err error) {
	req, err := e.p.callRequest(e.cfg.Tool, e.cfg.Args, token)
	if err != nil {
		return nil, 0, err
	}
	st, err := s.call(ctx, req)
	if err != nil {
		return nil, 0, fmt.Errorf("POST: %w", err)
	}
	evs, err = readToResponse(ctx, st, req.ID)
	return evs, st.status, err
}

// readFor reads st until it ends, d passes or ctx ends, and returns the
// message events read.
func readFor(ctx context.Context, st *stream, d time.Duration) []event {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	defer st.closeWith(ctx)()
	var evs []event
	for {
		e, err := st.next()
		if err != nil {
			return messagesOf(evs)
		}
		evs = append(evs, e)
	}
}

// refusalResult judges a GET that a careful server refuses: rs and err are
// what session.resume returned; ok says which statuses pass, okWhy what
// the failure message adds.
func refusalResult(ctx context.Context, statuses []int, rs *stream, err error, what string, ok func(status int) bool, okWhy string) Result {
	if err == nil {
		statuses = append(statuses, rs.status)
		msgs := readFor(ctx, rs, time.Second)
		return Result{Verdict: Fail, Statuses: statuses,
			Observed: fmt.Sprintf("GET 200 for %s: accepted, streamed %d messages", what, len(msgs))}
	}
	st := statusOf(err)
	if st == 0 {
		return failed(statuses, err, "GET for %s", what)
	}
	statuses = append(statuses, st)
	obs := fmt.Sprintf("GET %d", st)
	if r := reasonOf(err); r != "" {
		obs += " " + r
	}
	obs += " for " + what
	if ok(st) {
		return Result{Verdict: Pass, Statuses: statuses, Observed: obs}
	}
	return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; " + okWhy}
}

func withReason(r string) string {
	if r == "" {
		return ""
	}
	return " " + r
}
