package interop

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// mcp-go's client (github.com/mark3labs/mcp-go v1.2.1, client.Client with
// transport.StreamableHTTP). docs/clients.md ("What MCP clients do with
// Tidemark's answers") cites these tests.

// connectMCPGo starts and initializes a client of url with opts.
func connectMCPGo(t *testing.T, ctx context.Context, url string, opts ...mcpgoclient.ClientOption) (*mcpgoclient.Client, *mcpgo.InitializeResult) {
	t.Helper()
	// An HTTP client of its own, so its connections end with the test.
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	tr, err := mcpgotransport.NewStreamableHTTP(url, mcpgotransport.WithHTTPBasicClient(hc),
		mcpgotransport.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpgoclient.NewClient(tr, opts...)
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "tidemark-interop-mcp-go", Version: "1.0.0"}
	res, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c, res
}

// callMCPGo calls tool name with args and a progress token, and returns
// the result's text.
func callMCPGo(ctx context.Context, c *mcpgoclient.Client, name string, args map[string]any) (string, error) {
	req := mcpgo.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	req.Params.Meta = &mcpgo.Meta{ProgressToken: "interop-mcp-go"}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, content := range res.Content {
		if tc, ok := content.(mcpgo.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return text.String(), nil
}

// mcpGoCall is callMCPGo on c as a toolCall.
func mcpGoCall(ctx context.Context, c *mcpgoclient.Client) toolCall {
	return func(name string, args map[string]any) (string, error) { return callMCPGo(ctx, c, name, args) }
}

// countdownMCPGo returns a long countdown on c, for backend.loseCall.
func countdownMCPGo(ctx context.Context, c *mcpgoclient.Client) func() error {
	return func() error {
		_, err := callMCPGo(ctx, c, "countdown", countdownArgs(longCountdown))
		return err
	}
}

// legacy pins mcp-go to the newest protocol version with sessions.
var legacy = mcpgoclient.WithProtocolVersion(mcpgo.LATEST_LEGACY_PROTOCOL_VERSION)

// TestMCPGoCut: pinned to 2025-11-25, mcp-go does not resume a stream that
// breaks off (it resumes only one the server ends, SEP-1699): the cut call
// fails at once, no GET is sent, and the next call works on the same
// session.
func TestMCPGoCut(t *testing.T) {
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	ctx := boundedContext(t)
	c, init := connectMCPGo(t, ctx, b.URL(), legacy)
	if init.ProtocolVersion != "2025-11-25" {
		t.Errorf("negotiated %q, want 2025-11-25", init.ProtocolVersion)
	}
	if err := checkCutFailsAtOnce(t, mcpGoCall(ctx, c)); err == nil || !strings.Contains(err.Error(), "unexpected nil response") {
		t.Errorf("cut call: %v, want: unexpected nil response", err)
	}
	xs := b.relay.recorded()
	if !b.relay.didCut() || len(where(xs, func(e exchange) bool { return e.Method == http.MethodGet })) != 0 {
		t.Errorf("want the call cut and no GET")
	}
	calls := where(xs, func(e exchange) bool { return e.RPC == "tools/call" })
	if len(calls) != 2 || calls[0].Session == "" || calls[1].Session != calls[0].Session {
		t.Errorf("tools/call requests %v, want two on one session", calls)
	}
}

// TestMCPGoOn409: pinned to 2025-11-25, against `tidemark serve
// --data-dir --shutdown-grace 100ms` stopped with SIGTERM during a
// countdown and started again. The graceful shutdown ends the call's
// stream with a retry field; mcp-go resumes it with Last-Event-ID, gets
// 409 generation_mismatch, and fails the call at once. The session
// continues: the next call works without initialize. (After kill -9 the
// stream breaks off instead, and the call fails as in TestMCPGoCut.)
func TestMCPGoOn409(t *testing.T) {
	t.Parallel()
	b := startBackend(t, durableStore, "--shutdown-grace", "100ms")
	ctx := boundedContext(t)
	c, _ := connectMCPGo(t, ctx, b.URL(), legacy)
	err, after := b.loseCall(t, syscall.SIGTERM, countdownMCPGo(ctx, c))
	if err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("lost call: %v, want a failure naming status 409", err)
	}
	if after > fastFail*time.Millisecond {
		t.Errorf("the lost call failed %v after the restart, want at once (within %d ms)", after, fastFail)
	}
	if text, err := callMCPGo(ctx, c, "echo", map[string]any{"text": "after"}); err != nil || text != "after" {
		t.Errorf("call after the restart: %q, %v", text, err)
	}
	xs := b.relay.recorded()
	session := callSession(t, xs)
	resumes := where(xs, isResume)
	if want := http409Refusal; len(resumes) != 1 || resumes[0].Status != want.status || resumes[0].Reason != string(want.reason) || resumes[0].Session != session {
		t.Errorf("resumes %v, want one on session %s, refused %d %s", resumes, session, want.status, want.reason)
	}
	if inits := where(xs, func(e exchange) bool { return e.RPC == "initialize" }); len(inits) != 1 {
		t.Errorf("%d initialize requests, want 1 (the session continues)", len(inits))
	}
}

// TestMCPGoOn404: pinned to 2025-11-25, against the memory store killed
// and started again during a countdown: the call fails at once (the
// stream broke off), the next call fails with
// transport.ErrSessionTerminated after Tidemark's 404, and calling
// Initialize again on the same client starts a new session that works.
func TestMCPGoOn404(t *testing.T) {
	t.Parallel()
	b := startBackend(t, memoryStore)
	ctx := boundedContext(t)
	c, _ := connectMCPGo(t, ctx, b.URL(), legacy)
	if err, _ := b.loseCall(t, syscall.SIGKILL, countdownMCPGo(ctx, c)); err == nil {
		t.Errorf("the lost call succeeded")
	}
	_, err := callMCPGo(ctx, c, "echo", map[string]any{"text": "after"})
	if !errors.Is(err, mcpgotransport.ErrSessionTerminated) {
		t.Errorf("call after the restart: %v, want transport.ErrSessionTerminated", err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "tidemark-interop-mcp-go", Version: "1.0.0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize again: %v", err)
	}
	if text, err := callMCPGo(ctx, c, "echo", map[string]any{"text": "again"}); err != nil || text != "again" {
		t.Errorf("call after initializing again: %q, %v", text, err)
	}
	xs := b.relay.recorded()
	refused := where(xs, func(e exchange) bool { return e.RPC == "tools/call" && e.Status == 404 })
	if len(refused) != 1 || refused[0].Reason != string(http404Refusal.reason) {
		t.Errorf("refused calls %v, want one 404 %s", refused, http404Refusal.reason)
	}
}

// TestMCPGoProtocolEra: by default mcp-go asks server/discover and
// Tidemark answers with the sessionless 2026-07-28: the cut call fails at
// once, as pinned, and the next call works.
func TestMCPGoProtocolEra(t *testing.T) {
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	ctx := boundedContext(t)
	c, init := connectMCPGo(t, ctx, b.URL())
	if init.ProtocolVersion != modernEra {
		t.Errorf("negotiated %q, want %q", init.ProtocolVersion, modernEra)
	}
	checkCutFailsAtOnce(t, mcpGoCall(ctx, c))
	checkSessionless(t, b.relay)
}
