package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
// state (generation 1 → 2) while two countdowns stream, each on a POST
// stream of its own. Resuming each of the old generation's streams answers
// 409 generation_mismatch with error.data.lostRequests naming that
// stream's call: each call fails once, with ErrSessionLost (fenced), never
// with events replayed across generations, and the transport reports one
// fenced event per stream, each with its one call, then one new session.
// (A 409 without lostRequests would fail both calls in one report.) The
// standalone stream is off, so the calls' streams are the only ones
// refused (TestGenerationChangeFencesStandalone has the other).
func TestGenerationChangeFencesCall(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond)
	rec := newRecorder()
	cs := connect(t, srv.url, rec, func(tr *client.Transport) { tr.DisableStandaloneStream = true })
	old := cs.ID()

	tokens := []string{"a", "b"}
	errc := make(chan error, len(tokens))
	for _, token := range tokens {
		go func() {
			_, err := countdown(t.Context(), cs, token, 50, 10)
			errc <- err
		}()
	}
	waitFor(t, func() bool { return len(rec.progressOf("a")) >= 3 && len(rec.progressOf("b")) >= 3 })
	if _, err := srv.h.Registry().Recreate(t.Context(), old); err != nil {
		t.Fatalf("Recreate: %v", err)
	}
	for range tokens {
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
	}
	for _, token := range tokens {
		got := rec.progressOf(token)
		if !slices.Equal(got, steps(len(got))) {
			t.Errorf("progress of %s = %v, want 1..%d each once in order", token, got, len(got))
		}
	}
	wantNewSession(t, cs, rec, old)
	wantRefusalEvents(t, rec, old, map[string]int{"POST tools/call": 1}, 2)
}

// TestGenerationChangeFencesStandalone: the server re-creates the state of
// a session with no call in flight. Resuming the standalone stream of the
// old generation answers 409 generation_mismatch with an empty
// error.data.lostRequests (the standalone stream carries no request): the
// transport reports exactly one fenced event with no call failed, then one
// new session, on which a call works.
func TestGenerationChangeFencesStandalone(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond)
	rec := newRecorder()
	primed := make(chan struct{})
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	cs := connect(t, srv.url, rec, func(tr *client.Transport) {
		tr.HTTPClient = &http.Client{Transport: &primingWatch{base: base, primed: primed}}
	})
	old := cs.ID()
	select {
	case <-primed:
	case <-time.After(10 * time.Second):
		t.Fatal("the standalone stream's priming event did not arrive within 10s")
	}
	if _, err := srv.h.Registry().Recreate(t.Context(), old); err != nil {
		t.Fatalf("Recreate: %v", err)
	}
	wantNewSession(t, cs, rec, old)
	wantRefusalEvents(t, rec, old, map[string]int{"GET standalone": 0}, 1)
}

// wantNewSession waits for the transport to replace session old with a
// new one, and checks that a call works on it.
func wantNewSession(t *testing.T, cs *mcp.ClientSession, rec *recorder, old string) {
	t.Helper()
	waitFor(t, func() bool { return rec.count(client.EventReinitialized) == 1 })
	if cs.ID() == old {
		t.Errorf("session ID unchanged after fencing")
	}
	text, err := countdown(t.Context(), cs, "next", 2, 0)
	if err != nil || text != "countdown of 2 finished" {
		t.Fatalf("countdown on the new session = %q, %v", text, err)
	}
}

// primingWatch is an http.RoundTripper that closes primed once the body
// of the first standalone GET (a GET without Last-Event-ID) has passed a
// whole event with an id to the client: that stream has a cursor to
// resume with, even if the server closes it right after.
type primingWatch struct {
	base   http.RoundTripper
	primed chan struct{}
	once   sync.Once
}

func (p *primingWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || req.Header.Get("Last-Event-ID") != "" {
		return resp, err
	}
	resp.Body = &primingBody{ReadCloser: resp.Body, w: p}
	return resp, nil
}

// primingBody is the body of a standalone GET that primingWatch watches.
type primingBody struct {
	io.ReadCloser
	w    *primingWatch
	seen []byte // what the client read of it, up to the first event
	done bool   // the first event with an id has passed
}

func (b *primingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if !b.done {
		b.seen = append(b.seen, p[:n]...)
		if i := bytes.Index(b.seen, []byte("id: ")); i >= 0 && bytes.Contains(b.seen[i:], []byte("\n\n")) {
			b.done, b.seen = true, nil
			b.w.once.Do(func() { close(b.w.primed) })
		}
	}
	return n, err
}

// wantRefusalEvents checks the events rec saw besides resumes: n
// EventFenced for streams of session old, each a different stream, whose
// label starts with a key of calls and that failed that key's number of
// calls, all 409 generation_mismatch; and one EventReinitialized
// replacing old, after the first of them. Nothing else: no stream lost, no
// duplicate, no second report of a stream.
func wantRefusalEvents(t *testing.T, rec *recorder, old string, calls map[string]int, n int) {
	t.Helper()
	// A stream's fenced event follows the failure of its calls
	// (conn.fenceStream): a test that has every call's error may still be
	// ahead of the last stream's event.
	waitFor(t, func() bool { return rec.count(client.EventFenced) >= n })
	rec.mu.Lock()
	var evs []client.Event
	for _, e := range rec.events {
		if e.Kind != client.EventResumed {
			evs = append(evs, e)
		}
	}
	rec.mu.Unlock()
	if len(evs) != n+1 || evs[0].Kind != client.EventFenced {
		t.Fatalf("events besides resumes: %v, want %d fenced and one reinitialized, fenced first", evs, n)
	}
	streams := map[string]bool{}
	reinit := 0
	for _, e := range evs {
		switch e.Kind {
		case client.EventFenced:
			want, known := -1, false
			for prefix, c := range calls {
				if strings.HasPrefix(e.Stream, prefix) {
					want, known = c, true
				}
			}
			if !known || streams[e.Stream] || e.Session != old || e.Status != http.StatusConflict ||
				e.Reason != "generation_mismatch" || e.Calls != want {
				t.Errorf("fenced event %v, want one per stream of session %s, 409 generation_mismatch, calls %v", e, old, calls)
			}
			streams[e.Stream] = true
		case client.EventReinitialized:
			reinit++
			if e.Session != old || e.NewSession == "" || e.NewSession == old {
				t.Errorf("event %v, want reinitialized replacing %s", e, old)
			}
		default:
			t.Errorf("event %v, want only fenced and reinitialized", e)
		}
	}
	if reinit != 1 {
		t.Errorf("events %v: %d reinitialized, want 1", evs, reinit)
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
