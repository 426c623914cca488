package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/client"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server is an in-process Tidemark serving the demo tools on loopback.
type server struct {
	h   *tidemark.Handler
	srv *httptest.Server
	url string
}

func startServer(t *testing.T, retry time.Duration) *server {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Transport: transport.Options{Retry: retry, Logger: logger},
	})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	})
	return &server{h: h, srv: srv, url: srv.URL}
}

// recorder collects what a client saw: progress per token and transport
// events.
type recorder struct {
	mu       sync.Mutex
	progress map[string][]float64
	events   []client.Event
}

func newRecorder() *recorder { return &recorder{progress: make(map[string][]float64)} }

func (r *recorder) onProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := fmt.Sprint(req.Params.ProgressToken)
	r.progress[key] = append(r.progress[key], req.Params.Progress)
}

func (r *recorder) onEvent(e client.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []client.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []client.EventKind
	for _, e := range r.events {
		ks = append(ks, e.Kind)
	}
	return ks
}

func (r *recorder) count(k client.EventKind) int {
	n := 0
	for _, got := range r.kinds() {
		if got == k {
			n++
		}
	}
	return n
}

// settled returns token's progress once it has n entries (the SDK runs
// notification handlers apart from returning a call's result, so the last
// ones may land just after the call returns), or what came within 5s.
func (r *recorder) settled(token string, n int) []float64 {
	deadline := time.Now().Add(5 * time.Second)
	for len(r.progressOf(token)) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return r.progressOf(token)
}

func (r *recorder) progressOf(token string) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.progress[token])
}

// connect returns a client session over a new client.Transport to url.
func connect(t *testing.T, url string, rec *recorder, tune func(*client.Transport)) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	tr := &client.Transport{
		Endpoint:       url,
		HTTPClient:     hc,
		InitialBackoff: 10 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
		ResumeTimeout:  5 * time.Second,
		OnEvent:        rec.onEvent,
		Logger:         testLogger(t),
	}
	if tune != nil {
		tune(tr)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "client-test", Version: "1.0.0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: rec.onProgress,
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// countdown calls the countdown tool with a progress token and returns the
// result text.
func countdown(ctx context.Context, cs *mcp.ClientSession, token string, n, delayMS int) (string, error) {
	params := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": n, "delay_ms": delayMS}}
	params.SetProgressToken(token)
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) != 1 {
		return "", fmt.Errorf("tool error: %+v", res.Content)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return "", fmt.Errorf("content %T", res.Content[0])
	}
	return tc.Text, nil
}

func steps(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(i + 1)
	}
	return s
}

// TestHandshakeUsesStatefulEra: mcp.Client asks server/discover first
// (2026-07-28); the transport declines, so the session is a 2025-11-25
// session with a token, and a call works.
func TestHandshakeUsesStatefulEra(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond)
	rec := newRecorder()
	cs := connect(t, srv.url, rec, nil)
	if got := cs.InitializeResult().ProtocolVersion; got != "2025-11-25" {
		t.Errorf("protocol version = %q, want 2025-11-25", got)
	}
	if cs.ID() == "" {
		t.Errorf("session ID is empty, want Tidemark's token")
	}
	text, err := countdown(t.Context(), cs, "t1", 5, 0)
	if err != nil || text != "countdown of 5 finished" {
		t.Fatalf("countdown = %q, %v", text, err)
	}
	if got := rec.settled("t1", 5); !slices.Equal(got, steps(5)) {
		t.Errorf("progress = %v, want %v", got, steps(5))
	}
	if ks := rec.kinds(); len(ks) != 0 {
		t.Errorf("events = %v, want none", ks)
	}
}

// TestResumeAfterCut: a proxy cuts the POST stream after its 5th event
// (priming + 4 progress); the transport resumes with Last-Event-ID and the
// SDK sees every progress exactly once and the result.
func TestResumeAfterCut(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond)
	var (
		mu     sync.Mutex
		armed  bool
		events int
		cut    int
	)
	p := proxyTo(t, strings.TrimPrefix(srv.url, "http://"), func(conn int, chunk []byte) faultproxy.Decision {
		mu.Lock()
		defer mu.Unlock()
		if !armed || cut > 0 {
			return faultproxy.Decision{Forward: len(chunk)}
		}
		// Count event ends; cut right after the 5th.
		for i := 0; i+1 < len(chunk); i++ {
			if chunk[i] == '\n' && chunk[i+1] == '\n' {
				events++
				if events == 5 {
					cut++
					return faultproxy.Decision{Forward: i + 2, Cut: true}
				}
			}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	})
	rec := newRecorder()
	cs := connect(t, "http://"+p.Addr(), rec, func(tr *client.Transport) {
		tr.DisableStandaloneStream = true
		tr.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	})
	mu.Lock()
	armed = true
	mu.Unlock()
	text, err := countdown(t.Context(), cs, "cut", 20, 5)
	if err != nil || text != "countdown of 20 finished" {
		t.Fatalf("countdown = %q, %v", text, err)
	}
	if got := rec.settled("cut", 20); !slices.Equal(got, steps(20)) {
		t.Errorf("progress = %v, want %v", got, steps(20))
	}
	if cut != 1 {
		t.Errorf("proxy cut %d times, want 1", cut)
	}
	if got := rec.kinds(); !slices.Equal(got, []client.EventKind{client.EventResumed}) {
		t.Errorf("events = %v, want [resumed]", got)
	}
}

// TestSessionDeletedFailsCallAndReinitializes: the session is ended on the
// server (DELETE by someone else) while a countdown streams. The stream
// closes, the resume answers 404, and the call fails with ErrSessionLost;
// the transport starts a new session, on which the next call succeeds.
func TestSessionDeletedFailsCallAndReinitializes(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond)
	rec := newRecorder()
	cs := connect(t, srv.url, rec, nil)
	old := cs.ID()

	errc := make(chan error, 1)
	go func() {
		_, err := countdown(t.Context(), cs, "lost", 200, 10)
		errc <- err
	}()
	waitFor(t, func() bool { return len(rec.progressOf("lost")) >= 3 })
	deleteSession(t, srv.url, old)

	start := time.Now()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("call still pending 10s after its session was deleted")
	}
	t.Logf("call failed %v after the DELETE: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("err = %v, want ErrSessionLost", err)
	}
	var ce *client.CallError
	if !errors.As(err, &ce) || ce.Status != http.StatusNotFound || ce.Reason != "session_not_found" || ce.Method != "tools/call" {
		t.Errorf("CallError = %+v, want status 404 reason session_not_found method tools/call", ce)
	}
	waitFor(t, func() bool { return rec.count(client.EventReinitialized) == 1 })
	text, err := countdown(t.Context(), cs, "after", 3, 0)
	if err != nil || text != "countdown of 3 finished" {
		t.Fatalf("countdown after re-initialization = %q, %v", text, err)
	}
	if got := rec.settled("after", 3); !slices.Equal(got, steps(3)) {
		t.Errorf("progress after re-initialization = %v, want %v", got, steps(3))
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var lostEv, reinit *client.Event
	for i := range rec.events {
		switch rec.events[i].Kind {
		case client.EventSessionNotFound:
			lostEv = &rec.events[i]
		case client.EventReinitialized:
			reinit = &rec.events[i]
		}
	}
	if lostEv == nil || lostEv.Session != old || lostEv.Calls != 1 || lostEv.Status != 404 {
		t.Errorf("session-not-found event = %+v, want session %s, 1 call, status 404", lostEv, old)
	}
	if reinit == nil || reinit.Session != old || reinit.NewSession == "" || reinit.NewSession == old {
		t.Errorf("reinitialized event = %+v, want old %s and a new token", reinit, old)
	}
}

// TestGenerationChangeFencesCall: the server re-creates the session's
// state (generation 1 → 2) while a countdown streams. Resuming the old
// generation's stream answers 409 generation_mismatch; the call fails with
// ErrSessionLost (fenced), never with events replayed across generations.
func TestGenerationChangeFencesCall(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond)
	rec := newRecorder()
	cs := connect(t, srv.url, rec, nil)
	old := cs.ID()

	errc := make(chan error, 1)
	go func() {
		_, err := countdown(t.Context(), cs, "fenced", 50, 10)
		errc <- err
	}()
	waitFor(t, func() bool { return len(rec.progressOf("fenced")) >= 3 })
	if _, err := srv.h.Registry().Recreate(t.Context(), old); err != nil {
		t.Fatalf("Recreate: %v", err)
	}
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("call still pending 10s after the generation changed")
	}
	var ce *client.CallError
	if !errors.Is(err, client.ErrSessionLost) || !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Reason != "generation_mismatch" {
		t.Fatalf("err = %v, want ErrSessionLost with 409 generation_mismatch", err)
	}
	got := rec.progressOf("fenced")
	if !slices.Equal(got, steps(len(got))) {
		t.Errorf("progress = %v, want 1..%d each once in order", got, len(got))
	}
	waitFor(t, func() bool { return rec.count(client.EventReinitialized) == 1 })
	if n := rec.count(client.EventFenced); n != 1 {
		t.Errorf("fenced events = %d, want 1 (kinds %v)", n, rec.kinds())
	}
	if cs.ID() == old {
		t.Errorf("session ID unchanged after fencing")
	}
	text, err := countdown(t.Context(), cs, "next", 2, 0)
	if err != nil || text != "countdown of 2 finished" {
		t.Fatalf("countdown on the new session = %q, %v", text, err)
	}
}

// TestNoCursorFailsCall: a server whose POST stream breaks before any
// event ID leaves nothing to resume: the call fails with ErrStreamLost at
// once instead of hanging.
func TestNoCursorFailsCall(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond)
	var mu sync.Mutex
	cutNext := false
	p := proxyTo(t, strings.TrimPrefix(srv.url, "http://"), func(conn int, chunk []byte) faultproxy.Decision {
		mu.Lock()
		defer mu.Unlock()
		// Cut the call's SSE answer before its first byte reaches the
		// client: no event ID ever arrives.
		if cutNext && strings.Contains(string(chunk), "text/event-stream") {
			cutNext = false
			return faultproxy.Decision{Forward: 0, Cut: true}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	})
	rec := newRecorder()
	cs := connect(t, "http://"+p.Addr(), rec, func(tr *client.Transport) {
		tr.DisableStandaloneStream = true
		tr.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	})
	mu.Lock()
	cutNext = true
	mu.Unlock()
	_, err := countdown(t.Context(), cs, "x", 3, 0)
	if !errors.Is(err, client.ErrStreamLost) {
		t.Fatalf("err = %v, want ErrStreamLost", err)
	}
}

// TestResumeTimeoutBoundsCall: the server goes away mid-call and never
// comes back; the call fails with ErrStreamLost after ResumeTimeout.
func TestResumeTimeoutBoundsCall(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond)
	p := proxyTo(t, strings.TrimPrefix(srv.url, "http://"), nil)
	rec := newRecorder()
	cs := connect(t, "http://"+p.Addr(), rec, func(tr *client.Transport) {
		tr.ResumeTimeout = time.Second
		tr.DisableStandaloneStream = true
	})
	errc := make(chan error, 1)
	go func() {
		_, err := countdown(t.Context(), cs, "gone", 200, 10)
		errc <- err
	}()
	waitFor(t, func() bool { return len(rec.progressOf("gone")) >= 2 })
	p.Close() // the proxy's port refuses connections from now on
	start := time.Now()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("call still pending 10s after the server went away")
	}
	took := time.Since(start)
	if !errors.Is(err, client.ErrStreamLost) {
		t.Fatalf("err = %v, want ErrStreamLost", err)
	}
	// ResumeTimeout (1s) bounds the wait; the last delay is clipped to it.
	// It counts from when the transport saw the break, which can come
	// before p.Close returns and start is taken, so the lower bound is a
	// little under 1s; the upper bound leaves room for a loaded CI machine
	// and still tells the bound from the 30 s default.
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Errorf("call failed %v after the break, want between 0.9s and 3s", took)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func deleteSession(t *testing.T, url, token string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Session-Id", token)
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE = %d, want 204", resp.StatusCode)
	}
}

// testLogger logs the transport's lines, debug included, to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestJSONResponseMode: a server that answers calls with one
// application/json body sends their progress on the standalone GET stream;
// the transport delivers both.
func TestJSONResponseMode(t *testing.T) {
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Transport: transport.Options{JSONResponse: true, Logger: slog.New(slog.DiscardHandler)},
	})
	srv := httptest.NewServer(h)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	}()
	rec := newRecorder()
	cs := connect(t, srv.URL, rec, nil)
	text, err := countdown(t.Context(), cs, "json", 5, 0)
	if err != nil || text != "countdown of 5 finished" {
		t.Fatalf("countdown = %q, %v", text, err)
	}
	if got := rec.settled("json", 5); !slices.Equal(got, steps(5)) {
		t.Errorf("progress = %v, want %v", got, steps(5))
	}
	cs.Close()
}

// proxyTo starts a fault-injecting loopback proxy to hostport whose filter
// decides the fate of each chunk the server sends (nil: forward all); it
// is closed when the test ends.
func proxyTo(t *testing.T, hostport string, filter faultproxy.Filter) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(hostport, filter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
