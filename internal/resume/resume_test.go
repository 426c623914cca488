// resume_test.go tests the loop on real HTTP over loopback: what the GETs
// carry, the waits between them, the deadline, and what the caller gets.

package resume_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/internal/resume"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server answers the n-th GET (from 0) with answers[n], the last one
// again once they run out, and records when each came and its headers.
type server struct {
	t       *testing.T
	answers []func(w http.ResponseWriter, r *http.Request)

	mu    sync.Mutex
	times []time.Time
	hdrs  []http.Header
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.times)
	s.times = append(s.times, time.Now())
	s.hdrs = append(s.hdrs, r.Header.Clone())
	s.mu.Unlock()
	if r.Method != http.MethodGet {
		s.t.Errorf("method %s, want GET", r.Method)
	}
	s.answers[min(n, len(s.answers)-1)](w, r)
}

func (s *server) gets() ([]time.Time, []http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.times), slices.Clone(s.hdrs)
}

func start(t *testing.T, answers ...func(w http.ResponseWriter, r *http.Request)) (*server, string) {
	s := &server{t: t, answers: answers}
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return s, srv.URL + "/mcp"
}

// status answers with code, Retry-After (when not ""), and body as
// application/json (when not "").
func status(code int, retryAfter, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		if body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// stream answers 200 with an SSE stream of one event.
func stream(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	io.WriteString(w, "id: c2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n")
}

// TestResumeHeaders: the GET carries the caller's headers, then Accept
// text/event-stream, Mcp-Session-Id, MCP-Protocol-Version and
// Last-Event-ID, which replace the caller's values of the same names; a
// 200 stream is handed over with its body.
func TestResumeHeaders(t *testing.T) {
	s, url := start(t, stream)
	st := &resume.Stream{Policy: resume.Policy{Base: time.Millisecond, Timeout: 10 * time.Second}}
	hdr := http.Header{"Authorization": {"Bearer x"}, "Accept": {"application/json"}, "Mcp-Session-Id": {"other"}}
	res, err := st.Resume(t.Context(), resume.Request{URL: url, Header: hdr, Session: "sess-1", Version: "2025-11-25", LastEventID: "c1"}, io.EOF)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != resume.Resumed || res.Status != http.StatusOK || res.Response == nil {
		t.Fatalf("result %v, want resumed 200 with a response", res.Outcome)
	}
	body, _ := io.ReadAll(res.Response.Body)
	res.Response.Body.Close()
	if want := "id: c2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n"; string(body) != want {
		t.Errorf("body %q, want %q", body, want)
	}
	_, hdrs := s.gets()
	if len(hdrs) != 1 {
		t.Fatalf("%d GETs, want 1", len(hdrs))
	}
	for name, want := range map[string][]string{
		"Authorization":        {"Bearer x"},
		"Accept":               {"text/event-stream"},
		"Mcp-Session-Id":       {"sess-1"},
		"Mcp-Protocol-Version": {"2025-11-25"},
		"Last-Event-Id":        {"c1"},
	} {
		if got := hdrs[0].Values(name); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// TestResumeWaits: after the break the first GET waits for the server's
// SSE retry (200 ms, here above Base); a 503 with Retry-After 1 holds the
// next GET back one second at least; the third GET resumes the stream.
func TestResumeWaits(t *testing.T) {
	s, url := start(t, status(http.StatusServiceUnavailable, "1", ""), status(http.StatusServiceUnavailable, "", ""), stream)
	var outcomes []string
	st := &resume.Stream{
		Policy:   resume.Policy{Base: time.Millisecond, Cap: 10 * time.Millisecond, Timeout: 30 * time.Second},
		Retry:    200 * time.Millisecond,
		OnAnswer: func(o resume.Outcome) { outcomes = append(outcomes, o.String()) },
	}
	broke := time.Now()
	res, err := st.Resume(t.Context(), resume.Request{URL: url, Session: "s", LastEventID: "c1"}, io.EOF)
	if err != nil {
		t.Fatal(err)
	}
	res.Response.Body.Close()
	times, _ := s.gets()
	if len(times) != 3 {
		t.Fatalf("%d GETs, want 3", len(times))
	}
	if d := times[0].Sub(broke); d < 200*time.Millisecond {
		t.Errorf("first GET %v after the break, want at least the server's retry, 200ms", d)
	}
	if d := times[1].Sub(times[0]); d < time.Second {
		t.Errorf("second GET %v after a 503 with Retry-After 1, want at least 1s", d)
	}
	if d := times[2].Sub(times[1]); d < 200*time.Millisecond {
		t.Errorf("third GET %v after the second, want at least the server's retry, 200ms", d)
	}
	want := []string{"retry-later 503 after=1s", "retry-later 503", "resumed 200"}
	if !slices.Equal(outcomes, want) {
		t.Errorf("outcomes %q, want %q", outcomes, want)
	}
}

// TestResumeStopsAtOnce: a 404 and a 409 end the resume at the first
// answer, with what the body says.
func TestResumeStopsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
		want   string
		lost   []jsonrpc.ID
	}{
		{"404", status(http.StatusNotFound, "", `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"session is unknown","data":{"reason":"session_not_found"}}}`),
			"session-lost 404 session_not_found: session is unknown", nil},
		{"409", status(http.StatusConflict, "", `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"re-created","data":{"reason":"generation_mismatch","lostRequests":[3,"x"]}}}`),
			`generation-lost 409 generation_mismatch: re-created lost=[3 "x"]`, []jsonrpc.ID{mustID(t, float64(3)), mustID(t, "x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, url := start(t, tc.answer)
			st := &resume.Stream{Policy: resume.Policy{Base: time.Millisecond, Timeout: 30 * time.Second, RetryBareConflict: true}}
			res, err := st.Resume(t.Context(), resume.Request{URL: url, Session: "s", LastEventID: "c1"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.String() != tc.want || res.Expired || res.Response != nil {
				t.Errorf("result %q expired=%v, want %q", res.String(), res.Expired, tc.want)
			}
			if !slices.Equal(res.LostRequests, tc.lost) {
				t.Errorf("lost requests %v, want %v", res.LostRequests, tc.lost)
			}
			if times, _ := s.gets(); len(times) != 1 {
				t.Errorf("%d GETs, want 1", len(times))
			}
		})
	}
}

func mustID(t *testing.T, v any) jsonrpc.ID {
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestResumeDeadline: a server that accepts the GET and never answers it
// holds the resume no longer than Policy.Timeout after the break: the
// result is expired, its error ErrDeadline.
func TestResumeDeadline(t *testing.T) {
	release := make(chan struct{})
	_, url := start(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	st := &resume.Stream{Policy: resume.Policy{Base: time.Millisecond, Timeout: 300 * time.Millisecond}}
	broke := time.Now()
	res, err := st.Resume(t.Context(), resume.Request{URL: url, Session: "s", LastEventID: "c1"}, io.EOF)
	took := time.Since(broke)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Expired || res.Kind != resume.RetryLater || !errors.Is(res.Err, resume.ErrDeadline) {
		t.Errorf("result %v expired=%v, want expired with %v", res.Outcome, res.Expired, resume.ErrDeadline)
	}
	if took < 300*time.Millisecond {
		t.Errorf("gave up %v after the break, before the 300ms timeout", took)
	}
}

// TestResumeDeadlineKeptAcrossCalls: the deadline counts from the break
// after the stream's last new event, across Resume calls: a stream
// resumed, then cut again before any new event, expires at once once its
// timeout has passed; Progressed starts it over.
func TestResumeDeadlineKeptAcrossCalls(t *testing.T) {
	s, url := start(t, stream)
	st := &resume.Stream{Policy: resume.Policy{Base: time.Millisecond, Timeout: 100 * time.Millisecond}}
	req := resume.Request{URL: url, Session: "s", LastEventID: "c1"}
	res, err := st.Resume(t.Context(), req, io.EOF)
	if err != nil || res.Kind != resume.Resumed {
		t.Fatalf("first resume: %v, %v", res.Outcome, err)
	}
	res.Response.Body.Close()
	time.Sleep(150 * time.Millisecond)
	res, err = st.Resume(t.Context(), req, io.ErrUnexpectedEOF)
	if err != nil || !res.Expired || !errors.Is(res.Err, io.ErrUnexpectedEOF) {
		t.Fatalf("second resume: %v expired=%v, %v; want expired with the cut's cause", res.Outcome, res.Expired, err)
	}
	st.Progressed()
	res, err = st.Resume(t.Context(), req, io.EOF)
	if err != nil || res.Kind != resume.Resumed {
		t.Fatalf("resume after progress: %v, %v", res.Outcome, err)
	}
	res.Response.Body.Close()
	if times, _ := s.gets(); len(times) != 2 {
		t.Errorf("%d GETs, want 2", len(times))
	}
}

// TestOpen: Open's first GET goes at once, without Last-Event-ID when the
// request has no cursor; a refusal stops it.
func TestOpen(t *testing.T) {
	s, url := start(t, status(http.StatusMethodNotAllowed, "", ""))
	st := &resume.Stream{Policy: resume.Policy{Base: time.Hour}}
	res, err := st.Open(t.Context(), resume.Request{URL: url, Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != resume.Refused || res.Status != http.StatusMethodNotAllowed {
		t.Errorf("result %v, want refused 405", res.Outcome)
	}
	_, hdrs := s.gets()
	if len(hdrs) != 1 || hdrs[0].Get("Last-Event-ID") != "" {
		t.Errorf("GETs %v, want one without Last-Event-ID", hdrs)
	}
}

// TestResumeContextEnds: a context that ends during a wait ends the resume
// with its error and the last outcome.
func TestResumeContextEnds(t *testing.T) {
	_, url := start(t, status(http.StatusServiceUnavailable, "", ""))
	ctx, cancel := context.WithCancel(t.Context())
	st := &resume.Stream{Policy: resume.Policy{Base: time.Hour}, OnAnswer: func(resume.Outcome) { cancel() }}
	res, err := st.Open(ctx, resume.Request{URL: url, Session: "s", LastEventID: "c1"})
	if !errors.Is(err, context.Canceled) || res.Status != http.StatusServiceUnavailable {
		t.Errorf("resume: %v, %v; want context.Canceled after the 503", res.Outcome, err)
	}
}

// TestGetUnreachable: Get sends one GET; a server that cannot be reached
// is RetryLater with the network error, and nothing is retried.
func TestGetUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	resp, o, err := resume.Get(t.Context(), nil, resume.Request{URL: url, Session: "s", LastEventID: "c1"})
	if err != nil || resp != nil || o.Kind != resume.RetryLater || o.Err == nil || o.Status != 0 {
		t.Errorf("Get: %v, %v, %v; want retry-later with a network error", resp, o, err)
	}
	if _, _, err := resume.Get(t.Context(), nil, resume.Request{URL: "://bad"}); err == nil {
		t.Error("Get of an invalid URL: no error")
	}
}

// TestResumeDeadlineAfterRefusal: the server answers the first GET 503
// (to be retried) and holds the next until the deadline cuts it: the
// expired result reports the 503, the server's last answer, not
// ErrDeadline, which would read as a server that could not be reached.
// Regression: the upstream gateway's TestCutResumeRefused failed so on a
// loaded machine, its last GET cut by the deadline.
func TestResumeDeadlineAfterRefusal(t *testing.T) {
	release := make(chan struct{})
	_, url := start(t, status(http.StatusServiceUnavailable, "", ""), func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	st := &resume.Stream{Policy: resume.Policy{Base: time.Millisecond, Timeout: 300 * time.Millisecond}}
	res, err := st.Resume(t.Context(), resume.Request{URL: url, Session: "s", LastEventID: "c1"}, io.EOF)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Expired || res.Status != http.StatusServiceUnavailable || res.Err != nil {
		t.Errorf("result %v (status %d, err %v) expired=%v, want expired with the 503", res.Outcome, res.Status, res.Err, res.Expired)
	}
}
