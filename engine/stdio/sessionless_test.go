package stdio

// Tests of the bridge's shared subprocess (engine/bridge) as the stdio
// gateway wires it: one more session of this engine, counted in
// MaxProcesses.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/bridge"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// sessionlessIdle is the bridge's IdleAfter in these tests.
const sessionlessIdle = 200 * time.Millisecond

// bridgeStarted is the log line of each subprocess the bridge starts.
const bridgeStarted = `msg="subprocess started" session=bridge`

// sessionlessGateway returns an engine of the test server (at most one
// subprocess) and the URL of a bridge over it on loopback, wired as
// `tidemark serve --stdio` wires them (the engine's Reclaim asks the
// bridge), whose backend connection ends after idle without a request.
func sessionlessGateway(t *testing.T, idle time.Duration, logs *testenv.LogBuffer) (*Engine, string) {
	t.Helper()
	var br *bridge.Bridge
	e := testEngine(t, logs, Options{MaxProcesses: 1, Reclaim: func() bool { return br.EndIdle() }})
	logger := slog.New(slog.NewTextHandler(logs, nil))
	br = bridge.New(bridge.Options{
		Dial: bridge.EngineTransport(e, "bridge", logger), IdleAfter: idle, Logger: logger,
		HTTP: mcp.StreamableHTTPOptions{DisableLocalhostProtection: true},
	})
	srv := httptest.NewServer(br)
	t.Cleanup(func() {
		srv.Close()
		br.Close()
	})
	return e, srv.URL
}

// sessionlessClient connects a go-sdk client (2026-07-28) to url with
// opts.
func sessionlessClient(t *testing.T, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "sessionless-test", Version: "1"}, opts).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// waitRunning waits until e runs n subprocesses, for at most wait.
func waitRunning(t *testing.T, e *Engine, n int, logs *testenv.LogBuffer) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for e.Running() != n {
		if time.Now().After(deadline) {
			t.Fatalf("Running() = %d after %v, want %d; log:\n%s", e.Running(), wait, n, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// progressClient connects a sessionless client to url; the channel
// receives (without blocking the client) when a progress notification
// came, so a test knows its call is in flight.
func progressClient(t *testing.T, url string) (*mcp.ClientSession, <-chan struct{}) {
	t.Helper()
	progressed := make(chan struct{}, 1)
	cs := sessionlessClient(t, url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		},
	})
	return cs, progressed
}

// TestSessionlessSubprocessEndsWhenIdle: the bridge's subprocess runs
// while a sessionless call is in flight (longer than the idle bound),
// then ends once idle, so that a stateful session can start under
// MaxProcesses 1; the next sessionless request starts it again. The
// failing input (a newcomer's): a server/discover probe left the
// subprocess running for good, and with --max-processes 1 every
// initialize got 503 capacity.
func TestSessionlessSubprocessEndsWhenIdle(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e, url := sessionlessGateway(t, sessionlessIdle, logs)
	cs, progressed := progressClient(t, url)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()

	// 5 steps of 150 ms: the call is in flight for 3.75 idle bounds.
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": 5, "delay_ms": 150, "label": "a"}}
		p.SetProgressToken("t")
		res, err := cs.CallTool(ctx, p)
		done <- answer{res, err}
	}()
	select {
	case <-progressed:
	case a := <-done:
		t.Fatalf("countdown answered before its progress: %v, %+v; log:\n%s", a.err, a.res, logs)
	}
	if _, err := e.Start(ctx, engine.Info{Token: "HELDTOKENABCDEFGHIJKLMNOPQ", Generation: 1}, newOutbox()); !errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("Start while the bridge's call is in flight: %v, want engine.ErrCapacity", err)
	}
	a := <-done
	if a.err != nil || len(a.res.Content) != 1 || a.res.Content[0].(*mcp.TextContent).Text != "done 5" {
		t.Fatalf("countdown: %v, %+v; want \"done 5\"", a.err, a.res)
	}
	if n := strings.Count(logs.String(), bridgeStarted); n != 1 {
		t.Fatalf("%d subprocesses of the bridge started during the call, want 1; log:\n%s", n, logs)
	}

	waitRunning(t, e, 0, logs)
	waitLog(t, logs, `msg="ended the idle backend connection for sessionless requests; the next request opens a new one" connection=1 idle_after=200ms`)
	if strings.Contains(logs.String(), "backend connection for sessionless requests ended") {
		t.Errorf("the idle end was logged as a lost backend:\n%s", logs)
	}
	s, _ := startSession(t, e, 1, nil, nil)
	s.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": 1, "delay_ms": 0, "label": "b"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "done 1" {
		t.Fatalf("countdown after the idle end: %v, %+v", err, res)
	}
	waitLog(t, logs, bridgeStarted+" generation=2")
}

// TestSessionlessListenKeepsSubprocess: an open subscriptions/listen
// stream is a request in flight: the bridge's subprocess outlives the
// idle bound under it, and ends once the stream is closed.
func TestSessionlessListenKeepsSubprocess(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e, url := sessionlessGateway(t, sessionlessIdle, logs)
	c := &mcptest.Client{URL: url, HTTP: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(c.HTTP.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	resp, _, err := c.Listen(ctx, mcptest.SessionlessBody(1, "subscriptions/listen",
		map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{"test://watched"}}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	// Five idle bounds with the stream open: an idle end would be due
	// four times over.
	time.Sleep(5 * sessionlessIdle)
	if n := e.Running(); n != 1 || strings.Contains(logs.String(), "ended the idle backend") {
		t.Fatalf("with a listen stream open past the idle bound: Running() = %d, want 1; log:\n%s", n, logs)
	}
	resp.Body.Close()
	waitRunning(t, e, 0, logs)
	if n := strings.Count(logs.String(), bridgeStarted); n != 1 {
		t.Errorf("%d subprocesses of the bridge started, want 1; log:\n%s", n, logs)
	}
}

// TestSessionStartEndsIdleSubprocess: under MaxProcesses 1, a stateful
// session's start takes the place of the bridge's subprocess once no
// sessionless request is in flight, without waiting for the idle end
// (here never); a call in flight keeps it. Sessionless requests get 503
// capacity while the session runs, and start the bridge's subprocess
// again once it ended. The failing input: `tidemark connect --protocol
// auto` probes with server/discover, then sends initialize at once,
// which got 503 capacity.
func TestSessionStartEndsIdleSubprocess(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e, url := sessionlessGateway(t, -1, logs)
	cs, progressed := progressClient(t, url)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": 2, "delay_ms": 200, "label": "a"}}
		p.SetProgressToken("t")
		_, err := cs.CallTool(ctx, p)
		done <- err
	}()
	select {
	case <-progressed:
	case err := <-done:
		t.Fatalf("countdown answered before its progress: %v", err)
	}
	if _, err := e.Start(ctx, engine.Info{Token: "HELDTOKENABCDEFGHIJKLMNOPQ", Generation: 1}, newOutbox()); !errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("Start while the bridge's call is in flight: %v, want engine.ErrCapacity", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("countdown: %v", err)
	}

	// The client may read its answer just before the bridge's handler
	// returns: until then the request is in flight, and the start is
	// refused.
	var s engine.Session
	deadline := time.Now().Add(wait)
	for {
		var err error
		s, err = e.Start(ctx, engine.Info{Token: "TESTTOKENABCDEFGHIJKLMNOPQ", Generation: 1}, newOutbox())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Start with the bridge idle, for %v: %v; log:\n%s", wait, err, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { s.Close() })
	waitLog(t, logs, `msg="ended the idle backend connection for sessionless requests to make room for a session; the next request opens a new one" connection=1`)
	if n := e.Running(); n != 1 {
		t.Errorf("Running() = %d with the session started, want 1", n)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": 1, "delay_ms": 0, "label": "b"}}); err == nil || !strings.Contains(err.Error(), "Service Unavailable") {
		t.Errorf("sessionless call while the session holds the one subprocess: %v, want 503 Service Unavailable", err)
	}
	s.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": 1, "delay_ms": 0, "label": "c"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "done 1" {
		t.Fatalf("sessionless call after the session ended: %v, %+v", err, res)
	}
	// Generation 2 was the attempt refused at capacity.
	waitLog(t, logs, bridgeStarted+" generation=3")
}
