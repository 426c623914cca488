package probe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// malformedCursor is a Last-Event-ID no server issues: no digits, no
// separators of the usual cursor formats.
const malformedCursor = "%%probe%%not%%a%%cursor%%"

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
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
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

func checkPriming(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	if v := e.base.sess.version; v < ProtocolVersion {
		return Result{Verdict: NA, Statuses: []int{http.StatusOK},
			Observed: "the server negotiated " + v + "; priming events begin with 2025-11-25"}
	}
	first := e.base.events[0]
	if first.id != "" && first.priming() {
		obs := fmt.Sprintf("first event: id %s, empty data", first.id)
		if first.retry > 0 {
			obs += fmt.Sprintf(", retry %dms", first.retry.Milliseconds())
		}
		return Result{Verdict: Pass, Statuses: []int{http.StatusOK}, Observed: obs}
	}
	return Result{Verdict: Fail, Statuses: []int{http.StatusOK},
		Observed: fmt.Sprintf("first event: id %q with %d bytes of data, not a priming event", first.id, len(first.data))}
}

func checkResumeExact(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	s, req, before, statuses, err := e.cutCall(ctx, "probe-resume")
	if err != nil {
		return failed(statuses, err, "POST tools/call")
	}
	cursor := lastCursor(before)
	if cursor == "" {
		return Result{Verdict: Fail, Statuses: statuses, Observed: "no event before the cut carried an ID: the stream cannot be resumed"}
	}
	rs, err := s.resume(ctx, cursor)
	if err != nil {
		return failed(statuses, err, "GET with Last-Event-ID %s", cursor)
	}
	statuses = append(statuses, rs.status)
	after, err := readToResponse(ctx, rs, req.ID)
	if err != nil {
		return failed(statuses, err, "resumed stream after %d messages", len(messagesOf(after)))
	}
	all := append(before, after...)
	nb, na, rep := len(messagesOf(before)), len(messagesOf(after)), repeats(all)
	if diff := compare(signatures(all), e.base.sigs); diff != "" || rep > 0 {
		return Result{Verdict: Fail, Statuses: statuses,
			Observed: fmt.Sprintf("cut after %d messages, resumed %d more: %s; %d repeated IDs", nb, na, orSame(diff), rep)}
	}
	return Result{Verdict: Pass, Statuses: statuses,
		Observed: fmt.Sprintf("cut after %d messages, resumed the other %d: same as the uncut call, none repeated", nb, na)}
}

func orSame(diff string) string {
	if diff == "" {
		return "same messages as the uncut call"
	}
	return diff
}

// readFor reads st until it ends, d passes or ctx ends, and returns the
// message events read.
func readFor(ctx context.Context, st *stream, d time.Duration) []event {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	defer st.close()
	stop := context.AfterFunc(ctx, st.close)
	defer stop()
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

func checkCursorAhead(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	ahead, ok := advance(e.base.lastCursor)
	if !ok {
		return Result{Verdict: NA, Observed: fmt.Sprintf("the server's cursors (%q) hold no number to advance", e.base.lastCursor)}
	}
	rs, err := e.base.sess.resume(ctx, ahead)
	return refusalResult(ctx, nil, rs, err, "a cursor beyond the newest event",
		func(s int) bool { return s >= 400 && s < 500 }, "want 4xx: an error, never a clamp")
}

func checkCursorMalformed(ctx context.Context, e *env) Result {
	rs, err := e.base.sess.resume(ctx, malformedCursor)
	return refusalResult(ctx, nil, rs, err, "a malformed cursor",
		func(s int) bool { return s == http.StatusBadRequest }, "want 400")
}

func checkForeignCursor(ctx context.Context, e *env) Result {
	if r, ok := e.noSession(); ok {
		return r
	}
	if r, ok := e.noStream(); ok {
		return r
	}
	cursor := e.base.firstMsgCursor
	if cursor == "" {
		cursor = e.base.lastCursor
	}
	if cursor == "" {
		return Result{Verdict: NA, Observed: "the server's events carry no IDs"}
	}
	other, err := e.p.initialize(ctx)
	if err != nil {
		return failed(nil, err, "initialize a second session")
	}
	rs, err := other.resume(ctx, cursor)
	return refusalResult(ctx, nil, rs, err, "another session's cursor",
		func(s int) bool { return s >= 400 && s < 500 && s != http.StatusNotFound },
		"want 4xx but 404: 404 tells the client its own live session is gone")
}

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

func withReason(r string) string {
	if r == "" {
		return ""
	}
	return " " + r
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

func checkStreamIsolation(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	// A server told to keep fewer events than the two calls make must
	// compact call A's cursor, or end a stream whose reader it outran:
	// that is retention, not a failure of isolation (regression:
	// --retention-events 20 failed this check against a correct server,
	// found by a tester).
	if made := 2 * len(e.base.events); e.cfg.RetentionEvents > 0 && made > e.cfg.RetentionEvents {
		return Result{Verdict: NA, Observed: fmt.Sprintf(
			"two calls make about %d events, more than --retention-events %d: raise it or use a shorter call", made, e.cfg.RetentionEvents)}
	}
	s, err := e.p.initialize(ctx)
	if err != nil {
		return failed(nil, err, "initialize")
	}
	reqA, err := e.p.callRequest(e.cfg.Tool, e.cfg.Args, "probe-isolation-a")
	if err != nil {
		return failed(nil, err, "tools/call")
	}
	reqB, err := e.p.callRequest(e.cfg.Tool, e.cfg.Args, "probe-isolation-b")
	if err != nil {
		return failed(nil, err, "tools/call")
	}
	stA, err := s.call(ctx, reqA)
	if err != nil {
		return failed(nil, err, "POST tools/call A")
	}
	stB, err := s.call(ctx, reqB)
	if err != nil {
		stA.close()
		return failed([]int{stA.status}, err, "POST tools/call B")
	}
	statuses := []int{stA.status, stB.status}
	beforeA, err := readFirst(ctx, stA, len(e.base.sigs)/2)
	stA.close()
	if err != nil {
		stB.close()
		return failed(statuses, err, "call A before the cut")
	}
	sleep(ctx, settle)
	evsB, err := readToResponse(ctx, stB, reqB.ID)
	if err != nil {
		return failed(statuses, err, "call B")
	}
	cursor := lastCursor(beforeA)
	if cursor == "" {
		return Result{Verdict: Fail, Statuses: statuses, Observed: "no event of call A carried an ID: the stream cannot be resumed"}
	}
	rs, err := s.resume(ctx, cursor)
	if err != nil {
		return failed(statuses, err, "GET with call A's cursor")
	}
	statuses = append(statuses, rs.status)
	afterA, err := readToResponse(ctx, rs, reqA.ID)
	if err != nil {
		return failed(statuses, err, "call A's resumed stream")
	}
	idsB := map[string]bool{}
	for _, ev := range messagesOf(evsB) {
		if ev.id != "" {
			idsB[ev.id] = true
		}
	}
	foreign := 0
	for _, ev := range messagesOf(afterA) {
		tok, isProgress := progressToken(ev.msg)
		r, isResp := ev.msg.(*jsonrpc.Response)
		if idsB[ev.id] || (isProgress && tok == "probe-isolation-b") || (isResp && r.ID == reqB.ID) {
			foreign++
		}
	}
	all := append(beforeA, afterA...)
	diff := compare(signatures(all), e.base.sigs)
	obs := fmt.Sprintf("two calls on one session; call A cut after %d messages, resumed %d more, %d of them call B's",
		len(messagesOf(beforeA)), len(messagesOf(afterA)), foreign)
	if foreign > 0 || diff != "" {
		if diff != "" {
			obs += "; " + diff
		}
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs}
	}
	return Result{Verdict: Pass, Statuses: statuses, Observed: obs}
}

func checkCompacted(ctx context.Context, e *env) Result {
	n := e.cfg.RetentionEvents
	if n <= 0 {
		return Result{Verdict: NA, Observed: "give --retention-events N (the server's per-session retention) to run it"}
	}
	if r, ok := e.noStream(); ok {
		return r
	}
	s, err := e.p.initialize(ctx)
	if err != nil {
		return failed(nil, err, "initialize")
	}
	// The first call's first cursor, then calls until more than n events
	// (each with an ID) have followed it: the cursor's successors are gone.
	var (
		cursor   string
		newer    int
		calls    int
		statuses []int
		mu       sync.Mutex
	)
	runCall := func(i int) error {
		evs, _, err := e.callToEnd(ctx, s, fmt.Sprintf("probe-compacted-%d", i))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		for _, ev := range evs {
			if ev.id == "" {
				continue
			}
			if cursor == "" {
				cursor = ev.id
				continue
			}
			newer++
		}
		return nil
	}
	if err := runCall(0); err != nil {
		return failed(nil, err, "tools/call")
	}
	if cursor == "" {
		return Result{Verdict: Fail, Observed: "the server's events carry no IDs"}
	}
	// Calls run a few at a time, but never so many that their events
	// together near the retention: a reader then falls below the floor
	// while it reads, which a correct server answers by ending its stream
	// (regression: --retention-events 30 with a 22-event call failed this
	// check against Tidemark, "the stream ended without the response").
	parallel := max(1, min(4, n/(2*len(e.base.events))))
	for i := 1; newer <= n+1; i += parallel {
		if calls > 10000 {
			return Result{Verdict: Fail, Observed: fmt.Sprintf("%d calls did not produce %d events", calls, n+2)}
		}
		var wg sync.WaitGroup
		errs := make([]error, parallel)
		for j := range parallel {
			wg.Go(func() { errs[j] = runCall(i + j) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return failed(nil, err, "tools/call %d", calls+1)
			}
		}
	}
	rs, err := s.resume(ctx, cursor)
	what := fmt.Sprintf("a cursor followed by %d newer events (retention %d)", newer, n)
	return refusalResult(ctx, statuses, rs, err, what,
		func(s int) bool { return s == http.StatusConflict },
		"want 409: the events after the cursor are compacted (if the server retains more than --retention-events, give its real retention)")
}

// conn is what one connection of the takeover and concurrent-resume
// checks saw.
type conn struct {
	label  string
	status int
	reason string
	evs    []event // the events it delivered
	err    error   // the refusal or failure of a resume; nil if it streamed
}

func (c *conn) describe() string {
	switch {
	case c.err != nil && c.status != 0:
		return fmt.Sprintf("%s %d%s", c.label, c.status, withReason(c.reason))
	case c.err != nil:
		return c.label + " failed: " + c.err.Error()
	}
	return fmt.Sprintf("%s %d with %d messages", c.label, c.status, len(messagesOf(c.evs)))
}

// follow reads st into c until the response to id, the end of the answer,
// or done is closed (plus a grace of 500 ms, for what it would still
// deliver); it reports whether it got the response.
func follow(ctx context.Context, st *stream, c *conn, id jsonrpc.ID, done <-chan struct{}) bool {
	defer st.close()
	stop := context.AfterFunc(ctx, st.close)
	defer stop()
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		select {
		case <-done:
			select {
			case <-time.After(500 * time.Millisecond):
			case <-quit:
			}
		case <-quit:
		case <-ctx.Done():
		}
		st.close()
	}()
	for {
		ev, err := st.next()
		if err != nil {
			return false
		}
		c.evs = append(c.evs, ev)
		if r, ok := ev.msg.(*jsonrpc.Response); ok && r.ID == id {
			return true
		}
	}
}

// readers runs the stream of req, whose connection orig has delivered
// before, on orig and on len(labels) resumes from the newest cursor sent
// at once, all read until one of them delivers the call's response. It
// returns the connections (orig first) and the one that delivered the
// response (nil if none).
func readers(ctx context.Context, s *session, req *jsonrpc.Request, orig *stream, before []event, labels ...string) ([]*conn, *conn) {
	cursor := lastCursor(before)
	conns := []*conn{{label: "original", status: orig.status}}
	for _, l := range labels {
		conns = append(conns, &conn{label: l})
	}
	answered := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var winner *conn
	got := func(c *conn) {
		mu.Lock()
		if winner == nil {
			winner = c
		}
		mu.Unlock()
		once.Do(func() { close(answered) })
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if follow(ctx, orig, conns[0], req.ID, answered) {
			got(conns[0])
		}
	})
	for _, c := range conns[1:] {
		wg.Go(func() {
			rs, err := s.resume(ctx, cursor)
			if err != nil {
				c.status, c.reason, c.err = statusOf(err), reasonOf(err), err
				return
			}
			c.status = rs.status
			if follow(ctx, rs, c, req.ID, answered) {
				got(c)
			}
		})
	}
	wg.Wait()
	return conns, winner
}

// shared counts the message events (by ID) that reached more than one
// connection.
func shared(conns []*conn) int {
	seen := map[string]int{}
	n := 0
	for _, c := range conns {
		for _, ev := range messagesOf(c.evs) {
			if ev.id == "" {
				continue
			}
			seen[ev.id]++
			if seen[ev.id] == 2 {
				n++
			}
		}
	}
	return n
}

// startForReaders opens a session, starts the call and reads half the
// baseline's messages, leaving the connection open.
func (e *env) startForReaders(ctx context.Context, token string) (*session, *jsonrpc.Request, *stream, []event, error) {
	s, req, st, err := e.startCall(ctx, token)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	// Resume right after a message arrives, from that newest cursor:
	// nothing is owed to a new connection yet, so an event two
	// connections both receive was sent to both.
	before, err := readFirst(ctx, st, max(1, len(e.base.sigs)/2))
	if err != nil {
		st.close()
		return nil, nil, nil, nil, fmt.Errorf("before the resume: %w", err)
	}
	if lastCursor(before) == "" {
		st.close()
		return nil, nil, nil, nil, fmt.Errorf("no event carried an ID: the stream cannot be resumed")
	}
	return s, req, st, before, nil
}

// tooFast is the result of the two-reader checks when the tool's messages
// come too close together to judge them (see minGap). Regression: with
// --args '{"n":20}' (no delay) both checks failed against a correct server,
// "11 events on both", found by a tester.
func (e *env) tooFast() (Result, bool) {
	if e.base.gap >= minGap {
		return Result{}, false
	}
	return Result{Verdict: NA, Observed: fmt.Sprintf(
		"the baseline call's %d messages came about %v apart, closer than a resume takes (%v): give the tool a delay between messages (e.g. delay_ms 10 in --args)",
		len(messagesOf(e.base.events)), e.base.gap.Round(time.Microsecond), minGap)}, true
}

func checkTakeover(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	if r, ok := e.tooFast(); ok {
		return r
	}
	s, req, orig, before, err := e.startForReaders(ctx, "probe-takeover")
	if err != nil {
		return failed(nil, err, "tools/call")
	}
	conns, winner := readers(ctx, s, req, orig, before, "GET")
	get := conns[1]
	statuses := []int{conns[0].status, get.status}
	obs := fmt.Sprintf("resumed while the original connection was open: %s; the original then delivered %d more messages",
		get.describe(), len(messagesOf(conns[0].evs)))
	if get.err != nil {
		return Result{Verdict: Fail, Statuses: statuses,
			Observed: obs + "; a client whose connection died unseen (half-open) cannot resume"}
	}
	if n := shared(conns); n > 0 {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs + fmt.Sprintf("; %d events on both", n)}
	}
	if winner != get {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; the resumed stream did not deliver the call's response"}
	}
	if diff := compare(signatures(append(before, get.evs...)), e.base.sigs); diff != "" {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; " + diff}
	}
	return Result{Verdict: Pass, Statuses: statuses, Observed: obs + "; the resumed stream completed the call"}
}

func checkConcurrentResume(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	if r, ok := e.tooFast(); ok {
		return r
	}
	s, req, orig, before, err := e.startForReaders(ctx, "probe-concurrent")
	if err != nil {
		return failed(nil, err, "tools/call")
	}
	conns, winner := readers(ctx, s, req, orig, before, "GET", "GET")
	var statuses []int
	var parts []string
	for _, c := range conns {
		statuses = append(statuses, c.status)
		parts = append(parts, c.describe())
	}
	n := shared(conns)
	obs := fmt.Sprintf("two resumes at once while the original stays open: %s; %d events on two connections", strings.Join(parts, ", "), n)
	if winner == nil {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; none delivered the call's response"}
	}
	// The original delivered before; the winner (the original or a
	// resume from before's last cursor) must deliver the rest.
	if diff := compare(signatures(append(before, winner.evs...)), e.base.sigs); diff != "" {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; the connection that finished: " + diff}
	}
	if n > 0 {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs}
	}
	return Result{Verdict: Pass, Statuses: statuses, Observed: obs}
}

// stormRun is one session of the storm.
type stormRun struct {
	status     int
	firstEvent time.Duration // from the release to the first event
	done       time.Duration // from the release to the call's response
	repeated   int
	diff       string
	err        error
}

func checkStorm(ctx context.Context, e *env) Result {
	n := e.cfg.Storm
	if n <= 0 {
		return Result{Verdict: NA, Observed: "--storm 0"}
	}
	if r, ok := e.noStream(); ok {
		return r
	}
	type prepared struct {
		s      *session
		req    *jsonrpc.Request
		before []event
	}
	preps := make([]prepared, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, req, before, _, err := e.cutCall(ctx, fmt.Sprintf("probe-storm-%d", i))
			preps[i], errs[i] = prepared{s, req, before}, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return failed(nil, err, "storm session %d of %d", i+1, n)
		}
	}
	runs := make([]stormRun, n)
	release := make(chan struct{})
	var t0 time.Time
	for i := range n {
		wg.Go(func() {
			p, r := preps[i], &runs[i]
			<-release
			rs, err := p.s.resume(ctx, lastCursor(p.before))
			if err != nil {
				r.status, r.err = statusOf(err), err
				return
			}
			r.status = rs.status
			stop := context.AfterFunc(ctx, rs.close)
			defer stop()
			defer rs.close()
			var after []event
			for {
				ev, err := rs.next()
				if err != nil {
					r.err = fmt.Errorf("stream ended without the response: %w", err)
					return
				}
				if len(after) == 0 {
					r.firstEvent = time.Since(t0)
				}
				after = append(after, ev)
				if resp, ok := ev.msg.(*jsonrpc.Response); ok && resp.ID == p.req.ID {
					break
				}
			}
			r.done = time.Since(t0)
			all := append(p.before, after...)
			r.repeated = repeats(all)
			r.diff = compare(signatures(all), e.base.sigs)
		})
	}
	t0 = time.Now()
	close(release)
	wg.Wait()
	total := time.Since(t0)

	var statuses []int
	errCount, dup, incomplete := 0, 0, 0
	var firsts, dones []time.Duration
	firstErr := ""
	for _, r := range runs {
		statuses = append(statuses, r.status)
		dup += r.repeated
		switch {
		case r.err != nil:
			errCount++
			if firstErr == "" {
				firstErr = r.err.Error()
			}
		case r.diff != "":
			incomplete++
			if firstErr == "" {
				firstErr = r.diff
			}
		default:
			firsts = append(firsts, r.firstEvent)
			dones = append(dones, r.done)
		}
	}
	codes := map[int]int{}
	for _, s := range statuses {
		codes[s]++
	}
	var cs []string
	for _, c := range slices.Sorted(maps.Keys(codes)) {
		cs = append(cs, fmt.Sprintf("%d×%d", codes[c], c))
	}
	obs := fmt.Sprintf("%d sessions resumed at once: GET %s; all done in %dms (first event p50 %s, max %s); %d errors, %d duplicates, %d incomplete",
		n, strings.Join(cs, " "), total.Milliseconds(), pct(firsts, 50), pct(firsts, 100), errCount, dup, incomplete)
	if errCount+dup+incomplete > 0 {
		if firstErr != "" {
			obs += "; first problem: " + firstErr
		}
		return Result{Verdict: Fail, Statuses: dedupe(statuses), Observed: obs}
	}
	return Result{Verdict: Pass, Statuses: dedupe(statuses), Observed: obs}
}

// dedupe returns the distinct statuses, sorted: a storm's statuses are
// many of the same.
func dedupe(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// pct returns the p-th percentile of ds, in milliseconds.
func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	ds = slices.Clone(ds)
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := (len(ds)*p + 99) / 100
	i = min(max(i-1, 0), len(ds)-1)
	return fmt.Sprintf("%dms", ds[i].Milliseconds())
}
