package interop

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The official Go SDK client (github.com/modelcontextprotocol/go-sdk
// v1.8.0, mcp.Client with mcp.StreamableClientTransport). docs/clients.md
// ("What MCP clients do with Tidemark's answers") cites these tests.

// goSDKClient connects to url, pinned to version ("": the SDK's default
// negotiation), and collects progress notifications.
type goSDKClient struct {
	cs *mcp.ClientSession

	mu       sync.Mutex
	progress []float64
}

func connectGoSDK(t *testing.T, ctx context.Context, url, version string) *goSDKClient {
	t.Helper()
	c := &goSDKClient{}
	client := mcp.NewClient(&mcp.Implementation{Name: "tidemark-interop-go", Version: "1.0.0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.progress = append(c.progress, req.Params.Progress)
		},
	})
	// An HTTP client of its own, so its connections end with the test.
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	c.cs = cs
	return c
}

// call calls tool name with args (and a progress token) and returns the
// result's text.
func (c *goSDKClient) call(ctx context.Context, name string, args map[string]any) (string, error) {
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	params.SetProgressToken("interop-go")
	res, err := c.cs.CallTool(ctx, params)
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, content := range res.Content {
		if tc, ok := content.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return text.String(), nil
}

func (c *goSDKClient) got() []float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]float64(nil), c.progress...)
}

// TestGoSDKResumesCut: pinned to 2025-11-25, the client resumes the
// countdown's stream once, at the cut event, and delivers every progress
// notification once, in order, then the result.
func TestGoSDKResumesCut(t *testing.T) {
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	ctx := boundedContext(t)
	c := connectGoSDK(t, ctx, b.URL(), "2025-11-25")
	text, err := c.call(ctx, "countdown", countdownArgs(steps))
	if err != nil || text != countdownResult(steps) {
		t.Fatalf("countdown: %q, %v; want %q", text, err, countdownResult(steps))
	}
	// Notifications are handled concurrently with the call's return;
	// closing the session waits for them.
	if err := c.cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	checkProgress(t, c.got(), steps)
	checkResumedOnce(t, b.relay)
	checkAsked(t, b.relay, "2025-11-25")
}

// TestGoSDKResumesAfterPrimingCut: as TestGoSDKResumesCut, and the relay
// also cuts the resumed stream right after its first event, the priming
// event; the client resumes again with that event's id, delivers every
// progress notification once, in order, then the result, and no event id
// reaches it twice.
func TestGoSDKResumesAfterPrimingCut(t *testing.T) {
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	b.relay.cutResumedPriming()
	ctx := boundedContext(t)
	c := connectGoSDK(t, ctx, b.URL(), "2025-11-25")
	text, err := c.call(ctx, "countdown", countdownArgs(steps))
	if err != nil || text != countdownResult(steps) {
		t.Fatalf("countdown: %q, %v; want %q", text, err, countdownResult(steps))
	}
	if err := c.cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	checkProgress(t, c.got(), steps)
	checkResumedAfterPrimingCut(t, b.relay)
}

// TestGoSDKOn409: pinned to 2025-11-25, against `tidemark serve
// --data-dir` killed and started again during a countdown. The client's
// resume is refused with 409 generation_mismatch, which ends its whole
// session at once: the lost call fails right away, the next call fails
// with the session closed, and closing it sends DELETE, ending the
// session Tidemark had kept at generation 2. Connecting again
// (initialize) works.
func TestGoSDKOn409(t *testing.T) {
	t.Parallel()
	checkGoSDKRestart(t, durableStore, http409Refusal)
}

// TestGoSDKOn404: as TestGoSDKOn409 with the memory store: the resume is
// refused with 404 session_not_found, the lost call fails at once with
// mcp.ErrSessionMissing, the session is closed (without DELETE), and
// connecting again works.
func TestGoSDKOn404(t *testing.T) {
	t.Parallel()
	checkGoSDKRestart(t, memoryStore, http404Refusal)
}

func checkGoSDKRestart(t *testing.T, st store, want refusal) {
	b := startBackend(t, st)
	ctx := boundedContext(t)
	c := connectGoSDK(t, ctx, b.URL(), "2025-11-25")
	session := c.cs.ID()
	err, after := b.loseCall(t, syscall.SIGKILL, func() error {
		_, err := c.call(ctx, "countdown", countdownArgs(longCountdown))
		return err
	})
	if err == nil {
		t.Fatal("the lost call succeeded")
	}
	if after > fastFail*time.Millisecond {
		t.Errorf("the lost call failed %v after the restart, want at once (within %d ms)", after, fastFail)
	}
	if want.status == 404 && !errors.Is(err, mcp.ErrSessionMissing) {
		t.Errorf("lost call: %v, want mcp.ErrSessionMissing", err)
	}
	t.Logf("lost call: %v", err)
	if err := c.cs.Wait(); err == nil {
		t.Errorf("session still open after the refused resume")
	}
	if _, err := c.call(ctx, "echo", map[string]any{"text": "after"}); err == nil {
		t.Errorf("a call on the closed session succeeded")
	}
	b.relay.waitFor(t, "resumes over", clientBound, func(xs []exchange) bool {
		return len(where(xs, func(e exchange) bool { return isResume(e) && !e.Done })) == 0
	})
	// Both streams break at once; the first refusal closes the session,
	// and the other stream's resume, if sent by then, may go unanswered.
	resumes := where(b.relay.recorded(), isResume)
	answered := where(resumes, func(e exchange) bool { return e.Status != 0 })
	if len(resumes) > 2 || len(answered) == 0 || len(map[string]bool{resumes[0].LastEventID: true, resumes[len(resumes)-1].LastEventID: true}) != len(resumes) {
		t.Errorf("resumes %v, want one or two (the call's stream, maybe the standalone one), none retried", resumes)
	}
	for _, e := range answered {
		if e.Status != want.status || e.Reason != string(want.reason) {
			t.Errorf("resume %s, want %d %s", e, want.status, want.reason)
		}
	}
	deleted := func(xs []exchange) []exchange {
		return where(xs, func(e exchange) bool { return e.Method == http.MethodDelete && e.Session == session && e.Done })
	}
	if want.status == 409 {
		b.relay.waitFor(t, "DELETE of session "+session, clientBound, func(xs []exchange) bool { return len(deleted(xs)) > 0 })
	}

	again := connectGoSDK(t, ctx, b.URL(), "2025-11-25")
	if text, err := again.call(ctx, "echo", map[string]any{"text": "again"}); err != nil || text != "again" {
		t.Errorf("call after connecting again: %q, %v", text, err)
	}
	if again.cs.ID() == session {
		t.Errorf("connecting again kept session %s", session)
	}
	wantDeletes := map[int]int{409: 1, 404: 0}[want.status]
	if d := deleted(b.relay.recorded()); len(d) != wantDeletes || wantDeletes == 1 && d[0].Status != http.StatusNoContent {
		t.Errorf("DELETEs of session %s: %v, want %d answered 204", session, d, wantDeletes)
	}
}

// TestGoSDKProtocolEra: by default the client asks server/discover and
// Tidemark answers with the sessionless 2026-07-28, where nothing can be
// resumed: the cut call fails at once ("request terminated without
// response") and the next call works.
func TestGoSDKProtocolEra(t *testing.T) {
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	ctx := boundedContext(t)
	c := connectGoSDK(t, ctx, b.URL(), "")
	if v := c.cs.InitializeResult().ProtocolVersion; v != modernEra {
		t.Errorf("negotiated %q, want %q", v, modernEra)
	}
	err := checkCutFailsAtOnce(t, func(name string, args map[string]any) (string, error) { return c.call(ctx, name, args) })
	if err == nil || !strings.Contains(err.Error(), "request terminated without response") {
		t.Errorf("cut call: %v, want: request terminated without response", err)
	}
	checkSessionless(t, b.relay)
}
