// hardening_test.go tests the limits that keep a server up under misuse:
// body size and time, calls per session, capacity, retention, draining and
// shutdown, and refusals made before a body arrives.

package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestBodyTimeout: a POST whose body stops arriving is answered 408
// body_timeout once Options.BodyTimeout has passed, instead of holding the
// connection; the session is unharmed. An initialize (no session, no
// protocol version header: its body is read to tell the protocol era) is
// bounded the same way.
func TestBodyTimeout(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{Transport: transport.Options{BodyTimeout: 300 * time.Millisecond}}, nil)
	s := st.initialize(t, ctx, "")
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct{ name, headers, body string }{
		{"call", "Mcp-Session-Id: " + s.Token + "\r\nMcp-Protocol-Version: " + s.VersionHeader + "\r\n", call},
		{"initialize", "", init},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := st.bounds(t, s.Token)
			// Content-Length promises the whole body; only half of it is sent.
			start := time.Now()
			resp, err := rawPost(t, st, tc.headers, len(tc.body), tc.body[:len(tc.body)/2], false)
			if err != nil {
				t.Fatalf("no answer to a stalled body: %v", err)
			}
			se := refusalOf(t, resp, http.StatusRequestTimeout, "body_timeout")
			if waited := time.Since(start); waited < 250*time.Millisecond || waited > 5*time.Second {
				t.Fatalf("answered after %v, want about the 300ms body timeout", waited)
			}
			if !strings.Contains(se.Body.Message, "300ms") {
				t.Fatalf("message %q does not state the timeout", se.Body.Message)
			}
			if !resp.Close {
				t.Fatal("the answer keeps the connection open, want Connection: close (the rest of the body is not awaited)")
			}
			if after := st.bounds(t, s.Token); after != before {
				t.Fatalf("the refusal changed the session's log: %+v → %+v", before, after)
			}
			if n := st.h.Registry().Len(); n != 1 {
				t.Fatalf("%d live sessions, want 1", n)
			}
		})
	}
	stillWorks(t, ctx, s, 50)
}

// TestTooManyCalls: a session may have at most
// session.Options.MaxCallsPerSession calls in flight; one more is answered
// 429 too_many_calls with Retry-After and the call's id, and registers
// nothing, so the same id works once the others are answered.
func TestTooManyCalls(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, &tidemark.Options{Sessions: session.Options{MaxCallsPerSession: 2}}, nil)
	s := st.initialize(t, ctx, "")

	open := []*mcptest.Stream{startGated(t, ctx, s, 10, "g1", 1), startGated(t, ctx, s, 11, "g2", 1)}
	resp, err := s.Post(ctx, mcptest.ToolCall(12, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	se := mcptest.ReadStatusError(resp)
	if se.Status != http.StatusTooManyRequests || se.Reason() != "too_many_calls" {
		t.Fatalf("third call: HTTP %d %q (%s), want 429 too_many_calls", se.Status, se.Reason(), se.RawBody)
	}
	if got := se.Header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After = %q, want 1", got)
	}
	if string(se.Body.ID) != "12" {
		t.Fatalf("refusal id = %s, want 12", se.Body.ID)
	}
	// A notification is not a call: it is accepted while calls are at the limit.
	resp, err = s.Post(ctx, mcptest.MustNotify("notifications/roots/list_changed", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notification at the limit: HTTP %d, want 202", resp.StatusCode)
	}

	g.release("g1", 1)
	g.release("g2", 1)
	for i, str := range open {
		evs, err := str.Collect()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := evs[len(evs)-1].Response(); !ok || r.ID != mcptest.ID(int64(10+i)) {
			t.Fatalf("gated call %d: last event %+v, want its response", 10+i, evs[len(evs)-1])
		}
	}
	str, err := s.Call(ctx, mcptest.ToolCall(12, "echo", map[string]any{"text": "again"}, nil))
	if err != nil {
		t.Fatalf("id 12 after the others were answered: %v", err)
	}
	defer str.Close()
	evs, err := str.Collect()
	if err != nil {
		t.Fatal(err)
	}
	r, _ := evs[len(evs)-1].Response()
	if got := toolText(t, r); got != "again" {
		t.Fatalf("echo = %q, want %q", got, "again")
	}
}

// TestBatchOverCallLimit: a batch with more calls than a session may have
// in flight at all can never be accepted, so it is refused 400
// batch_too_large with no Retry-After and a message that says so, while a
// batch that fits once answers arrive is still told to wait (429); neither
// registers a call.
func TestBatchOverCallLimit(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, &tidemark.Options{Sessions: session.Options{MaxCallsPerSession: 2}}, nil)
	s := st.initialize(t, ctx, "2025-03-26")
	echo := func(id int64) *jsonrpc.Request { return mcptest.ToolCall(id, "echo", map[string]any{"text": "x"}, nil) }
	batch := func(calls ...*jsonrpc.Request) []byte {
		var parts []string
		for _, c := range calls {
			b, err := mcptest.Encode(c)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, string(b))
		}
		return []byte("[" + strings.Join(parts, ",") + "]")
	}
	post := func(body []byte) *mcptest.StatusError { t.Helper(); return postRaw(t, ctx, st, s, body) }

	se := post(batch(echo(1), echo(2), echo(3)))
	checkRefusal(t, se, http.StatusBadRequest, "batch_too_large")
	want := "a batch of 3 messages is more than the 2 one batch may hold: it can never be accepted; send at most 2 messages per batch"
	if se.Body.Message != want || se.Header.Get("Retry-After") != "" {
		t.Fatalf("message %q, Retry-After %q; want %q and none", se.Body.Message, se.Header.Get("Retry-After"), want)
	}

	// 2025-03-26 streams have no priming event: the call is in flight once
	// the response headers came.
	open, err := s.Call(ctx, gatedCall(10, "g", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	se = post(batch(echo(1), echo(2)))
	if se.Status != http.StatusTooManyRequests || se.Reason() != "too_many_calls" || se.Header.Get("Retry-After") != "1" ||
		!strings.HasSuffix(se.Body.Message, "wait for answers before sending more requests on this session") {
		t.Fatalf("a batch of 2 with 1 call in flight: HTTP %d %q Retry-After %q (%s), want 429 too_many_calls, Retry-After 1, told to wait",
			se.Status, se.Reason(), se.Header.Get("Retry-After"), se.RawBody)
	}
	g.release("g", 1)
	if _, err := open.Collect(); err != nil {
		t.Fatal(err)
	}
	// Nothing was registered: the same ids work in a batch that fits.
	resp, err := s.Post(ctx, echo(1), echo(2))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("a batch of 2 after the answer: %v, %d messages, want the 2 responses", err, len(msgs))
	}
}

// TestBatchLimitCountsEveryMessage: the batch limit
// (session.Options.MaxCallsPerSession) counts every message of a batch,
// notifications and responses as well as requests, so a batch of 45,000
// notifications is refused 400 batch_too_large (id null, no Retry-After)
// before any of its messages is decoded or delivered, and the session is
// unharmed: a batch of exactly the limit is accepted and delivered whole.
func TestBatchLimitCountsEveryMessage(t *testing.T) {
	ctx := testContext(t)
	var rootsChanged atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "roots", Version: "1"}, &mcp.ServerOptions{
		RootsListChangedHandler: func(context.Context, *mcp.RootsListChangedRequest) { rootsChanged.Add(1) },
	})
	st := newStack(t, server, &tidemark.Options{Sessions: session.Options{MaxCallsPerSession: 4}}, nil)
	s := st.initialize(t, ctx, "2025-03-26")
	notify := `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`
	ping := func(id int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, id) }
	batch := func(msgs ...string) []byte { return []byte("[" + strings.Join(msgs, ",") + "]") }
	post := func(body []byte) *mcptest.StatusError { t.Helper(); return postRaw(t, ctx, st, s, body) }
	many := make([]string, 45000)
	for i := range many {
		many[i] = notify
	}
	for _, tc := range []struct {
		name string
		body []byte
		n    int
	}{
		{"5 notifications", batch(notify, notify, notify, notify, notify), 5},
		{"2 calls and 3 notifications", batch(ping(1), notify, ping(2), notify, notify), 5},
		{"45,000 notifications", batch(many...), 45000},
	} {
		se := post(tc.body)
		checkRefusal(t, se, http.StatusBadRequest, "batch_too_large")
		want := fmt.Sprintf("a batch of %d messages is more than the 4 one batch may hold: it can never be accepted; send at most 4 messages per batch", tc.n)
		if se.Body.Message != want || string(se.Body.ID) != "null" || se.Header.Get("Retry-After") != "" {
			t.Errorf("%s: message %q, id %s, Retry-After %q; want %q, null and none",
				tc.name, se.Body.Message, se.Body.ID, se.Header.Get("Retry-After"), want)
		}
	}
	// A batch of exactly the limit is delivered whole, and nothing of the
	// refused ones was: the server sees 4 notifications, not more.
	resp, err := s.Post(ctx, mcptest.MustNotify("notifications/roots/list_changed", nil),
		mcptest.MustNotify("notifications/roots/list_changed", nil), mcptest.MustNotify("notifications/roots/list_changed", nil),
		mcptest.MustNotify("notifications/roots/list_changed", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a batch of 4 notifications: HTTP %d, want 202", resp.StatusCode)
	}
	// The session still answers, after every notification before it.
	str, err := s.Call(ctx, mcptest.MustCall(9, "ping", nil))
	if err != nil {
		t.Fatalf("ping after the refusals: %v", err)
	}
	if _, err := str.Collect(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rootsChanged.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // room for any stray delivery to show
	if got := rootsChanged.Load(); got != 4 {
		t.Fatalf("the server saw %d roots/list_changed notifications, want 4", got)
	}
}

// postRaw POSTs body as it is on s's session and returns the answer as a
// status error, whatever its status.
func postRaw(t *testing.T, ctx context.Context, st *stack, s *mcptest.Session, body []byte) *mcptest.StatusError {
	t.Helper()
	req, _ := s.NewRequest(ctx, http.MethodPost, body)
	resp, err := st.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return mcptest.ReadStatusError(resp)
}

// TestCapacityEvictsOnlySessionsWithoutCalls: when MaxSessions are live
// and sessions cannot hibernate, a new session evicts the least recently
// used session that has no call in flight, never one mid-call; when every
// session has a call in flight, initialize is answered 503 capacity with
// Retry-After and no session ends. (With hibernation on, the session
// hibernates instead: session's TestHibernateToMakeRoom.)
func TestCapacityEvictsOnlySessionsWithoutCalls(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, &tidemark.Options{Sessions: session.Options{MaxSessions: 2, HibernateAfter: -1}}, nil)
	older := st.initialize(t, ctx, "") // least recently used, mid-call throughout
	oldCall := startGated(t, ctx, older, 5, "old", 1)
	newer := st.initialize(t, ctx, "")
	newCall := startGated(t, ctx, newer, 5, "new", 1)

	_, err := st.client.Initialize(ctx, "")
	se := wantRefusal(t, err, http.StatusServiceUnavailable, "capacity")
	if got := se.Header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After = %q, want 1", got)
	}
	if n := st.h.Registry().Len(); n != 2 {
		t.Fatalf("%d live sessions after the refusal, want 2", n)
	}

	// The newer session's call ends: the next initialize evicts it,
	// although the other is older.
	g.release("new", 1)
	if _, err := newCall.Collect(); err != nil {
		t.Fatal(err)
	}
	fresh := st.initialize(t, ctx, "")
	_, err = newer.Call(ctx, mcptest.ToolCall(6, "echo", map[string]any{"text": "x"}, nil))
	wantRefusal(t, err, http.StatusNotFound, "session_not_found")
	g.release("old", 1)
	evs, err := oldCall.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := evs[len(evs)-1].Response(); !ok || toolText(t, r) != "old done" {
		t.Fatalf("the older session's call ended with %+v, want its response", evs[len(evs)-1])
	}
	stillWorks(t, ctx, older, 7)
	stillWorks(t, ctx, fresh, 8)
}

// TestMessageLargerThanRetention: a response larger than the session's
// whole byte retention (eventlog.Options.MaxBytes) is still delivered: the
// newest event is never trimmed, and the stream's priming event, which
// retention may trim before the reader writes it, is written as stored.
func TestMessageLargerThanRetention(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{Retention: eventlog.Options{MaxBytes: 1 << 10}}, nil)
	s := st.initialize(t, ctx, "")
	text := strings.Repeat("tidemark ", 1000) // 9,000 bytes
	str, err := s.Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": text}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer str.Close()
	evs, err := str.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("stream had %d events, want 2: the priming event and the echo response", len(evs))
	}
	wantPriming(t, evs[0], "", time.Second)
	r, ok := evs[1].Response()
	if !ok {
		t.Fatalf("stream ended with %+v, want the echo response", evs[1])
	}
	if got := toolText(t, r); got != text {
		t.Fatalf("echo returned %d bytes, want %d", len(got), len(text))
	}
	// Retention runs right after the append that woke the reader: wait
	// for it rather than race it.
	deadline := time.Now().Add(5 * time.Second)
	for b := st.bounds(t, s.Token); b.Events != 1 || b.Floor != b.HWM; b = st.bounds(t, s.Token) {
		if time.Now().After(deadline) {
			t.Fatalf("log bounds %+v, want only the newest event retained", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFailedInitializeEndsSession: an initialize the server answers with
// an error leaves no session behind: the token it was given answers 404.
func TestFailedInitializeEndsSession(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":"none"},"clientInfo":{"name":5}}}`)
	req, err := st.client.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	token := resp.Header.Get("Mcp-Session-Id")
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil {
		t.Fatal(err)
	}
	var answer *jsonrpc.Response
	for _, m := range msgs {
		if r, ok := m.(*jsonrpc.Response); ok {
			answer = r
		}
	}
	if answer == nil || answer.Error == nil {
		t.Fatalf("initialize with malformed params answered %+v, want a JSON-RPC error", answer)
	}
	if token == "" {
		t.Fatal("the answer carries no Mcp-Session-Id")
	}
	s := st.client.SessionFor(token, "2025-11-25")
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = s.Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "x"}, nil))
		if se, ok := mcptest.AsStatusError(err); ok && se.Status == http.StatusNotFound {
			checkRefusal(t, se, http.StatusNotFound, "session_not_found")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a call on the failed session: %v, want 404 session_not_found", err)
		}
		time.Sleep(10 * time.Millisecond) // the session ends once its answer is written
	}
	if n := st.h.Registry().Len(); n != 0 {
		t.Fatalf("%d live sessions, want 0", n)
	}
}

// TestShutdownAnswersJSONCall: a call answered as application/json that is
// still running when the server shuts down gets 503 unavailable, not a
// connection cut without a body (a JSON answer cannot be resumed).
func TestShutdownAnswersJSONCall(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	addGated(server)
	st := newStack(t, server, &tidemark.Options{Transport: transport.Options{JSONResponse: true}}, nil)
	s := st.initialize(t, ctx, "")
	hwm := st.bounds(t, s.Token).HWM
	type answer struct {
		resp *http.Response
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := s.Post(ctx, gatedCall(3, "never", 1))
		done <- answer{resp, err}
	}()
	// Wait until the call is in flight, then shut down.
	deadline := time.Now().Add(5 * time.Second)
	for st.bounds(t, s.Token).HWM == hwm { // the call's stream opens with an event
		if time.Now().After(deadline) {
			t.Fatal("the call never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	go st.h.Shutdown(sctx)
	a := <-done
	if a.err != nil {
		t.Fatalf("the JSON call got no answer at shutdown: %v", a.err)
	}
	se := refusalOf(t, a.resp, http.StatusServiceUnavailable, "unavailable")
	if !strings.Contains(se.Body.Message, "send the request again") {
		t.Fatalf("message %q does not say what to do", se.Body.Message)
	}
}

// TestIDsAnsweredAsSent: the ids MCP allows come back in the response
// exactly as sent, whatever white space surrounds them (the refused ones
// are in TestBadInput).
func TestIDsAnsweredAsSent(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	for _, id := range []string{`8`, `-9`, `9007199254740992`, `-9007199254740992`, `"abc"`, `"1.5"`, `0`} {
		for _, sep := range []string{`:`, ` : `} {
			body := []byte(`{"jsonrpc":"2.0","id"` + sep + id + `,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
			req, err := s.NewRequest(ctx, http.MethodPost, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := st.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			str, err := mcptest.OpenStream(resp)
			if err != nil {
				t.Fatalf("id %s (separator %q): %v", id, sep, err)
			}
			evs, err := str.Collect()
			str.Close()
			if err != nil {
				t.Fatal(err)
			}
			last := evs[len(evs)-1]
			var got struct {
				ID json.RawMessage `json:"id"`
			}
			if err := json.Unmarshal(last.Data, &got); err != nil || string(got.ID) != id {
				t.Fatalf("id %s (separator %q) answered with id %s (%s)", id, sep, got.ID, last.Data)
			}
		}
	}
}

// TestTruncatedBody: a body that ends before its Content-Length (the client
// closes its side) is refused 400 parse_error (-32700) and nothing of it
// runs, with or without MCP-Protocol-Version: the bytes that came are not
// delivered as a shorter message, and no id stays in flight.
func TestTruncatedBody(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	body := `{"jsonrpc":"2.0","id":70,"method":"tools/list"}`
	for _, tc := range []struct{ name, version string }{
		{"without MCP-Protocol-Version", ""},
		{"with MCP-Protocol-Version", "Mcp-Protocol-Version: " + s.VersionHeader + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := st.bounds(t, s.Token)
			resp, err := rawPost(t, st, "Mcp-Session-Id: "+s.Token+"\r\n"+tc.version, len(body)+100, body, true)
			if err != nil {
				t.Fatalf("no answer to a truncated body: %v", err)
			}
			se := refusalOf(t, resp, http.StatusBadRequest, "parse_error")
			if se.Body.Code != -32700 {
				t.Fatalf("code = %d, want -32700", se.Body.Code)
			}
			if after := st.bounds(t, s.Token); after != before {
				t.Fatalf("the truncated request changed the session's log: %+v → %+v", before, after)
			}
		})
	}
	// Id 70 was never in flight: it works now.
	str, err := s.Call(ctx, mcptest.MustCall(70, "tools/list", nil))
	if err != nil {
		t.Fatalf("id 70 after the truncated requests: %v", err)
	}
	defer str.Close()
	evs, err := str.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := evs[len(evs)-1].Response(); !ok || r.ID != mcptest.ID(70) || r.Error != nil {
		t.Fatalf("id 70 answered %+v, want its tools/list result", evs[len(evs)-1])
	}
}

// TestVersion20241105: the go-sdk negotiates 2024-11-05 when a client asks
// for it; that session's requests carrying that version in
// MCP-Protocol-Version are served like 2025-03-26, not refused 400
// protocol_version after a successful initialize.
func TestVersion20241105(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "2024-11-05")
	if s.ProtocolVersion != "2024-11-05" || s.VersionHeader != "2024-11-05" {
		t.Fatalf("negotiated %q, header %q; want 2024-11-05 for both", s.ProtocolVersion, s.VersionHeader)
	}
	stillWorks(t, ctx, s, 2)
}

// TestIdleEvictionFollowsShortTTL: with a short idle TTL and no sweep
// interval set, an idle session is evicted within about a quarter of the
// TTL after it expires, not at the default sweep interval of 10 seconds,
// which would let a 2 s TTL keep sessions for up to 12 s.
func TestIdleEvictionFollowsShortTTL(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{Sessions: session.Options{IdleTTL: 400 * time.Millisecond}}, nil)
	s := st.initialize(t, ctx, "")
	time.Sleep(400*time.Millisecond + 400*time.Millisecond)
	if status, _, _ := st.h.Registry().Status(ctx, s.Token); status != replay.Evicted {
		t.Fatalf("session idle for twice its 400ms TTL is %v, want evicted", status)
	}
	_, err := s.Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "x"}, nil))
	wantRefusal(t, err, http.StatusNotFound, "session_not_found")
}

// TestDrainLetsCallsFinish: Drain refuses new calls with 503 and
// Retry-After, still accepts notifications, and returns once the calls in
// flight have answered on their streams, so that a restart after it loses
// no call that was running.
func TestDrainLetsCallsFinish(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")
	call := startGated(t, ctx, s, 3, "drain", 2)

	drained := make(chan error, 1)
	go func() { drained <- st.h.Drain(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := s.Post(ctx, mcptest.ToolCall(4, "echo", map[string]any{"text": "x"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		se := mcptest.ReadStatusError(resp)
		if se.Status == http.StatusServiceUnavailable {
			checkRefusal(t, se, http.StatusServiceUnavailable, "unavailable")
			if got := se.Header.Get("Retry-After"); got != "1" {
				t.Fatalf("Retry-After = %q, want 1", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new call while draining: HTTP %d, want 503", se.Status)
		}
		time.Sleep(5 * time.Millisecond) // Drain has not started yet
	}
	resp, err := s.Post(ctx, mcptest.MustNotify("notifications/roots/list_changed", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notification while draining: HTTP %d, want 202", resp.StatusCode)
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) with a call in flight", err)
	case <-time.After(50 * time.Millisecond):
	}

	g.release("drain", 2)
	evs, err := call.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := evs[len(evs)-1].Response(); !ok || toolText(t, r) != "drain done" || len(evs) != 3 {
		t.Fatalf("the call in flight ended with %d events, last %+v; want 2 progress events and its response", len(evs), evs[len(evs)-1])
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// TestContentLengthOverLimitRefusedAtOnce: a Content-Length above the body
// limit is refused with 413 from the headers alone. The failing input (a
// tester's): Content-Length 99999999999 and no body got no answer until the
// body timeout (30 s), holding the connection.
func TestContentLengthOverLimitRefusedAtOnce(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	before := st.bounds(t, s.Token)
	// No body follows and the client's side stays open: only the headers
	// can decide. rawPost gives up after 10 s, well before the 30 s default.
	// Without a session the POST is an initialize, whose era check reads
	// the body first (a second failing input: 413 after 30 s).
	for _, headers := range []string{"Mcp-Session-Id: " + s.Token + "\r\nMcp-Protocol-Version: " + s.VersionHeader + "\r\n", ""} {
		resp, err := rawPost(t, st, headers, 99999999999, "", false)
		if err != nil {
			t.Fatalf("headers %q: no answer to an oversized Content-Length: %v", headers, err)
		}
		se := refusalOf(t, resp, http.StatusRequestEntityTooLarge, "body_too_large")
		if want := "request body of 99999999999 bytes (Content-Length) exceeds 4194304 bytes"; se.Body.Message != want {
			t.Fatalf("headers %q: message = %q, want %q", headers, se.Body.Message, want)
		}
	}
	if after := st.bounds(t, s.Token); after != before {
		t.Fatalf("the refusal changed the session's log: %+v → %+v", before, after)
	}
	stillWorks(t, ctx, s, 10)
}

// TestRefusalBeforeBodyIsSentAtOnce: a request that declares a body it
// does not send is refused at once, with Connection: close, when the
// refusal needs no body: PUT (405), a wrong Content-Type (415), a GET
// without a session (400). (Refusals that need the body, such as an
// unknown session's, wait for it up to the body timeout: 408.) A request
// whose body was read keeps its connection. The failing input (a
// tester's): PUT or GET with Content-Length 1000 and no body got its
// refusal logged and never sent; net/http waited, with no deadline, to
// discard the body first.
func TestRefusalBeforeBodyIsSentAtOnce(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	u, _ := url.Parse(st.srv.URL)
	for _, tc := range []struct {
		name, request string
		status        int
		reason        string
	}{
		{"PUT", "PUT / HTTP/1.1\r\nContent-Type: application/json\r\nMcp-Protocol-Version: 2025-11-25\r\n", 405, "method_not_allowed"},
		{"wrong Content-Type", "POST / HTTP/1.1\r\nContent-Type: text/plain\r\nAccept: application/json, text/event-stream\r\n" +
			"Mcp-Protocol-Version: 2025-11-25\r\n", 415, "content_type"},
		{"GET without a session", "GET / HTTP/1.1\r\nAccept: text/event-stream\r\nMcp-Protocol-Version: 2025-11-25\r\n", 400, "session_required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "%sHost: %s\r\nContent-Length: 1000\r\n\r\n", tc.request, u.Host)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer while the declared body is not sent: %v", err)
			}
			refusalOf(t, resp, tc.status, tc.reason)
			if !resp.Close {
				t.Fatal("the refusal keeps the connection, want Connection: close (the body was never read)")
			}
		})
	}
	// The handler for every other path never reads the body either.
	nf := httptest.NewServer(transport.PathNotFound("/mcp", slog.New(slog.DiscardHandler)))
	defer nf.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(nf.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("POST /nope: no answer while the declared body is not sent: %v", err)
	}
	if refusalOf(t, resp, http.StatusNotFound, "path_not_found"); !resp.Close {
		t.Fatal("POST /nope: the refusal keeps the connection, want Connection: close")
	}

	// A POST whose body was read keeps its connection.
	body := `{"jsonrpc":"2.0","id":71,"method":"tools/list"}`
	resp, err = rawPost(t, st, "Mcp-Session-Id: "+s.Token+"\r\nMcp-Protocol-Version: "+s.VersionHeader+"\r\n", len(body), body, false)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("tools/list answered %d with Close %v, want 200 on a kept connection", resp.StatusCode, resp.Close)
	}
}

// rawPost sends a POST over a raw connection to st: headers (CRLF-ended
// lines) after the media types, a Content-Length of contentLength, and body,
// which may be shorter; closeWrite then ends the client's side. It returns
// the response, read within 10 seconds.
func rawPost(t *testing.T, st *stack, headers string, contentLength int, body string, closeWrite bool) (*http.Response, error) {
	t.Helper()
	u, _ := url.Parse(st.srv.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"%sContent-Length: %d\r\n\r\n%s", u.Host, headers, contentLength, body)
	if closeWrite {
		conn.(*net.TCPConn).CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	return http.ReadResponse(bufio.NewReader(conn), nil)
}

// TestRefusedResumeLogsTheCursorOnce: a refused resume is one log line,
// carrying the client's cursor as the log format quotes it, once. The
// failing inputs (a tester's): cursor="\"3453490f-1-3-8\"", quoted by the
// handler and again by the text handler; and every 409 logged twice, as
// "resume refused" and again as "request refused".
func TestRefusedResumeLogsTheCursorOnce(t *testing.T) {
	ctx := testContext(t)
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	st := newStack(t, nil, &tidemark.Options{Sessions: session.Options{Logger: logger}, Transport: transport.Options{Logger: logger}}, nil)
	s := st.initialize(t, ctx, "")
	evs := countdown(t, ctx, s, 2, 2, "p")
	last := evs[len(evs)-1].ID
	parts := strings.Split(last, "-") // tag-generation-stream-sequence
	newer := parts[0] + "-2-" + parts[2] + "-" + parts[3]
	resp, err := s.Resume(ctx, newer)
	if err == nil {
		resp.Close()
		t.Fatalf("resume with %s succeeded, want 409 generation_mismatch", newer)
	}
	want := " reason=generation_mismatch cursor=" + newer + " status=409\n"
	if got := logs.String(); !strings.Contains(got, want) || strings.Count(got, "reason=generation_mismatch") != 1 {
		t.Fatalf("log holds %d lines with reason=generation_mismatch, want exactly one ending %q:\n%s",
			strings.Count(got, "reason=generation_mismatch"), want, got)
	}
}

// TestInflightBytesBound: the bodies of POSTs whose calls are being
// answered count against MaxInflightBytes over the whole process, each at
// InflightBytes. With a bound of three bodies, three calls held open on two sessions are
// answered 200 and the next two get 503 inflight_bytes with Retry-After 1,
// nothing delivered; once one call is answered, the next call is accepted,
// and both sessions work throughout.
func TestInflightBytesBound(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	body, err := mcptest.Encode(gatedCall(11, "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	st := newStack(t, server, &tidemark.Options{Transport: transport.Options{MaxInflightBytes: 3 * transport.InflightBytes(body)}}, nil)
	s1 := st.initialize(t, ctx, "")
	s2 := st.initialize(t, ctx, "")
	// Ids of two digits, gate names of one letter: every body has
	// len(body) bytes.
	held := []*mcptest.Stream{startGated(t, ctx, s1, 11, "a", 1), startGated(t, ctx, s2, 12, "b", 1), startGated(t, ctx, s1, 13, "c", 1)}
	for i, s := range []*mcptest.Session{s2, s1} {
		resp, err := s.Post(ctx, gatedCall(int64(14+i), "d", 1))
		if err != nil {
			t.Fatal(err)
		}
		se := refusalOf(t, resp, http.StatusServiceUnavailable, "inflight_bytes")
		if ra := se.Header.Get("Retry-After"); ra != "1" {
			t.Fatalf("Retry-After %q, want 1", ra)
		}
	}
	// Notifications hold no call: they are delivered.
	resp, err := s2.Post(ctx, mcptest.MustNotify("notifications/roots/list_changed", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notification: HTTP %d, want 202", resp.StatusCode)
	}
	g.release("a", 1)
	wantDone(t, held[0], 11, "a done")
	held = append(held[1:], startGated(t, ctx, s2, 16, "e", 1))
	for i, gate := range []string{"b", "c", "e"} {
		g.release(gate, 1)
		wantDone(t, held[i], []int64{12, 13, 16}[i], gate+" done")
	}
}

// TestInflightBytesCountValues: a body of many small JSON values counts
// ValueCost per value beyond twice its size, what decoding it costs. With
// a bound of three such bodies at twice their size, a call whose _meta
// holds 1,000 numbers (about 36 KB counted for 2 KB sent) is served alone,
// counted at the whole bound, and a second one gets 503 inflight_bytes
// until the first is answered.
func TestInflightBytesCountValues(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	pad := make([]int, 1000)
	call := func(id int64, gate string) *jsonrpc.Request {
		return mcptest.MustCall(id, "tools/call", map[string]any{"name": "gated", "arguments": GatedArgs{Gate: gate, N: 1},
			"_meta": map[string]any{"progressToken": gate, "pad": pad}})
	}
	body, err := mcptest.Encode(call(11, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := transport.InflightBytes(body), transport.InflightCost*int64(len(body))+transport.ValueCost*int64(len(pad)+11); got != want {
		// 999 commas in pad, 7 others, 4 objects and 1 array.
		t.Fatalf("InflightBytes of a body of %d bytes = %d, want %d", len(body), got, want)
	}
	st := newStack(t, server, &tidemark.Options{Transport: transport.Options{MaxInflightBytes: 3 * transport.InflightCost * int64(len(body))}}, nil)
	s := st.initialize(t, ctx, "")
	held, err := s.Call(ctx, call(11, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	next(t, held)
	resp, err := s.Post(ctx, call(12, "b"))
	if err != nil {
		t.Fatal(err)
	}
	refusalOf(t, resp, http.StatusServiceUnavailable, "inflight_bytes")
	g.release("a", 1)
	wantDone(t, held, 11, "a done")
	str, err := s.Call(ctx, call(13, "c"))
	if err != nil {
		t.Fatal(err)
	}
	defer str.Close()
	next(t, str)
	g.release("c", 1)
	wantDone(t, str, 13, "c done")
}

// wantDone reads the rest of a gated call's stream of one step: its
// progress, then its result with text.
func wantDone(t *testing.T, s *mcptest.Stream, id int64, text string) {
	t.Helper()
	evs, err := s.Collect()
	if err != nil || len(evs) != 2 {
		t.Fatalf("call %d: %d events, %v; want progress and result", id, len(evs), err)
	}
	if r, ok := evs[1].Response(); !ok || r.ID != mcptest.ID(id) || toolText(t, r) != text {
		t.Fatalf("call %d ended with %+v, want its result %q", id, evs[1], text)
	}
}

// TestServerRefusalsLogOncePerSecond: while the server refuses every
// call for a reason of its own (here draining; a store outage alike),
// the log gets one WARN line per reason per second, not one per request,
// and the next line says how many it held back; every request is still
// answered 503.
func TestServerRefusalsLogOncePerSecond(t *testing.T) {
	ctx := testContext(t)
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	st := newStack(t, nil, &tidemark.Options{Transport: transport.Options{Logger: logger}}, nil)
	s := st.initialize(t, ctx, "")
	if err := st.h.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	refused := func(id int64) {
		resp, err := s.Post(ctx, mcptest.ToolCall(id, "echo", map[string]any{"text": "x"}, nil))
		if err == nil {
			refusalOf(t, resp, http.StatusServiceUnavailable, "unavailable")
			return
		}
		se, ok := mcptest.AsStatusError(err)
		if !ok || se.Status != http.StatusServiceUnavailable || se.Reason() != "unavailable" {
			t.Fatalf("call %d while draining: %v, want 503 unavailable", id, err)
		}
	}
	for id := range int64(30) {
		refused(id + 1)
	}
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `msg="request refused"`) && strings.Contains(l, "reason=unavailable") {
				out = append(out, l)
			}
		}
		return out
	}
	first := lines()
	// Thirty refusals within a second: the first is logged. (A slow
	// machine may take over a second for them; then a second line.)
	if len(first) == 0 || len(first) > 2 || strings.Contains(first[0], "suppressed=") {
		t.Fatalf("WARN lines after 30 refusals: %q, want the first alone", first)
	}
	time.Sleep(1100 * time.Millisecond)
	refused(31)
	all := lines()
	if len(all) != len(first)+1 || !strings.Contains(all[len(all)-1], " suppressed=") {
		t.Fatalf("WARN lines after one more refusal a second later: %q, want one more saying how many were held back", all)
	}
	if len(first) == 1 && !strings.HasSuffix(all[1], " suppressed=29") {
		t.Fatalf("the second line %q, want suppressed=29", all[1])
	}
}
