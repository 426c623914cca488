package main

// Gateways whose upstream leads back to themselves: refused at start when
// --upstream names the listener, and cut at the first repeat (508
// loop_detected) when the loop goes through a relay or another gateway.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestServeRefusesItselfAsUpstream: an --upstream URL that names the
// listener itself, by its address or by a name that resolves to it, exits
// 2 with what to do instead of serving a loop.
func TestServeRefusesItselfAsUpstream(t *testing.T) {
	port := testenv.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for _, up := range []string{"http://" + addr + "/mcp", "http://localhost:" + strconv.Itoa(port) + "/mcp"} {
		var stderr bytes.Buffer
		code := run([]string{"serve", "--addr", addr, "--upstream", up}, &bytes.Buffer{}, &stderr)
		want := "tidemark serve: --upstream " + up + " is this server's own address (it listens on " + addr + "): every request would come back to it without end; " +
			"point --upstream at the MCP server to front (e.g. --upstream http://127.0.0.1:3001/mcp), or give --addr another port\n"
		if code != 2 || stderr.String() != want {
			t.Errorf("serve --addr %s --upstream %s: exit %d, stderr %q; want exit 2 and %q", addr, up, code, stderr.String(), want)
		}
	}
}

// loopGateway is a `tidemark serve --upstream` process of a loop test.
type loopGateway struct {
	p       *testenv.Process
	url     string // its MCP endpoint
	metrics string // its operator's listener, host:port
}

// startLoopGateway starts tidemark serve on 127.0.0.1:port fronting
// upstream, with its operator's listener, and at most 50 sessions, which
// bounds a loop that no check would end.
func startLoopGateway(t *testing.T, port int, upstream string) *loopGateway {
	t.Helper()
	p, url, metrics := startObserved(t, nil, "--addr", "127.0.0.1:"+strconv.Itoa(port), "--upstream", upstream, "--max-sessions", "50")
	return &loopGateway{p: p, url: url, metrics: metrics}
}

// metric returns the value of the sample of /metrics whose name and labels
// (as the exposition writes them, sorted) are series, e.g.
// `tidemark_sessions_live`; 0 when there is none.
func (g *loopGateway) metric(t *testing.T, series string) float64 {
	t.Helper()
	status, body := get(t, "http://"+g.metrics+"/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", status, body)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

// awaitMetric waits up to 5 seconds for series to read want.
func (g *loopGateway) awaitMetric(t *testing.T, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := g.metric(t, series)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", series, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// refused508 counts the 508 refusals the gateway logged.
func (g *loopGateway) refused508() int {
	return strings.Count(g.p.Output(), `msg="request refused" status=508 reason=loop_detected`)
}

// initializeThroughLoop sends initialize to url and returns the JSON-RPC
// error that answers it; the test fails when the answer is not an error or
// does not come within 20 seconds.
func initializeThroughLoop(t *testing.T, url string) (int, *jsonrpc.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := &mcptest.Client{URL: url}
	body, _ := jsonrpc.EncodeMessage(mcptest.MustCall(1, "initialize", &mcp.InitializeParams{
		ProtocolVersion: "2025-11-25", ClientInfo: &mcp.Implementation{Name: "loop", Version: "1"}, Capabilities: &mcp.ClientCapabilities{},
	}))
	req, _ := c.NewRequest(ctx, http.MethodPost, body)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("initialize through the loop: %v", err)
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil {
		t.Fatalf("initialize through the loop: HTTP %d: %v", resp.StatusCode, err)
	}
	for _, m := range msgs {
		if r, ok := m.(*jsonrpc.Response); ok && r.ID == mcptest.ID(1) {
			if r.Error == nil {
				t.Fatalf("initialize through the loop succeeded: %s", r.Result)
			}
			var je *jsonrpc.Error
			if !errors.As(r.Error, &je) {
				t.Fatalf("initialize answered %v, not a JSON-RPC error", r.Error)
			}
			return resp.StatusCode, je
		}
	}
	t.Fatalf("initialize through the loop: no answer among %d messages", len(msgs))
	return 0, nil
}

// sessionlessThroughLoop sends a 2026-07-28 tools/list to url and returns
// the status and reason of its answer.
func sessionlessThroughLoop(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := &mcptest.Client{URL: url}
	req, _ := c.NewRequest(ctx, http.MethodPost, []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`))
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/list")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("2026-07-28 tools/list through the loop: %v", err)
	}
	se := mcptest.ReadStatusError(resp)
	return se.Status, se.Reason()
}

// reasonOf returns error.data.reason of a JSON-RPC error.
func reasonOf(je *jsonrpc.Error) string {
	var data struct {
		Reason string `json:"reason"`
	}
	json.Unmarshal(je.Data, &data)
	return data.Reason
}

// TestGatewayLoopEndsWith508: a gateway whose upstream leads back to it,
// through a TCP relay (a load balancer routing back), or through a second
// gateway (A→B→A), answers the repeated request 508 loop_detected once, and
// the client's initialize fails at once with error.data.reason
// loop_detected: one session opened on each gateway, none left live, one
// connection through the relay. A 2026-07-28 request gets the 508 itself.
func TestGatewayLoopEndsWith508(t *testing.T) {
	t.Run("self through a relay", func(t *testing.T) {
		port := testenv.FreePort(t)
		relay, err := faultproxy.New("127.0.0.1:"+strconv.Itoa(port), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { relay.Close() })
		g := startLoopGateway(t, port, "http://"+relay.Addr()+"/mcp")

		status, je := initializeThroughLoop(t, g.url)
		if status != http.StatusOK || reasonOf(je) != "loop_detected" || !strings.Contains(je.Message, "508 Loop Detected") {
			t.Fatalf("initialize: HTTP %d, error %q reason %q; want 200 and a loop_detected error", status, je.Message, reasonOf(je))
		}
		g.awaitMetric(t, `tidemark_sessions_created_total`, 1)
		g.awaitMetric(t, `mcp_server_session_duration_seconds_count{reason="initialize_failed"}`, 1)
		g.awaitMetric(t, `tidemark_sessions_live`, 0)
		g.awaitMetric(t, `tidemark_refusals_total{reason="loop_detected",status="508"}`, 1)
		if n := g.refused508(); n != 1 || relay.Conns() != 1 {
			t.Fatalf("%d refusals 508 logged, %d connections through the relay; want 1 and 1", n, relay.Conns())
		}

		if status, reason := sessionlessThroughLoop(t, g.url); status != http.StatusLoopDetected || reason != "loop_detected" {
			t.Fatalf("2026-07-28 tools/list: HTTP %d %q, want 508 loop_detected", status, reason)
		}
		g.awaitMetric(t, `tidemark_refusals_total{reason="loop_detected",status="508"}`, 2)
		g.awaitMetric(t, `tidemark_sessions_created_total`, 1)
	})

	t.Run("A to B to A", func(t *testing.T) {
		portA, portB := testenv.FreePort(t), testenv.FreePort(t)
		a := startLoopGateway(t, portA, fmt.Sprintf("http://127.0.0.1:%d/mcp", portB))
		b := startLoopGateway(t, portB, fmt.Sprintf("http://127.0.0.1:%d/mcp", portA))

		status, je := initializeThroughLoop(t, a.url)
		if status != http.StatusOK || reasonOf(je) != "loop_detected" {
			t.Fatalf("initialize: HTTP %d, error %q reason %q; want 200 and a loop_detected error", status, je.Message, reasonOf(je))
		}
		for name, g := range map[string]*loopGateway{"A": a, "B": b} {
			g.awaitMetric(t, `tidemark_sessions_created_total`, 1)
			g.awaitMetric(t, `mcp_server_session_duration_seconds_count{reason="initialize_failed"}`, 1)
			g.awaitMetric(t, `tidemark_sessions_live`, 0)
			if n, want := g.refused508(), map[string]int{"A": 1, "B": 0}[name]; n != want {
				t.Fatalf("gateway %s logged %d refusals 508, want %d", name, n, want)
			}
		}

		if status, reason := sessionlessThroughLoop(t, a.url); status != http.StatusLoopDetected || reason != "loop_detected" {
			t.Fatalf("2026-07-28 tools/list: HTTP %d %q, want 508 loop_detected", status, reason)
		}
		a.awaitMetric(t, `tidemark_refusals_total{reason="loop_detected",status="508"}`, 2)
		b.awaitMetric(t, `tidemark_refusals_total{reason="loop_detected",status="508"}`, 0)
	})
}
