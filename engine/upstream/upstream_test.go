package upstream_test

// Behaviour of the gateway a client can observe, against an in-process
// go-sdk upstream over real HTTP on loopback: relaying, the upstream's
// faults and their answers, headers, and the sessionless era.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
)

// countdown returns a countdown call of n steps of delayMS with progress
// token tok.
func countdown(id int64, n, delayMS int, tok string) *jsonrpc.Request {
	return mcptest.ToolCall(id, "countdown", map[string]any{"n": n, "delay_ms": delayMS}, tok)
}

// progressValues returns the progress values of the notifications among
// evs, in order.
func progressValues(t *testing.T, evs []mcptest.Event) []float64 {
	t.Helper()
	var out []float64
	for _, e := range evs {
		if r, ok := e.Request(); ok && r.Method == "notifications/progress" {
			var p struct {
				Progress float64 `json:"progress"`
			}
			if err := json.Unmarshal(r.Params, &p); err != nil {
				t.Fatal(err)
			}
			out = append(out, p.Progress)
		}
	}
	return out
}

// untilProgress reads st until n progress notifications have arrived and
// returns every event read, the nth notification last. A stream that ends
// or fails first fails the test.
func untilProgress(t *testing.T, st *mcptest.Stream, n int) []mcptest.Event {
	t.Helper()
	var evs []mcptest.Event
	for len(progressValues(t, evs)) < n {
		ev, err := st.Next()
		if err != nil {
			t.Fatalf("countdown stream: %v", err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// steps returns 1, 2, ..., n.
func steps(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

// cursor parses an event's id as a Tidemark cursor.
func cursor(t *testing.T, e mcptest.Event) replay.Cursor {
	t.Helper()
	c, err := replay.Parse(e.ID)
	if err != nil {
		t.Fatalf("event id %q is not a cursor: %v", e.ID, err)
	}
	return c
}

// TestRelay: a session through the gateway is the upstream's session: the
// upstream receives the client's initialize with its params, then every
// request with the Mcp-Session-Id it gave and the negotiated
// MCP-Protocol-Version; a call's progress notifications and its result
// come on the call's stream, under Tidemark's cursors of generation 1.
func TestRelay(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{})
	s := g.initialize(t, ctx)

	evs := call(t, ctx, s, countdown(2, 5, 1, "tok"))
	if got := progressValues(t, evs); !slices.Equal(got, steps(5)) {
		t.Errorf("progress %v, want %v", got, steps(5))
	}
	if got, want := toolText(t, response(t, evs)), "countdown of 5 finished"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
	for _, e := range evs {
		if c := cursor(t, e); c.Generation != 1 {
			t.Errorf("event %s at generation %d, want 1", e.ID, c.Generation)
		}
	}

	inits := up.requests(http.MethodPost, "initialize")
	if len(inits) != 1 {
		t.Fatalf("upstream received %d initialize, want 1", len(inits))
	}
	var p mcp.InitializeParams
	if err := json.Unmarshal(inits[0].params, &p); err != nil || p.ClientInfo == nil || p.ClientInfo.Name != "mcptest" {
		t.Errorf("upstream's initialize params %s, want the client's (clientInfo.name mcptest)", inits[0].params)
	}
	if h := inits[0].header.Get("Mcp-Session-Id"); h != "" {
		t.Errorf("initialize carried Mcp-Session-Id %q, want none", h)
	}
	calls := up.requests(http.MethodPost, "tools/call")
	if len(calls) != 1 {
		t.Fatalf("upstream received %d tools/call, want 1", len(calls))
	}
	if calls[0].id != mcptest.ID(2) {
		t.Errorf("tools/call reached the upstream with id %v, want the client's 2", calls[0].id.Raw())
	}
	if v := calls[0].header.Get("Mcp-Protocol-Version"); v != mcptest.DefaultProtocolVersion {
		t.Errorf("tools/call carried MCP-Protocol-Version %q, want %q", v, mcptest.DefaultProtocolVersion)
	}
	if sid := calls[0].header.Get("Mcp-Session-Id"); sid == "" || sid == s.Token {
		t.Errorf("tools/call carried Mcp-Session-Id %q, want the upstream's own (not the client's %q)", sid, s.Token)
	}
}

// TestUpstreamSessionLost: the upstream restarts during a call (its
// connections are cut and its sessions forgotten). The call fails on its
// stream with upstream_session_lost at generation 1; the client's old
// cursor answers 409 generation_mismatch; the same token serves the next
// call at generation 2 without a new initialize, and the upstream received
// the restored initialize (the client's params), notifications/initialized,
// the log level the client had set and its resource subscription.
func TestUpstreamSessionLost(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{})
	s := g.initialize(t, ctx)
	call(t, ctx, s, mcptest.MustCall(2, "logging/setLevel", map[string]string{"level": "warning"}))
	call(t, ctx, s, mcptest.MustCall(5, "resources/subscribe", map[string]string{"uri": "file:///watched"}))

	st, err := s.Call(ctx, countdown(3, 1000, 20, "tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seen := untilProgress(t, st, 2)
	old := seen[len(seen)-1]
	up.restart()

	rest, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(mcptest.ID(3)) })
	if err != nil {
		t.Fatalf("countdown stream after the restart: %v", err)
	}
	reason, gen := errorData(t, response(t, rest))
	if reason != string(replay.ReasonUpstreamSessionLost) || gen != 1 {
		t.Errorf("countdown answered reason %q generation %v, want %q generation 1", reason, gen, replay.ReasonUpstreamSessionLost)
	}

	_, err = s.Resume(ctx, old.ID)
	se, ok := mcptest.AsStatusError(err)
	if !ok || se.Status != http.StatusConflict || se.Reason() != string(replay.ReasonGenerationMismatch) {
		t.Fatalf("resume from the old cursor: %v, want 409 %s", err, replay.ReasonGenerationMismatch)
	}

	evs := call(t, ctx, s, countdown(4, 2, 0, "tok2"))
	if got, want := toolText(t, response(t, evs)), "countdown of 2 finished"; got != want {
		t.Errorf("next call's result %q, want %q", got, want)
	}
	if c := cursor(t, evs[len(evs)-1]); c.Generation != 2 {
		t.Errorf("next call at generation %d, want 2", c.Generation)
	}

	inits := up.requests(http.MethodPost, "initialize")
	if len(inits) != 2 {
		t.Fatalf("upstream received %d initialize, want 2 (the client's, then the restored one)", len(inits))
	}
	if !jsonEqual(inits[0].params, inits[1].params) {
		t.Errorf("restored initialize params %s, want the client's %s", inits[1].params, inits[0].params)
	}
	if got := len(up.requests(http.MethodPost, "notifications/initialized")); got != 2 {
		t.Errorf("upstream received %d notifications/initialized, want 2", got)
	}
	levels := up.requests(http.MethodPost, "logging/setLevel")
	if len(levels) != 2 || !strings.Contains(string(levels[1].params), `"warning"`) {
		t.Errorf("upstream received logging/setLevel %d times (last %s), want 2, the restored one with level warning",
			len(levels), levels[len(levels)-1].params)
	}
	subs := up.requests(http.MethodPost, "resources/subscribe")
	if len(subs) != 2 || !strings.Contains(string(subs[1].params), `"file:///watched"`) {
		t.Errorf("upstream received resources/subscribe %d times (%v), want 2, the restored one for file:///watched",
			len(subs), subs)
	}
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// TestRestoreWithForwardedHeaders: with Options.Forward set, a re-created
// session is restored when its first client message arrives, with that
// message's forwarded headers: the upstream receives the restored
// initialize with the client's current Authorization.
func TestRestoreWithForwardedHeaders(t *testing.T) {
	ctx := testContext(t)
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{Forward: []string{"Authorization"}})
	g.client.Header = http.Header{"Authorization": {"Bearer one"}}
	s := g.initialize(t, ctx)
	call(t, ctx, s, countdown(2, 1, 0, ""))
	up.restart()
	// The standalone GET stream meets the restarted upstream and ends the
	// generation; the next call re-creates the session.
	deadline := time.Now().Add(testTimeout)
	for !strings.Contains(g.logs.String(), "upstream session lost") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	g.client.Header = http.Header{"Authorization": {"Bearer two"}}
	evs := call(t, ctx, s, countdown(3, 1, 0, ""))
	if c := cursor(t, evs[len(evs)-1]); c.Generation != 2 {
		t.Errorf("call after the restart at generation %d, want 2", c.Generation)
	}
	inits := up.requests(http.MethodPost, "initialize")
	if len(inits) != 2 {
		t.Fatalf("upstream received %d initialize, want 2", len(inits))
	}
	if got := inits[1].header.Get("Authorization"); got != "Bearer two" {
		t.Errorf("restored initialize carried Authorization %q, want the latest client request's %q", got, "Bearer two")
	}
}
