package upstream_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestHibernatesLossy: the upstream gateway's sessions hibernate, and
// wake at generation+1 (DESIGN.md, "Hibernation").
func TestHibernatesLossy(t *testing.T) {
	e, err := upstream.New(upstream.Options{URL: "http://127.0.0.1:9/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := engine.HibernationOf(e); got != engine.HibernateLossy {
		t.Fatalf("upstream engine hibernation = %v, want lossy (%v)", got, engine.HibernateLossy)
	}
}

// hibernatingGateway is a gateway to upstreamURL with opts whose sessions hibernate after a
// minute of the clock it returns; the test advances the clock and sweeps
// (hibernate). A benchmark's gateway logs nothing.
func hibernatingGateway(t testing.TB, upstreamURL string, opts upstream.Options) (*gateway, *testenv.Clock) {
	t.Helper()
	clk := testenv.NewClock(time.Now())
	return hibernatingGatewayOn(t, upstreamURL, opts, nil, clk), clk
}

// hibernatingGatewayOn is hibernatingGateway on st (nil: the memory
// store), on clk.
func hibernatingGatewayOn(t testing.TB, upstreamURL string, opts upstream.Options, st store.Store, clk *testenv.Clock) *gateway {
	t.Helper()
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if _, bench := t.(*testing.B); bench {
		logger = slog.New(slog.DiscardHandler) // a log that grows is not the sessions' cost
	}
	opts.URL, opts.Logger = upstreamURL, logger
	eng, err := upstream.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := tidemark.NewEngineHandler(eng, &tidemark.Options{
		Store:         st,
		Sessions:      session.Options{Logger: logger, HibernateAfter: time.Minute, IdleTTL: 24 * time.Hour, MaxSessions: 100_000, Now: clk.Now, HandOver: st != nil},
		Transport:     transport.Options{Sessionless: eng.Sessionless(), Logger: logger, Retry: 50 * time.Millisecond},
		SweepInterval: time.Hour, // the test sweeps
	})
	srv := serveGateway(t, h, eng, logs)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(hc.CloseIdleConnections)
	return &gateway{h: h, eng: eng, srv: srv, logs: logs, client: &mcptest.Client{URL: srv.URL, HTTP: hc}}
}

// hibernate advances clk past the hibernation delay and sweeps until n
// sessions are hibernated and every generation's live state in the
// engine is gone.
func (g *gateway) hibernate(t testing.TB, clk *testenv.Clock, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.h.Registry().Hibernated() != n || g.eng.Running() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the sweeps: %d sessions hibernated, %d generations running in the engine; want %d and 0",
				g.h.Registry().Hibernated(), g.eng.Running(), n)
		}
		if g.h.Registry().Hibernated() != n {
			// A request whose handler has not returned yet (its answer
			// read) holds its session, which is idle from then on: sweep
			// again, later.
			clk.Advance(2 * time.Minute)
			g.h.Registry().Sweep(context.Background())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// upstreamSessions returns the Mcp-Session-Id of each POST the upstream
// received after the first initialize, in order.
func upstreamSessions(u *testUpstream) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, r := range u.received {
		if r.method == http.MethodPost && r.rpc != "initialize" {
			out = append(out, r.header.Get("Mcp-Session-Id"))
		}
	}
	return out
}

// TestHibernationKeepsUpstreamSession: a session idle past HibernateAfter
// hibernates: the engine lets go of its generation (no live state, no
// GET stream) without ending the upstream session (no DELETE). The next
// call wakes it at generation 2 in the same upstream session: no second
// initialize, every request with the upstream's first session ID and the
// negotiated MCP-Protocol-Version, a ping to check it first. A cursor of
// generation 1 answers 409 generation_mismatch.
func TestHibernationKeepsUpstreamSession(t *testing.T) {
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g, clk := hibernatingGateway(t, up.URL(), upstream.Options{})
	ctx := testContext(t)
	s := g.initialize(t, ctx)
	old := echoAt(t, s, 2, 1)
	waitFor(t, "the standalone GET stream", func() bool { return len(up.requests(http.MethodGet, "")) == 1 })

	g.hibernate(t, clk, 1)
	if n := len(up.requests(http.MethodDelete, "")); n != 0 {
		t.Errorf("the upstream received %d DELETE at hibernation, want 0", n)
	}

	echoAt(t, s, 3, 2)
	_, err := s.Resume(ctx, old.ID)
	checkStatus(t, "resume from generation 1 after the wake", err, http.StatusConflict, replay.ReasonGenerationMismatch)

	if n := len(up.requests(http.MethodPost, "initialize")); n != 1 {
		t.Errorf("the upstream received %d initialize, want 1 (the client's)", n)
	}
	if n := len(up.requests(http.MethodPost, "ping")); n != 1 {
		t.Errorf("the upstream received %d ping, want 1 (the reattach's)", n)
	}
	up.mu.Lock()
	first := up.sessions[0]
	up.mu.Unlock()
	for i, id := range upstreamSessions(up) {
		if id != first {
			t.Errorf("upstream POST %d after initialize carried session %q, want the first upstream session %q", i, id, first)
		}
	}
	for _, r := range up.requests(http.MethodPost, "tools/call") {
		if v := r.header.Get("Mcp-Protocol-Version"); v != s.ProtocolVersion {
			t.Errorf("tools/call carried MCP-Protocol-Version %q, want %q", v, s.ProtocolVersion)
		}
	}
	waitFor(t, "the standalone GET stream reopened", func() bool { return len(up.requests(http.MethodGet, "")) == 2 })
	if !strings.Contains(g.logs.String(), "reattached to the kept upstream session") {
		t.Errorf("no line \"reattached to the kept upstream session\" in the gateway's log")
	}
}

// TestHibernationUpstreamLost: the upstream restarts while the session is
// hibernated, so it answers 404 for the kept upstream session. The next
// call is answered at generation 2, in a new upstream session restored
// from the record (the client's initialize params, its name), as after an
// upstream restart of a live session (TestUpstreamKilled); the log says
// upstream_session_lost; a cursor of generation 1 answers 409.
func TestHibernationUpstreamLost(t *testing.T) {
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g, clk := hibernatingGateway(t, up.URL(), upstream.Options{})
	ctx := testContext(t)
	s := g.initialize(t, ctx)
	old := echoAt(t, s, 2, 1)
	g.hibernate(t, clk, 1)
	up.restart()

	echoAt(t, s, 3, 2)
	_, err := s.Resume(ctx, old.ID)
	checkStatus(t, "resume from generation 1 after the wake", err, http.StatusConflict, replay.ReasonGenerationMismatch)
	inits := up.requests(http.MethodPost, "initialize")
	if len(inits) != 2 || !strings.Contains(string(inits[1].params), `"name":"mcptest"`) {
		t.Fatalf("the upstream received %d initialize (%v), want the client's and the restored one with its params", len(inits), inits)
	}
	up.mu.Lock()
	second := up.sessions
	up.mu.Unlock()
	if len(second) != 1 {
		t.Fatalf("the restarted upstream gave %d sessions, want 1", len(second))
	}
	calls := up.requests(http.MethodPost, "tools/call")
	if got := calls[len(calls)-1].header.Get("Mcp-Session-Id"); got != second[0] {
		t.Errorf("the call after the wake carried upstream session %q, want the new one %q", got, second[0])
	}
	if !strings.Contains(g.logs.String(), "reason="+replay.ReasonUpstreamSessionLost.String()) {
		t.Errorf("the gateway's log has no reason=%s", replay.ReasonUpstreamSessionLost)
	}
}

// TestFleetHibernationReattaches: two replicas of a fleet (--redis) in
// front of one upstream, sessions hibernating after a second. The session
// opened at replica a hibernates there; a call at replica b wakes it at
// generation 2 in the upstream session replica a opened: the upstream
// received one initialize, and replica b's requests carry its session ID.
func TestFleetHibernationReattaches(t *testing.T) {
	testenv.NeedRedis(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	redis := redistest.Start(t, redistest.Options{})
	fleet := []string{"--redis", redis.URL(), "--hibernate-after", "1s"}
	a, aURL := startTidemarkGateway(t, up.URL(), append(fleet, "--replica-id", "a")...)
	_, bURL := startTidemarkGateway(t, up.URL(), append(fleet, "--replica-id", "b")...)

	ca := &mcptest.Client{URL: aURL, HTTP: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(ca.HTTP.CloseIdleConnections)
	s, err := ca.Initialize(testContext(t), "")
	if err != nil {
		t.Fatal(err)
	}
	old := echoAt(t, s, 2, 1)
	waitFor(t, "replica a's line \"session hibernated\"", func() bool { return strings.Contains(a.Output(), `msg="session hibernated"`) })

	cb := &mcptest.Client{URL: bURL, HTTP: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(cb.HTTP.CloseIdleConnections)
	sb := cb.SessionFor(s.Token, s.ProtocolVersion)
	echoAt(t, sb, 3, 2)
	_, err = sb.Resume(testContext(t), old.ID)
	checkStatus(t, "resume from generation 1 at replica b", err, http.StatusConflict, replay.ReasonGenerationMismatch)
	if n := len(up.requests(http.MethodPost, "initialize")); n != 1 {
		t.Errorf("the upstream received %d initialize, want 1 (the client's through replica a)", n)
	}
	if n := len(up.requests(http.MethodDelete, "")); n != 0 {
		t.Errorf("the upstream received %d DELETE, want 0", n)
	}
	up.mu.Lock()
	first := up.sessions[0]
	up.mu.Unlock()
	for i, id := range upstreamSessions(up) {
		if id != first {
			t.Errorf("upstream POST %d after initialize carried session %q, want replica a's %q", i, id, first)
		}
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within 10 s", what)
		}
	}
}

// TestHibernationReattachWithForwardedHeaders: with Options.Forward set,
// the woken generation reattaches when the first client message arrives,
// with its forwarded headers: the ping and the call after the wake carry
// the client's current Authorization, in the kept upstream session.
func TestHibernationReattachWithForwardedHeaders(t *testing.T) {
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g, clk := hibernatingGateway(t, up.URL(), upstream.Options{Forward: []string{"Authorization"}})
	ctx := testContext(t)
	g.client.Header = http.Header{"Authorization": {"Bearer one"}}
	s := g.initialize(t, ctx)
	echoAt(t, s, 2, 1)
	g.hibernate(t, clk, 1)

	g.client.Header = http.Header{"Authorization": {"Bearer two"}}
	echoAt(t, s, 3, 2)
	pings := up.requests(http.MethodPost, "ping")
	calls := up.requests(http.MethodPost, "tools/call")
	if len(pings) != 1 || pings[0].header.Get("Authorization") != "Bearer two" {
		t.Fatalf("the upstream received pings %v, want one with Authorization %q", pings, "Bearer two")
	}
	if got := calls[len(calls)-1].header.Get("Authorization"); got != "Bearer two" {
		t.Errorf("the call after the wake carried Authorization %q, want %q", got, "Bearer two")
	}
	up.mu.Lock()
	first := up.sessions[0]
	up.mu.Unlock()
	if got := calls[len(calls)-1].header.Get("Mcp-Session-Id"); got != first || len(up.requests(http.MethodPost, "initialize")) != 1 {
		t.Errorf("the call after the wake carried upstream session %q after %d initialize, want %q after 1", got,
			len(up.requests(http.MethodPost, "initialize")), first)
	}
}

// TestHibernationStatelessUpstream: an upstream that gives no session ID
// has no upstream session to keep: the session hibernates all the same,
// and wakes at generation 2 restored with the client's initialize, as
// after a restart.
func TestHibernationStatelessUpstream(t *testing.T) {
	up := newUpstream(t, mcp.StreamableHTTPOptions{Stateless: true})
	g, clk := hibernatingGateway(t, up.URL(), upstream.Options{})
	ctx := testContext(t)
	s := g.initialize(t, ctx)
	echoAt(t, s, 2, 1)
	g.hibernate(t, clk, 1)
	echoAt(t, s, 3, 2)
	if n := len(up.requests(http.MethodPost, "initialize")); n != 2 {
		t.Errorf("the upstream received %d initialize, want 2 (the client's, the restored one)", n)
	}
	if n := len(up.requests(http.MethodPost, "ping")); n != 0 {
		t.Errorf("the upstream received %d ping, want 0: no upstream session to reattach to", n)
	}
}

// TestHibernatedSessionEndReleasesUpstream: a hibernated session that
// ends without a wake ends its kept upstream session with exactly one
// DELETE, as a live one's end does: on the client's DELETE, and when its
// idle TTL ends it.
func TestHibernatedSessionEndReleasesUpstream(t *testing.T) {
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g, clk := hibernatingGateway(t, up.URL(), upstream.Options{})
	ctx := testContext(t)
	a := g.initialize(t, ctx)
	b := g.initialize(t, ctx)
	g.hibernate(t, clk, 2)
	up.mu.Lock()
	ids := slices.Clone(up.sessions)
	up.mu.Unlock()
	deletes := func() []string { return deleteHeaders(up, "Mcp-Session-Id") }

	if err := a.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upstream's DELETE of the first session", func() bool { return len(deletes()) == 1 })
	if got := deletes(); got[0] != ids[0] {
		t.Errorf("the client's DELETE ended upstream session %q, want %q", got[0], ids[0])
	}

	clk.Advance(25 * time.Hour) // past the idle TTL
	g.h.Registry().Sweep(ctx)
	waitFor(t, "the upstream's DELETE of the second session", func() bool { return len(deletes()) == 2 })
	if got := deletes(); got[1] != ids[1] {
		t.Errorf("the idle TTL ended upstream session %q, want %q", got[1], ids[1])
	}
	if _, err := b.Call(ctx, mcptest.ToolCall(2, "echo", map[string]string{"text": "hi"}, nil)); err == nil {
		t.Errorf("a call of the session its idle TTL ended succeeded, want it refused")
	}
	g.eng.Close() // waits for the DELETEs under way
	if got := deletes(); len(got) != 2 {
		t.Errorf("the upstream received DELETE for sessions %q, want one for each of %q", got, ids)
	}
}

// TestSweptInheritedReleasesUpstream: on a data directory, sessions
// hibernated by one process outlive it with their upstream sessions kept;
// when the next process's store ends them as idle (its sweep of sessions
// an earlier process left, durable.Options.IdleTTL), each kept upstream
// session gets exactly one DELETE, as when the registry that hibernated
// them ends them (TestHibernatedSessionEndReleasesUpstream).
func TestSweptInheritedReleasesUpstream(t *testing.T) {
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	dir := t.TempDir()
	clk := testenv.NewClock(time.Now())
	first, err := durable.Open(dir, durable.Options{Now: clk.Now, SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g := hibernatingGatewayOn(t, up.URL(), upstream.Options{}, first, clk)
	ctx := testContext(t)
	a := g.initialize(t, ctx)
	b := g.initialize(t, ctx)
	g.hibernate(t, clk, 2)
	up.mu.Lock()
	ids := slices.Clone(up.sessions)
	up.mu.Unlock()
	g.srv.Close()
	g.eng.Close()
	if err := g.h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if got := deletedSessions(up); len(got) != 0 {
		t.Fatalf("the first process's close sent DELETE for upstream sessions %q, want none: its sessions outlive it", got)
	}

	clk.Advance(25 * time.Hour) // past the idle TTL
	next, err := durable.Open(dir, durable.Options{Now: clk.Now, SweepInterval: -1, IdleTTL: 24 * time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g2 := hibernatingGatewayOn(t, up.URL(), upstream.Options{}, next, clk)
	t.Cleanup(func() { next.Close() })
	if err := next.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	g2.eng.Close() // waits for the DELETEs under way
	slices.Sort(ids)
	if got := deletedSessions(up); !slices.Equal(got, ids) {
		t.Errorf("the upstream received DELETE for sessions %q, want one for each of %q", got, ids)
	}
	for _, s := range []*mcptest.Session{a, b} {
		s2 := g2.client.SessionFor(s.Token, s.ProtocolVersion)
		_, err := s2.Call(ctx, mcptest.ToolCall(2, "echo", map[string]string{"text": "hi"}, nil))
		checkStatus(t, "a call of a session the sweep ended", err, http.StatusNotFound, replay.ReasonSessionNotFound)
	}
}

// TestMemoryCloseReleasesHibernated: on the memory store, whose sessions
// end with the process, closing the gateway ends the kept upstream
// session of every hibernated session with exactly one DELETE, as it
// ends a live one's; a session woken before the close is ended once
// too. tidemark serve closes the engine, then the handler, then the
// engine again, which waits for those DELETEs.
func TestMemoryCloseReleasesHibernated(t *testing.T) {
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g, clk := hibernatingGateway(t, up.URL(), upstream.Options{})
	ctx := testContext(t)
	a := g.initialize(t, ctx)
	g.initialize(t, ctx)
	g.initialize(t, ctx)
	g.hibernate(t, clk, 3)
	if _, err := a.Call(ctx, mcptest.ToolCall(2, "echo", map[string]string{"text": "hi"}, nil)); err != nil {
		t.Fatal(err)
	}
	up.mu.Lock()
	ids := slices.Clone(up.sessions)
	up.mu.Unlock()

	g.eng.Close()
	if err := g.h.Close(); err != nil {
		t.Fatal(err)
	}
	g.eng.Close()
	got := deletedSessions(up)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Errorf("the upstream received DELETE for sessions %q, want one for each of %q", got, ids)
	}
}
