package probe

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/transport"
)

// lateResume passes requests to a Tidemark handler and holds back the
// resumes of one check's session: a resume of the session whose tool call
// carries progress token token reaches the handler only once that call's
// original connection has written one more message. That message is
// written before the server takes the stream over, so the resume replays
// it from its cursor: what a resume that the server processes late (a
// loaded machine) always does.
type lateResume struct {
	next  http.Handler
	token []byte // `"progressToken":"<token>"` as the call's body holds it

	mu       sync.Mutex
	session  string        // the session of the call with token
	messages int           // the messages the call's original connection wrote
	wrote    chan struct{} // closed and replaced at each of those writes
	held     int           // resumes held until a message was written
}

func newLateResume(next http.Handler, token string) *lateResume {
	return &lateResume{next: next, token: []byte(`"progressToken":"` + token + `"`), wrote: make(chan struct{})}
}

func (l *lateResume) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(wire.HeaderSession)
	switch {
	case r.Method == http.MethodPost:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, l.token) {
			l.mu.Lock()
			l.session = sid
			l.mu.Unlock()
			w = &countingWriter{ResponseWriter: w, l: l}
		}
	case r.Method == http.MethodGet && r.Header.Get(wire.HeaderLastEventID) != "":
		l.hold(sid)
	}
	l.next.ServeHTTP(w, r)
}

// hold returns once the call's original connection has written a message
// after hold was called, if sid is the call's session; at most 10 seconds.
func (l *lateResume) hold(sid string) {
	l.mu.Lock()
	if sid == "" || sid != l.session {
		l.mu.Unlock()
		return
	}
	wrote := l.wrote
	l.mu.Unlock()
	select {
	case <-wrote:
		l.mu.Lock()
		l.held++
		l.mu.Unlock()
	case <-time.After(10 * time.Second):
	}
}

// countingWriter tells lateResume of each message its response writes.
type countingWriter struct {
	http.ResponseWriter
	l *lateResume
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	if bytes.Contains(b, []byte("\ndata: {")) {
		c.l.mu.Lock()
		c.l.messages++
		close(c.l.wrote)
		c.l.wrote = make(chan struct{})
		c.l.mu.Unlock()
	}
	return n, err
}

// Unwrap gives http.ResponseController the response's flush and deadlines.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// TestLateResumeReplayIsNoDuplicate: resumes that reach the server after
// the original connection delivered one more message get that message
// replayed from their cursor, as the client asked; the message was on the
// original before the takeover, so the takeover and concurrent-resume
// checks pass, each resume held once.
func TestLateResumeReplayIsNoDuplicate(t *testing.T) {
	cases := []struct {
		check, token string
		held         int
		statuses     []int
	}{
		{"takeover", "probe-takeover", 1, []int{200, 200}},
		{"concurrent-resume", "probe-concurrent", 2, []int{200, 200, 200}},
	}
	for _, c := range cases {
		t.Run(c.check, func(t *testing.T) {
			late, url := startLateResume(t, c.token)
			rep, err := Run(t.Context(), Config{URL: url, RetentionEvents: retention, Storm: 8})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			late.mu.Lock()
			held := late.held
			late.mu.Unlock()
			if held != c.held {
				t.Fatalf("%d resumes were held until the original wrote a message, want %d", held, c.held)
			}
			var r Result
			for _, res := range rep.Results {
				if res.ID == c.check {
					r = res
				}
			}
			if r.Verdict != Pass || !slices.Equal(r.Statuses, c.statuses) {
				t.Errorf("%s = %s %v: %s; want PASS %v", c.check, r.Verdict, r.Statuses, r.Observed, c.statuses)
			}
			if !strings.Contains(r.Observed, "replayed") {
				t.Errorf("%s observed %q; want the resume to replay what the original delivered", c.check, r.Observed)
			}
		})
	}
}

// startLateResume serves the demo tools with Tidemark behind a lateResume
// for the call with progress token token.
func startLateResume(t *testing.T, token string) (*lateResume, string) {
	t.Helper()
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Retention: eventlog.Options{MaxEvents: retention},
		Transport: transport.Options{Logger: slog.New(slog.DiscardHandler)},
	})
	late := newLateResume(h, token)
	srv := httptest.NewServer(late)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	})
	return late, srv.URL
}

// TestReplayed: the messages a connection delivered are a replay of the
// winner's only when they are the winner's first messages, by event ID,
// and the winner delivered more (the takeover point).
func TestReplayed(t *testing.T) {
	msg := func(ids ...string) []event {
		var evs []event
		for _, id := range ids {
			evs = append(evs, event{id: id, hasID: id != "", data: []byte("{}"), msg: &jsonrpc.Request{Method: "notifications/progress"}})
		}
		return evs
	}
	priming := event{id: "p", hasID: true}
	cases := []struct {
		name          string
		loser, winner []event
		want          bool
	}{
		{"nothing delivered", nil, msg("5", "6"), true},
		{"one before the takeover", msg("5"), append([]event{priming}, msg("5", "6", "7")...), true},
		{"two before the takeover", msg("5", "6"), msg("5", "6", "7"), true},
		{"one after the takeover point", msg("5", "6", "7"), msg("5", "6", "7"), false},
		{"more than the winner", msg("5", "6", "7", "8"), msg("5", "6", "7"), false},
		{"not the winner's first", msg("6"), msg("5", "6", "7"), false},
		{"a message the winner lacks", msg("5", "9"), msg("5", "6", "7"), false},
		{"a message without an ID", msg(""), msg("", "6"), false},
	}
	for _, c := range cases {
		if got := replayed(c.loser, c.winner); got != c.want {
			t.Errorf("%s: replayed = %v, want %v", c.name, got, c.want)
		}
	}
}
