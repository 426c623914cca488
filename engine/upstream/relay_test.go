package upstream_test

// What the gateway relays and how: upstreams that answer JSON or keep no
// sessions, server-to-client requests and their answers, cancellation,
// headers, and the sessionless era.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
)

// TestJSONUpstream: an upstream that answers each POST with one
// application/json body is served: the client still gets an SSE stream
// from Tidemark, ending with the upstream's result.
func TestJSONUpstream(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{JSONResponse: true})
	g := newGateway(t, up.URL(), upstream.Options{})
	s := g.initialize(t, ctx)
	// No progress token: the go-sdk's handler in JSON mode may reject a
	// notification its tool sends before the POST's answer is set up
	// ("stream not connected"), which fails the tool.
	evs := call(t, ctx, s, mcptest.ToolCall(2, "countdown", map[string]any{"n": 3}, nil))
	if got, want := toolText(t, response(t, evs)), "countdown of 3 finished"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
	if !evs[0].IsPriming() {
		t.Errorf("first event %+v, want Tidemark's priming event", evs[0])
	}
}

// TestStatelessUpstream: an upstream that gives no session ID is served:
// the client gets a Tidemark session token, its calls are answered, and
// the gateway sends the upstream no session ID and opens no GET stream.
func TestStatelessUpstream(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{Stateless: true})
	g := newGateway(t, up.URL(), upstream.Options{})
	s := g.initialize(t, ctx)
	if s.Token == "" {
		t.Fatal("no session token from the gateway")
	}
	for i := range 2 {
		evs := call(t, ctx, s, countdown(int64(2+i), 2, 0, "tok"))
		if got, want := toolText(t, response(t, evs)), "countdown of 2 finished"; got != want {
			t.Errorf("call %d: result %q, want %q", i, got, want)
		}
	}
	for _, r := range up.requests(http.MethodPost, "tools/call") {
		if sid := r.header.Get("Mcp-Session-Id"); sid != "" {
			t.Errorf("tools/call carried Mcp-Session-Id %q to a stateless upstream", sid)
		}
	}
	if n := len(up.requests(http.MethodGet, "")); n != 0 {
		t.Errorf("the gateway sent %d GETs to a stateless upstream, want 0", n)
	}
}

// TestElicitationRelayed: the upstream's elicitation/create reaches the
// client on the stream of the call that caused it, with a session-unique
// ID; the client's answer goes back to the upstream under the upstream's
// own ID, and the call completes with it.
func TestElicitationRelayed(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{})
	g.client.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}
	ask, r := answerConfirm(t, ctx, g.initialize(t, ctx), json.RawMessage(`{"action":"accept","content":{"confirmed":true}}`), nil)
	if got := ask.ID.Raw(); got != "tidemark-1-1" {
		t.Errorf("elicitation/create has ID %v, want tidemark-1-1", got)
	}
	if got := toolText(t, r); got != "accepted" {
		t.Errorf("confirm returned %q, want accepted", got)
	}
	var upAnswers []received
	for _, r := range up.requests(http.MethodPost, "") {
		if r.id.IsValid() {
			upAnswers = append(upAnswers, r)
		}
	}
	if len(upAnswers) != 1 {
		t.Fatalf("the upstream received %d responses, want 1", len(upAnswers))
	}
	if raw, ok := upAnswers[0].id.Raw().(int64); !ok || raw != 1 {
		t.Errorf("the upstream received the answer with ID %v, want its own request's ID 1", upAnswers[0].id.Raw())
	}
}

// TestStandaloneRequestRelayed: a request the upstream sends outside any
// call (roots/list, on its standalone GET stream) reaches the client on
// the session's standalone GET stream, with a session-unique ID; the
// client's answer goes back to the upstream under the upstream's own ID,
// and the upstream's request returns the client's roots.
func TestStandaloneRequestRelayed(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{})
	g.client.Capabilities = &mcp.ClientCapabilities{Roots: mcp.RootCapabilities{ListChanged: true}}
	s := g.initialize(t, ctx)
	st, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ss := up.serverSession(t)
	type listed struct {
		res *mcp.ListRootsResult
		err error
	}
	done := make(chan listed, 1)
	go func() {
		// The upstream rejects a request while the gateway's standalone
		// GET stream is not connected to it yet: ask again until then.
		for {
			res, err := ss.ListRoots(ctx, nil)
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "rejected") {
				done <- listed{res, err}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	evs, err := st.Until(func(e mcptest.Event) bool {
		r, ok := e.Request()
		return ok && r.Method == "roots/list"
	})
	if err != nil {
		t.Fatalf("no roots/list on the standalone stream: %v (events %v)", err, evs)
	}
	ask, _ := evs[len(evs)-1].Request()
	if got := ask.ID.Raw(); got != "tidemark-1-1" {
		t.Errorf("roots/list has ID %v, want tidemark-1-1", got)
	}
	answer := &jsonrpc.Response{ID: ask.ID, Result: json.RawMessage(`{"roots":[{"uri":"file:///work","name":"work"}]}`)}
	resp, err := s.Post(ctx, answer)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the client's answer got HTTP %d, want 202", resp.StatusCode)
	}
	got := <-done
	if got.err != nil {
		t.Fatalf("the upstream's roots/list: %v", got.err)
	}
	if len(got.res.Roots) != 1 || got.res.Roots[0].URI != "file:///work" || got.res.Roots[0].Name != "work" {
		t.Errorf("the upstream's roots/list returned %+v, want the client's one root file:///work", got.res.Roots)
	}
}

// TestCancelReachesUpstream: notifications/cancelled for a call reaches
// the upstream with the call's ID; the upstream stops the tool, and the
// call's stream ends with the upstream's answer (the go-sdk answers a
// cancelled tool call with an error result "context canceled").
func TestCancelReachesUpstream(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{})
	s := g.initialize(t, ctx)
	long := countdown(2, 1000, 20, "tok")
	st, err := s.Call(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Until(func(e mcptest.Event) bool {
		r, ok := e.Request()
		return ok && r.Method == "notifications/progress"
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Post(ctx, mcptest.MustNotify("notifications/cancelled", map[string]any{"requestId": 2, "reason": "test"}))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/cancelled got HTTP %d, want 202", resp.StatusCode)
	}
	rest, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(long.ID) })
	if err != nil {
		t.Fatal(err)
	}
	if n := len(progressValues(t, rest)); n > 900 {
		t.Errorf("%d more progress notifications after the cancel: the tool was not stopped", n)
	}
	r := response(t, rest)
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || !res.IsError || len(res.Content) != 1 ||
		res.Content[0].Text != "context canceled" {
		t.Errorf("cancelled call answered %s (error %v), want the upstream's error result \"context canceled\"", r.Result, r.Error)
	}
	cancels := up.requests(http.MethodPost, "notifications/cancelled")
	if len(cancels) != 1 || !strings.Contains(string(cancels[0].params), `"requestId":2`) {
		t.Errorf("the upstream received %d notifications/cancelled (%v), want 1 naming requestId 2", len(cancels), cancels)
	}
}

// TestCancelUnanswered: the upstream does not answer a cancelled call
// (the tool hangs, ignoring the cancellation): after Options.Timeout the
// gateway ends the call's upstream request, and the call's stream ends
// with an error whose reason is cancelled.
func TestCancelUnanswered(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{Timeout: time.Second})
	s := g.initialize(t, ctx)
	hang := mcptest.ToolCall(2, "hang", map[string]any{}, nil)
	st, err := s.Call(ctx, hang)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	up.waitHanging(t)
	resp, err := s.Post(ctx, mcptest.MustNotify("notifications/cancelled", map[string]any{"requestId": 2}))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rest, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(hang.ID) })
	if err != nil {
		t.Fatal(err)
	}
	if reason, gen := errorData(t, response(t, rest)); reason != string(replay.ReasonCancelled) || gen != 1 {
		t.Errorf("cancelled call failed with reason %q generation %v, want %q generation 1", reason, gen, replay.ReasonCancelled)
	}
}

// TestHeaders: the headers named in Options.Forward go from each client
// request to the upstream requests made for it, Options.Header is added to
// every upstream request, and no other client header reaches the upstream.
func TestHeaders(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{
		Forward: []string{"authorization"},
		Header:  http.Header{"X-Gateway": {"tidemark"}},
	})
	g.client.Header = http.Header{"Authorization": {"Bearer client-1"}, "X-Other": {"kept here"}}
	s := g.initialize(t, ctx)
	call(t, ctx, s, countdown(2, 1, 0, ""))
	for _, rpc := range []string{"initialize", "notifications/initialized", "tools/call"} {
		rs := up.requests(http.MethodPost, rpc)
		if len(rs) != 1 {
			t.Fatalf("%s reached the upstream %d times, want 1", rpc, len(rs))
		}
		h := rs[0].header
		if got := h.Get("Authorization"); got != "Bearer client-1" {
			t.Errorf("%s: Authorization %q, want the client's", rpc, got)
		}
		if got := h.Get("X-Gateway"); got != "tidemark" {
			t.Errorf("%s: X-Gateway %q, want tidemark", rpc, got)
		}
		if got := h.Get("X-Other"); got != "" {
			t.Errorf("%s: X-Other %q reached the upstream, want none", rpc, got)
		}
	}
}

// TestNewRefusesReservedHeaders: headers the gateway sets itself can be
// neither forwarded nor added.
func TestNewRefusesReservedHeaders(t *testing.T) {
	for _, o := range []upstream.Options{
		{URL: "http://127.0.0.1:1/mcp", Forward: []string{"mcp-session-id"}},
		{URL: "http://127.0.0.1:1/mcp", Header: http.Header{"Last-Event-Id": {"x"}}},
		{URL: "127.0.0.1:1/mcp"},
	} {
		if _, err := upstream.New(o); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", o)
		}
	}
}

// TestSessionless: a request of the 2026-07-28 era passes through to the
// upstream without a session (its Mcp-Session-Id stays behind) and its
// answer comes back; with the upstream gone it gets 503
// upstream_unreachable naming the request's ID.
func TestSessionless(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{Stateless: true})
	g := newGateway(t, up.URL(), upstream.Options{})
	list := sessionlessRequest(t, ctx, g, 7, "tools/list")
	list.Header.Set("Mcp-Session-Id", "not-forwarded")
	msgs := postSessionless(t, g, list, http.StatusOK)
	if len(msgs) != 1 {
		t.Fatalf("answer holds %d messages, want 1", len(msgs))
	}
	if r, ok := msgs[0].(*jsonrpc.Response); !ok || r.ID != mcptest.ID(7) || r.Error != nil ||
		!strings.Contains(string(r.Result), `"countdown"`) {
		t.Errorf("answer %v, want the upstream's tools/list result for id 7", msgs[0])
	}
	rs := up.requests(http.MethodPost, "tools/list")
	if len(rs) != 1 || rs[0].header.Get("Mcp-Session-Id") != "" || rs[0].header.Get("Mcp-Protocol-Version") != "2026-07-28" {
		t.Errorf("the upstream received %d tools/list (headers %v), want 1 with MCP-Protocol-Version 2026-07-28 and no session",
			len(rs), rs)
	}

	up.stop()
	msgs = postSessionless(t, g, sessionlessRequest(t, ctx, g, 8, "tools/list"), http.StatusServiceUnavailable)
	r, ok := msgs[0].(*jsonrpc.Response)
	if !ok || r.ID != mcptest.ID(8) {
		t.Fatalf("503 body %v, want a JSON-RPC error for id 8", msgs[0])
	}
	if reason, _ := errorData(t, r); reason != string(replay.ReasonUpstreamUnreachable) {
		t.Errorf("503 reason %q, want %q", reason, replay.ReasonUpstreamUnreachable)
	}
}

// sessionlessRequest returns a POST of request method with id in the
// 2026-07-28 era: the version in the header and in _meta.
func sessionlessRequest(t *testing.T, ctx context.Context, g *gateway, id int64, method string) *http.Request {
	t.Helper()
	body, err := jsonrpc.EncodeMessage(mcptest.MustCall(id, method, map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]string{"name": "mcptest", "version": "1.0.0"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	req, err := g.client.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	return req
}

// postSessionless sends req and returns the messages of its answer, which
// must have status.
func postSessionless(t *testing.T, g *gateway, req *http.Request, status int) []jsonrpc.Message {
	t.Helper()
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != status {
		se := mcptest.ReadStatusError(resp)
		t.Fatalf("HTTP %d (%s), want %d", resp.StatusCode, se.RawBody, status)
	}
	if status != http.StatusOK {
		if resp.Header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q, want 1", resp.Header.Get("Retry-After"))
		}
		resp.StatusCode = http.StatusOK // ReadAnswer reads bodies of 200 only
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil || len(msgs) == 0 {
		t.Fatalf("answer: %v (%d messages)", err, len(msgs))
	}
	return msgs
}

// TestSessionlessCutLogged: an upstream that cuts its answer to a
// sessionless request mid-body is reported in the gateway's structured
// log (the reverse proxy's own line, at WARN), not on the standard
// logger's stderr.
func TestSessionlessCutLogged(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(up.Close)
	ctx := testContext(t)
	g := newGateway(t, up.URL, upstream.Options{})
	resp, err := g.client.HTTP.Do(sessionlessRequest(t, ctx, g, 7, "tools/list"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(g.logs.String(), "level=WARN msg=\"httputil: ReverseProxy read error during body copy") {
		if time.Now().After(deadline) {
			t.Fatalf("no WARN line of the cut answer in the gateway's log:\n%s", g.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
