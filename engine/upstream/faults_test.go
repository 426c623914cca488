package upstream_test

// The upstream's faults and the answers a client gets for them: an
// upstream that cannot be reached, and a call's answer stream cut between
// the gateway and the upstream (with and without upstream event IDs).

import (
	"bytes"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
)

// behindCutter returns the URL of up through a proxy that cuts, once,
// after the SSE event holding marker.
func behindCutter(t *testing.T, up *testUpstream, marker string) (string, *faultproxy.EventCutter) {
	t.Helper()
	cut := faultproxy.NewEventCutter(func(ev []byte) bool { return bytes.Contains(ev, []byte(marker)) })
	p, err := faultproxy.New(up.srv.Listener.Addr().String(), cut.Filter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return "http://" + p.Addr() + "/mcp", cut
}

// TestUnreachable: an upstream that cannot be reached answers 503
// upstream_unreachable with Retry-After 1, for a new session's initialize
// and for a call on a session whose upstream went away; nothing is
// registered for the refused call, so the client can send it again. The
// refused initialize names no session: its response has no Mcp-Session-Id.
func TestUnreachable(t *testing.T) {
	ctx := testContext(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()

	g := newGateway(t, closed, upstream.Options{})
	_, err = g.client.Initialize(ctx, "")
	checkStatus(t, "initialize", err, http.StatusServiceUnavailable, replay.ReasonUpstreamUnreachable)
	if se, _ := mcptest.AsStatusError(err); se != nil && se.Header.Get("Mcp-Session-Id") != "" {
		t.Errorf("refused initialize: Mcp-Session-Id %q, want none (the session never began)", se.Header.Get("Mcp-Session-Id"))
	}

	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g = newGateway(t, up.URL(), upstream.Options{})
	s := g.initialize(t, ctx)
	waitFor(t, "the standalone stream open", func() bool { return strings.Contains(g.logs.String(), "the standalone stream is open") })
	up.stop()
	// Until the gateway sees its stream cut, its idle connections to the
	// upstream look alive, and a call written into one is handed over.
	waitFor(t, "the standalone stream cut", func() bool { return strings.Contains(g.logs.String(), "the standalone stream was cut") })
	_, err = s.Call(ctx, countdown(2, 1, 0, "tok"))
	checkStatus(t, "tools/call", err, http.StatusServiceUnavailable, replay.ReasonUpstreamUnreachable)
	_, err = s.Call(ctx, countdown(2, 1, 0, "tok"))
	checkStatus(t, "tools/call with the same id again", err, http.StatusServiceUnavailable, replay.ReasonUpstreamUnreachable)
}

// checkStatus checks that err is an HTTP refusal with status and reason,
// and Retry-After 1 for a 503.
func checkStatus(t *testing.T, what string, err error, status int, reason replay.Reason) {
	t.Helper()
	se, ok := mcptest.AsStatusError(err)
	if !ok {
		t.Fatalf("%s: %v, want HTTP %d %s", what, err, status, reason)
	}
	if se.Status != status || se.Reason() != string(reason) {
		t.Errorf("%s: HTTP %d %q (%s), want %d %q", what, se.Status, se.Reason(), se.RawBody, status, reason)
	}
	if status == http.StatusServiceUnavailable && se.Header.Get("Retry-After") != "1" {
		t.Errorf("%s: Retry-After %q, want 1", what, se.Header.Get("Retry-After"))
	}
}

// TestCutResumedUpstream: the upstream's events carry IDs (the go-sdk's
// memory event store); the connection between the gateway and the
// upstream is cut after progress 3 of 8. The gateway resumes the upstream
// stream with the upstream's own Last-Event-ID, and the client, whose own
// stream was never cut, sees every progress notification once, in order,
// then the result.
func TestCutResumedUpstream(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
	u, cut := behindCutter(t, up, `"progress":3,`)
	g := newGateway(t, u, upstream.Options{})
	s := g.initialize(t, ctx)

	evs := call(t, ctx, s, countdown(2, 8, 20, "tok"))
	if got := progressValues(t, evs); !slices.Equal(got, steps(8)) {
		t.Errorf("progress %v, want %v: each once, in order", got, steps(8))
	}
	if got, want := toolText(t, response(t, evs)), "countdown of 8 finished"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
	if _, ok := cut.Cut(); !ok {
		t.Fatal("the proxy cut no connection, want 1")
	}
	var resumes []string
	for _, r := range up.requests(http.MethodGet, "") {
		if id := r.header.Get("Last-Event-ID"); id != "" {
			resumes = append(resumes, id)
		}
	}
	if len(resumes) != 1 {
		t.Errorf("the upstream got %d GETs with Last-Event-ID (%q), want 1", len(resumes), resumes)
	}
}

// TestCutWithoutIDs: the upstream's events carry no IDs (no event store),
// and the call's stream is cut between the gateway and the upstream. The
// gateway cannot resume it: it pings the upstream session, which is alive,
// and fails the call with upstream_stream_cut at generation 1; the session
// goes on in the same generation.
func TestCutWithoutIDs(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	u, _ := behindCutter(t, up, `"progress":3,`)
	g := newGateway(t, u, upstream.Options{})
	s := g.initialize(t, ctx)

	evs := call(t, ctx, s, countdown(2, 8, 20, "tok"))
	if got := progressValues(t, evs); !slices.Equal(got, steps(3)) {
		t.Errorf("progress before the cut %v, want %v", got, steps(3))
	}
	reason, gen := errorData(t, response(t, evs))
	if reason != string(replay.ReasonUpstreamStreamCut) || gen != 1 {
		t.Errorf("call failed with reason %q generation %v, want %q generation 1", reason, gen, replay.ReasonUpstreamStreamCut)
	}
	if n := len(up.requests(http.MethodPost, "ping")); n != 1 {
		t.Errorf("the upstream got %d pings, want 1", n)
	}
	evs = call(t, ctx, s, countdown(3, 2, 0, "tok2"))
	if got := toolText(t, response(t, evs)); got != "countdown of 2 finished" {
		t.Errorf("next call's result %q", got)
	}
	if c := cursor(t, evs[len(evs)-1]); c.Generation != 1 {
		t.Errorf("next call at generation %d, want 1", c.Generation)
	}
}

// TestCutResumeRefused: the upstream's events carry IDs, the connection
// between the gateway and the upstream is cut after progress 3 of 8, and
// the upstream answers every resume 409 (as the go-sdk does while it
// counts the cut connection as the stream's reader). The gateway tries
// again until Options.ResumeTimeout, then fails the call with
// upstream_stream_cut at generation 1 and a message that says the
// upstream was reached and refused, never that it could not be reached;
// the session goes on in the same generation.
func TestCutResumeRefused(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
	up.refuseResumes.Store(true)
	u, _ := behindCutter(t, up, `"progress":3,`)
	const timeout = 500 * time.Millisecond
	g := newGateway(t, u, upstream.Options{ResumeTimeout: timeout})
	s := g.initialize(t, ctx)

	evs := call(t, ctx, s, countdown(2, 8, 20, "tok"))
	if got := progressValues(t, evs); !slices.Equal(got, steps(3)) {
		t.Errorf("progress before the cut %v, want %v", got, steps(3))
	}
	resp := response(t, evs)
	reason, gen := errorData(t, resp)
	if reason != string(replay.ReasonUpstreamStreamCut) || gen != 1 {
		t.Errorf("call failed with reason %q generation %v, want %q generation 1", reason, gen, replay.ReasonUpstreamStreamCut)
	}
	var resumes int
	for _, r := range up.requests(http.MethodGet, "") {
		if r.header.Get("Last-Event-ID") != "" {
			resumes++
		}
	}
	if resumes < 2 {
		t.Errorf("the upstream got %d resumes, want at least 2 (tried again after a 409)", resumes)
	}
	want := "the call's upstream stream was cut and the upstream MCP server refused every resume for 500ms " +
		"(upstream answered GET with Last-Event-ID with HTTP 409: stream ID conflicts with ongoing stream); send the call again"
	if msg := resp.Error.(*jsonrpc.Error).Message; msg != want {
		t.Errorf("message %q\nwant %q", msg, want)
	}
	up.refuseResumes.Store(false)
	evs = call(t, ctx, s, countdown(3, 2, 0, "tok2"))
	if got := toolText(t, response(t, evs)); got != "countdown of 2 finished" {
		t.Errorf("next call's result %q", got)
	}
	if c := cursor(t, evs[len(evs)-1]); c.Generation != 1 {
		t.Errorf("next call at generation %d, want 1", c.Generation)
	}
}
