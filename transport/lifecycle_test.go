// lifecycle_test.go tests a session's life over HTTP: DELETE, idle and
// capacity eviction, JSON answers, batches, server-initiated close,
// priming, keep-alives and shutdown.

package transport_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/transport"
)

// wantGone checks that POST, GET, resume and DELETE of s all answer 404
// session_not_found.
func wantGone(t *testing.T, ctx context.Context, s *mcptest.Session, cursor string) {
	t.Helper()
	resp, err := s.Post(ctx, mcptest.ToolCall(99, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	refusalOf(t, resp, http.StatusNotFound, "session_not_found")
	_, err = s.Get(ctx)
	wantRefusal(t, err, http.StatusNotFound, "session_not_found")
	_, err = s.Resume(ctx, cursor)
	wantRefusal(t, err, http.StatusNotFound, "session_not_found")
	wantRefusal(t, s.Delete(ctx), http.StatusNotFound, "session_not_found")
}

// TestNotFoundIsOneMessagePerState: a token that answers 404 answers it
// with the same reason, code and message whatever the request's method
// (POST of a call or a notification, GET, GET with Last-Event-ID,
// DELETE), the message naming the state the registry knows it in: unknown
// (never issued, or a value holding a live token twice), deleted (ended
// by DELETE, which no eviction is) or superseded. No 404 names any part
// of a session token.
func TestNotFoundIsOneMessagePerState(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	live := st.initialize(t, ctx, "")
	deleted := st.initialize(t, ctx, "")
	deletedCursor := countdown(t, ctx, deleted, 2, 1, "d")[1].ID
	if err := deleted.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	superseded := st.initialize(t, ctx, "")
	supersededCursor := countdown(t, ctx, superseded, 3, 1, "s")[1].ID
	replacement := supersede(t, ctx, superseded)
	liveCursor := countdown(t, ctx, live, 4, 1, "l")[1].ID

	cases := []struct {
		name    string
		s       *mcptest.Session
		cursor  string
		message string
	}{
		{"never issued", st.client.SessionFor("NEVERISSUEDNEVERISSUEDNEVE", "2025-11-25"), liveCursor,
			"session is unknown: send initialize to start a new session"},
		{"a live token twice", st.client.SessionFor(live.Token+","+live.Token, "2025-11-25"), liveCursor,
			"session is unknown: send initialize to start a new session"},
		{"deleted", deleted, deletedCursor, "session is deleted: it was ended by DELETE; send initialize to start a new session"},
		{"superseded", superseded, supersededCursor, "session is superseded: send initialize to start a new session"},
	}
	secrets := []string{live.Token, deleted.Token, superseded.Token, replacement}
	for _, tc := range cases {
		methods := map[string]func() error{
			"POST call": func() error {
				_, err := tc.s.Call(ctx, mcptest.ToolCall(20, "echo", map[string]any{"text": "x"}, nil))
				return err
			},
			"POST notification": func() error {
				resp, err := tc.s.Post(ctx, mcptest.MustNotify("notifications/roots/list_changed", nil))
				if err != nil {
					return err
				}
				return mcptest.ReadStatusError(resp)
			},
			"GET":                    func() error { _, err := tc.s.Get(ctx); return err },
			"GET with Last-Event-ID": func() error { _, err := tc.s.Resume(ctx, tc.cursor); return err },
			"DELETE":                 func() error { return tc.s.Delete(ctx) },
		}
		for method, do := range methods {
			se, ok := mcptest.AsStatusError(do())
			if !ok || se.Status != http.StatusNotFound || se.Reason() != "session_not_found" || se.Body.Code != -32001 ||
				se.Body.Message != tc.message || string(se.Body.ID) != "null" {
				t.Errorf("%s, %s: %+v; want 404 session_not_found -32001, id null, %q", tc.name, method, se, tc.message)
				continue
			}
			for _, tok := range secrets {
				if strings.Contains(string(se.RawBody), store.Prefix(tok)) {
					t.Errorf("%s, %s: the 404 %s names the prefix of a session token", tc.name, method, se.RawBody)
				}
			}
		}
	}
}

func TestDelete(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	keep := st.initialize(t, ctx, "")
	evs := countdown(t, ctx, s, 2, 2, "p")
	// An open GET stream of the session ends when it is deleted.
	g, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	next(t, g)

	if err := s.Delete(ctx); err != nil {
		t.Fatalf("DELETE: %v, want 204", err)
	}
	wantEOF(t, g)
	wantGone(t, ctx, s, evs[1].ID)
	status, _, err := st.h.Registry().Status(ctx, s.Token)
	if err != nil || status != replay.Deleted {
		t.Fatalf("status after DELETE = %v, %v; want deleted (tombstone)", status, err)
	}
	// Other sessions are untouched.
	countdown(t, ctx, keep, 2, 2, "k")
}

// TestIdleEviction: a session with no request and no open stream for the
// idle TTL is evicted by the sweeper and answers 404; one with an open
// stream is not idle.
func TestIdleEviction(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{
		Sessions:      session.Options{IdleTTL: 300 * time.Millisecond},
		SweepInterval: 20 * time.Millisecond,
	}, nil)
	idle := st.initialize(t, ctx, "")
	evs := countdown(t, ctx, idle, 2, 1, "i")
	busy := st.initialize(t, ctx, "")
	g, err := busy.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	next(t, g)

	// Watch the registry rather than poll over HTTP: a request would
	// count as activity.
	for {
		status, _, err := st.h.Registry().Status(ctx, idle.Token)
		if err != nil {
			t.Fatal(err)
		}
		if status == replay.Evicted {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the idle session was not evicted: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	_, err = st.store.Get(ctx, idle.Token)
	var ended *store.EndedError
	if !errors.As(err, &ended) || ended.Reason != store.EndIdle {
		t.Fatalf("record of the idle session: %v, want a tombstone with reason idle", err)
	}
	wantGone(t, ctx, idle, evs[1].ID)
	// The session with an open stream outlived several TTLs and works.
	if status, _, _ := st.h.Registry().Status(ctx, busy.Token); status != replay.Live {
		t.Fatalf("the session with an open stream is %v, want live", status)
	}
	countdown(t, ctx, busy, 2, 1, "b")
}

// TestCapacityEviction: with room for two sessions that cannot hibernate,
// a third initialize evicts the least recently used one, although its
// standalone stream is open. (Sessions that hibernate keep a session with
// an open stream: cmd/tidemark's TestCapacityRefusesWhenAllBusy.)
func TestCapacityEviction(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{Sessions: session.Options{MaxSessions: 2, HibernateAfter: -1}}, nil)
	a := st.initialize(t, ctx, "")
	b := st.initialize(t, ctx, "")
	evsB := countdown(t, ctx, b, 2, 1, "b")
	gb, err := b.Get(ctx) // b's open stream ends with b
	if err != nil {
		t.Fatal(err)
	}
	defer gb.Close()
	next(t, gb)
	countdown(t, ctx, a, 2, 1, "a") // a is now the most recently used
	c := st.initialize(t, ctx, "")

	wantEOF(t, gb)
	wantGone(t, ctx, b, evsB[1].ID)
	_, err = st.store.Get(ctx, b.Token)
	var ended *store.EndedError
	if !errors.As(err, &ended) || ended.Reason != store.EndCapacity {
		t.Fatalf("record of the evicted session: %v, want a tombstone with reason capacity", err)
	}
	countdown(t, ctx, a, 3, 1, "a")
	countdown(t, ctx, c, 2, 1, "c")
	if n := st.h.Registry().Len(); n != 2 {
		t.Fatalf("registry holds %d sessions, want 2", n)
	}
}

// TestJSONResponse: with Options.Transport.JSONResponse a POST of a request
// is answered with one application/json body holding exactly the
// response; the call's progress goes to the standalone stream.
func TestJSONResponse(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{Transport: transport.Options{JSONResponse: true}}, nil)
	s := st.initialize(t, ctx, "")
	g, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	next(t, g)

	resp, err := s.Post(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "hello"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("got HTTP %d %q, want 200 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if want := `{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hello"}]}}`; string(body) != want {
		t.Fatalf("body %s, want %s", body, want)
	}

	resp, err = s.Post(ctx, mcptest.ToolCall(3, "countdown", map[string]any{"n": 2}, "j"))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("countdown answer: %v, %v", msgs, err)
	}
	if r, ok := msgs[0].(*jsonrpc.Response); !ok || r.ID != mcptest.ID(3) || toolText(t, r) != "countdown of 2 finished" {
		t.Fatalf("countdown answer %v, want the result of 3", msgs[0])
	}
	for step := 1; step <= 2; step++ {
		p := progressOf(t, next(t, g))
		if p.Token != "j" || p.Progress != float64(step) {
			t.Fatalf("GET stream: progress %+v, want token j step %d", p, step)
		}
	}
}

// TestBatch2025_03_26: a 2025-03-26 client (no MCP-Protocol-Version header)
// may POST a batch; both responses come back on one stream, without
// priming events (that protocol has none), which then ends.
func TestBatch2025_03_26(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "2025-03-26")
	if s.VersionHeader != "" || s.ProtocolVersion != "2025-03-26" {
		t.Fatalf("session version %q header %q, want 2025-03-26 and no header", s.ProtocolVersion, s.VersionHeader)
	}
	resp, err := s.Post(ctx,
		mcptest.ToolCall(2, "echo", map[string]any{"text": "one"}, nil),
		mcptest.ToolCall(3, "echo", map[string]any{"text": "two"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := mcptest.OpenStream(resp)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	evs, err := bs.Collect()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range evs {
		r, ok := e.Response()
		if !ok {
			t.Fatalf("batch stream event %v: want only responses", e.Event)
		}
		got[fmt.Sprint(r.ID.Raw())] = toolText(t, r)
	}
	if len(evs) != 2 || got["2"] != "one" || got["3"] != "two" {
		t.Fatalf("batch answered %v, want 2→one and 3→two", got)
	}
}

// TestNotificationsOnly: a POST of notifications only is answered 202 with
// an empty body.
func TestNotificationsOnly(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	before := st.bounds(t, s.Token)
	resp, err := s.Post(ctx, mcptest.MustNotify("notifications/roots/list_changed", nil))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || len(body) != 0 {
		t.Fatalf("got HTTP %d with %d bytes %q, want 202 and no body", resp.StatusCode, len(body), body)
	}
	if after := st.bounds(t, s.Token); after != before {
		t.Fatalf("a notification changed the log: %+v → %+v", before, after)
	}
	countdown(t, ctx, s, 2, 1, "n")
}

// TestServerClosesStream (SEP-1699): a handler that closes its SSE stream
// makes the POST stream end with a retry field; the client resumes by GET
// and gets the rest, then the result.
func TestServerClosesStream(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	mcp.AddTool(server, &mcp.Tool{Name: "hangup"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 250 * time.Millisecond})
		req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "after the hang-up"}}}, nil, nil
	})
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")
	p, err := s.Call(ctx, mcptest.ToolCall(2, "hangup", struct{}{}, "h"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	evs, err := p.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("POST stream: %v, want the priming event and the close", evs)
	}
	wantPriming(t, evs[0], "", time.Second)
	closeEv := evs[1]
	if !closeEv.HasID || closeEv.Retry != 250*time.Millisecond || len(closeEv.Data) != 0 {
		t.Fatalf("last POST event %v, want an id, retry 250ms and no data", closeEv.Event)
	}
	if c := parseCursor(t, closeEv.ID); c.Stream != parseCursor(t, evs[0].ID).Stream {
		t.Fatalf("the close event %s is not of the POST stream %s", closeEv.ID, evs[0].ID)
	}

	rs, err := s.Resume(ctx, closeEv.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	got, err := rs.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("resumed stream: %v, want priming, progress, result", got)
	}
	wantResumePriming(t, got[0], closeEv.ID, time.Second)
	if p := progressOf(t, got[1]); p.Token != "h" || p.Progress != 1 {
		t.Fatalf("resumed progress %+v, want token h progress 1", p)
	}
	if !got[2].IsResponseTo(mcptest.ID(2)) || toolText(t, must(got[2].Response())) != "after the hang-up" {
		t.Fatalf("resumed stream ends with %v, want the result of 2", got[2].Event)
	}
}

// TestPrimingAndHeaders: every SSE stream (POST, GET, resumed GET) starts
// with a priming event carrying the configured retry, and every SSE
// response says X-Accel-Buffering: no.
func TestPrimingAndHeaders(t *testing.T) {
	ctx := testContext(t)
	const retry = 1500 * time.Millisecond
	st := newStack(t, nil, &tidemark.Options{Transport: transport.Options{Retry: retry}}, nil)
	s := st.initialize(t, ctx, "")
	check := func(name string, stm *mcptest.Stream, resumedFrom string) mcptest.Event {
		t.Helper()
		h := stm.Resp.Header
		if h.Get("X-Accel-Buffering") != "no" || h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-cache, no-transform" {
			t.Fatalf("%s headers: %v", name, h)
		}
		e := next(t, stm)
		if resumedFrom != "" {
			wantResumePriming(t, e, resumedFrom, retry)
		} else {
			wantPriming(t, e, "", retry)
		}
		return e
	}
	p, err := s.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 1}, "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	first := check("POST", p, "")
	g, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	check("GET", g, "")
	r, err := s.Resume(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	check("resumed GET", r, first.ID)
}

// TestKeepAlive: an idle SSE stream gets a comment line within the
// keep-alive interval.
func TestKeepAlive(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{Transport: transport.Options{KeepAlive: 100 * time.Millisecond}}, nil)
	s := st.initialize(t, ctx, "")
	req, _ := s.NewRequest(ctx, http.MethodGet, nil)
	resp, err := st.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var lines []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("GET stream ended after %q: %v", lines, err)
		}
		lines = append(lines, line)
		if strings.HasPrefix(line, ":") {
			break
		}
	}
	// The priming event, then the comment.
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "id: ") || lines[1] != "retry: 1000\n" || lines[2] != "data:\n" ||
		lines[3] != "\n" || lines[4] != ": keep-alive\n" {
		t.Fatalf("GET stream lines %q, want the priming event then \": keep-alive\"", lines)
	}
	if l, _ := br.ReadString('\n'); l != "\n" {
		t.Fatalf("after the comment: %q, want the blank line", l)
	}
}

// TestShutdown: Handler.Shutdown makes every open stream send a final
// retry field and end; new requests get 503 unavailable.
func TestShutdown(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")
	get, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer get.Close()
	next(t, get)
	post, err := s.Call(ctx, gatedCall(2, "s", 3))
	if err != nil {
		t.Fatal(err)
	}
	defer post.Close()
	next(t, post)
	g.release("s", 1)
	progressOf(t, next(t, post))

	done := make(chan struct{})
	go func() {
		defer close(done)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st.h.Shutdown(sctx)
	}()
	for name, stm := range map[string]*mcptest.Stream{"GET": get, "POST": post} {
		e := next(t, stm)
		if e.HasID || len(e.Data) != 0 || e.Retry != time.Second {
			t.Fatalf("%s: last event %v, want only retry: 1000", name, e.Event)
		}
		wantEOF(t, stm)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Shutdown did not return after the streams closed")
	}
	resp, err := s.Post(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	refusalOf(t, resp, http.StatusServiceUnavailable, "unavailable")
	_, err = s.Get(ctx)
	wantRefusal(t, err, http.StatusServiceUnavailable, "unavailable")
	g.release("s", 2) // let the handler finish
}

// TestShutdownDeliversWhatTheLogHolds: a call answered before Shutdown
// whose stream has not written the answer yet (its client reads slowly)
// still gets it: at shutdown a stream first writes the events the log
// holds, and a stream that is over then needs no retry field.
func TestShutdownDeliversWhatTheLogHolds(t *testing.T) {
	const (
		pad     = 32 << 10 // bytes of message per progress notification
		stuckAt = 12       // 384 KiB of notifications: more than the connection's buffers hold
		n       = stuckAt + 1
	)
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	watch := &stallWatch{stalled: 500 * time.Millisecond, detected: make(chan struct{})}
	st := newStackOn(t, server, &tidemark.Options{Retention: eventlog.Options{MaxBytes: -1}}, watch.wrap, smallSendBuffer)
	s := st.initialize(t, ctx, "")
	post, err := s.Call(ctx, mcptest.ToolCall(2, "gated", GatedArgs{Gate: "g", N: n, Pad: pad}, "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer post.Close()
	first := parseCursor(t, next(t, post).ID).Sequence
	g.release("g", stuckAt)
	select {
	case <-watch.detected:
	case <-ctx.Done():
		t.Fatal("the stream's writes never stalled")
	}
	// The call is answered (the log holds its last notification and its
	// response) while the stream's writes stall.
	g.release("g", 1)
	waitFor(t, ctx, "the response in the log", func() bool { return st.bounds(t, s.Token).HWM == first+n+1 })
	if err := st.h.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st.h.Shutdown(sctx)
	}()
	evs, err := post.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n+1 || !evs[n].IsResponseTo(mcptest.ID(2)) {
		t.Fatalf("after Shutdown the stream delivered %d events ending with %v; want the %d notifications and the response", len(evs), evs[len(evs)-1].Event, n)
	}
	<-done
}

// gatedCallInFlight starts a stack serving the demo server with the gated
// tool added, initializes a session and sends it call 2 on gate "never",
// which no test releases, so the call stays in flight until its session
// ends. It returns the session and the call's POST stream, read past its
// priming event; the stream is closed when the test ends.
func gatedCallInFlight(t *testing.T, ctx context.Context) (*mcptest.Session, *mcptest.Stream) {
	t.Helper()
	server := demo.NewServer()
	addGated(server)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")
	p, err := s.Call(ctx, gatedCall(2, "never", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	next(t, p)
	return s, p
}

// TestDeleteWithCallInFlight: DELETE ends a session whose tool call waits
// on its context: the call is cancelled, DELETE answers 204, and each open
// stream of a request without its answer (a POST stream, and a POST stream
// resumed by GET after a cut) ends with a JSON-RPC error answering that
// request, reason deleted, in an event with no id (it is not stored and
// cannot be resumed), then ends. (The go-sdk waits for handlers in flight
// when a session closes; they must be cancelled first.) A JSON answer
// (Options.JSONResponse) carries the same error; a stream of a request
// answered already, or the standalone stream, ends with nothing more.
func TestDeleteWithCallInFlight(t *testing.T) {
	ctx := testContext(t)
	s, p := gatedCallInFlight(t, ctx)
	// The demo's countdown waits on its context between steps too.
	c, err := s.Call(ctx, mcptest.ToolCall(3, "countdown", map[string]any{"n": 5, "delay_ms": 60000}, "c"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	next(t, c)
	// A call whose POST stream was cut, resumed by GET.
	cut, err := s.Call(ctx, gatedCall(4, "never", 1))
	if err != nil {
		t.Fatal(err)
	}
	priming := next(t, cut)
	cut.Close()
	r, err := s.Resume(ctx, priming.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	next(t, r)
	g, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	next(t, g)

	if err := s.Delete(ctx); err != nil {
		t.Fatalf("DELETE with calls in flight: %v", err)
	}
	wantDeletedAnswer(t, p, 2)
	wantDeletedAnswer(t, c, 3)
	wantDeletedAnswer(t, r, 4)
	wantEOF(t, g)
	wantGone(t, ctx, s, cursorOf(s, 1, 3, 3))
	wantGone(t, ctx, s, priming.ID)

	js := newStack(t, nil, &tidemark.Options{Transport: transport.Options{JSONResponse: true}}, nil)
	j := js.initialize(t, ctx, "")
	answer := make(chan error, 1)
	var body []byte
	go func() {
		resp, err := j.Post(ctx, mcptest.ToolCall(5, "countdown", map[string]any{"n": 5, "delay_ms": 60000}, nil))
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && (resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json") {
				err = fmt.Errorf("HTTP %d %q, want 200 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
		}
		answer <- err
	}()
	for js.h.Registry().CallsInFlight() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := j.Delete(ctx); err != nil {
		t.Fatalf("DELETE with a JSON answer in flight: %v", err)
	}
	if err := <-answer; err != nil {
		t.Fatalf("JSON answer of the deleted session's call: %v", err)
	}
	if want := deletedAnswer(5); string(body) != want {
		t.Fatalf("JSON answer %s, want %s", body, want)
	}
}

// deletedAnswer is the JSON-RPC error that answers request id of a
// session the client DELETEd before the request was answered.
func deletedAnswer(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"error":{"code":-32001,"message":"the client ended the session (DELETE) before this request was answered: its answer will not come; send initialize to start a new session","data":{"reason":"deleted"}}}`, id)
}

// wantDeletedAnswer checks that s, a stream of request id, goes on with an
// event without id holding deletedAnswer(id), then ends.
func wantDeletedAnswer(t *testing.T, s *mcptest.Stream, id int) {
	t.Helper()
	e := next(t, s)
	if e.HasID || e.Retry != 0 || string(e.Data) != deletedAnswer(id) {
		t.Fatalf("after DELETE: event id %q (%v) retry %v data %s; want no id, no retry, data %s", e.ID, e.HasID, e.Retry, e.Data, deletedAnswer(id))
	}
	wantEOF(t, s)
}

// TestSupersedeWithCallInFlight: a client that initializes again naming
// its session's token while a call of that session is in flight gets, on
// the call's stream, a JSON-RPC error for its id with reason superseded in
// an event with no id, then the stream's end (regression: the stream just
// ended, and the client never learned its call's fate).
func TestSupersedeWithCallInFlight(t *testing.T) {
	ctx := testContext(t)
	s, p := gatedCallInFlight(t, ctx)
	supersede(t, ctx, s)
	want := `{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"the client initialized a new session in place of this one before this request was answered: its answer will not come; send it on the new session","data":{"reason":"superseded"}}}`
	e := next(t, p)
	if e.HasID || string(e.Data) != want {
		t.Fatalf("after the new initialize: event id %q (%v) data %s; want no id, data %s", e.ID, e.HasID, e.Data, want)
	}
	wantEOF(t, p)
}
