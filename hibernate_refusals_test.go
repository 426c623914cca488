package tidemark_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

// wakeCounter is a metrics.Recorder that counts the sessions woken
// (metrics.Sessions.SessionWoke) and records nothing else.
type wakeCounter struct {
	metrics.Recorder
	woke atomic.Int64
}

func (c *wakeCounter) SessionWoke(bool) { c.woke.Add(1) }

// TestHibernationRefusalsWakeNothing: a request refused for what it
// carries (its body, its ids, its MCP-Protocol-Version, its size, its
// cursor) is refused by a hibernated session with the status and body the
// live session gives, byte for byte, and wakes nothing: no session starts,
// none is woken, both stay hibernated. A valid resume then wakes the
// session and replays exactly the events after its cursor.
func TestHibernationRefusalsWakeNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const maxBody = 4096
	rec := &wakeCounter{Recorder: metrics.Discard}
	h, c := serveHibernating(t, &tidemark.Options{
		Restorable: true,
		// Long enough that no session hibernates while the live answers
		// are taken (checked below), short enough for the test.
		Sessions:      session.Options{HibernateAfter: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
		SweepInterval: 10 * time.Millisecond,
		Transport:     transport.Options{MaxBodyBytes: maxBody},
		Metrics:       rec,
	})
	s, cursor, answer := callHoldingCursor(t, ctx, c) // 2025-11-25: no batches
	old, err := c.Initialize(ctx, "2025-03-26")       // batches allowed
	if err != nil {
		t.Fatal(err)
	}
	ping := `{"jsonrpc":"2.0","id":5,"method":"ping"}`
	big := `{"jsonrpc":"2.0","id":5,"method":"ping","params":{"pad":"` + strings.Repeat("x", maxBody) + `"}}`
	type request struct {
		name    string
		s       *mcptest.Session
		method  string
		body    string
		header  map[string]string
		chunked bool // sent without Content-Length
		status  int
		reason  replay.Reason
	}
	requests := []request{
		{name: "batch", s: s, method: http.MethodPost, body: "[" + ping + "]",
			status: http.StatusBadRequest, reason: replay.ReasonBatchNotAllowed},
		{name: "id twice in a batch", s: old, method: http.MethodPost, body: "[" + ping + "," + ping + "]",
			status: http.StatusBadRequest, reason: replay.ReasonDuplicateRequestID},
		{name: "null id", s: s, method: http.MethodPost, body: `{"jsonrpc":"2.0","id":null,"method":"ping"}`,
			status: http.StatusBadRequest, reason: replay.ReasonInvalidRequest},
		{name: "level MCP does not name", s: s, method: http.MethodPost,
			body:   `{"jsonrpc":"2.0","id":6,"method":"logging/setLevel","params":{"level":"loud"}}`,
			status: http.StatusBadRequest, reason: replay.ReasonInvalidParams},
		{name: "POST of another version", s: s, method: http.MethodPost, body: ping,
			header: map[string]string{wire.HeaderProtocolVersion: "2025-06-18"},
			status: http.StatusBadRequest, reason: replay.ReasonProtocolVersion},
		{name: "GET of another version", s: s, method: http.MethodGet,
			header: map[string]string{wire.HeaderProtocolVersion: "2025-06-18"},
			status: http.StatusBadRequest, reason: replay.ReasonProtocolVersion},
		{name: "resume of another version", s: s, method: http.MethodGet,
			header: map[string]string{wire.HeaderProtocolVersion: "2025-06-18", wire.HeaderLastEventID: cursor},
			status: http.StatusBadRequest, reason: replay.ReasonProtocolVersion},
		{name: "garbage cursor of another version", s: s, method: http.MethodGet,
			header: map[string]string{wire.HeaderProtocolVersion: "2025-06-18", wire.HeaderLastEventID: "garbage"},
			status: http.StatusBadRequest, reason: replay.ReasonProtocolVersion},
		{name: "garbage cursor", s: s, method: http.MethodGet,
			header: map[string]string{wire.HeaderLastEventID: "garbage"},
			status: http.StatusBadRequest, reason: replay.ReasonCursorMalformed},
		{name: "body over the limit", s: s, method: http.MethodPost, body: big,
			status: http.StatusRequestEntityTooLarge, reason: replay.ReasonBodyTooLarge},
		{name: "chunked body over the limit", s: s, method: http.MethodPost, body: big, chunked: true,
			status: http.StatusRequestEntityTooLarge, reason: replay.ReasonBodyTooLarge},
	}
	send := func(q request) (int, []byte) {
		t.Helper()
		var body []byte
		if q.body != "" {
			body = []byte(q.body)
		}
		req, err := q.s.NewRequest(ctx, q.method, body)
		if err != nil {
			t.Fatal(err)
		}
		if q.chunked {
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = -1
		}
		for k, v := range q.header {
			req.Header.Set(k, v)
		}
		resp, err := q.s.Client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	live := make([][]byte, len(requests))
	for i, q := range requests {
		status, body := send(q)
		se := mcptest.StatusError{Status: status}
		if eb, err := mcptest.ParseError(body); err == nil {
			se.Body = eb
		}
		if status != q.status || se.Reason() != string(q.reason) {
			t.Fatalf("live: %s = %d %s, want %d %s", q.name, status, body, q.status, q.reason)
		}
		live[i] = body
	}
	if n, hib, woke := h.Registry().Len(), h.Registry().Hibernated(), rec.woke.Load(); n != 2 || hib != 0 || woke != 0 {
		t.Fatalf("after the live answers: %d sessions live, %d hibernated, %d woken; want 2, 0, 0", n, hib, woke)
	}

	awaitHibernated(t, h, 2)
	for i, q := range requests {
		status, body := send(q)
		if status != q.status || !bytes.Equal(body, live[i]) {
			t.Errorf("hibernated: %s = %d %s, want what the live session answered: %d %s", q.name, status, body, q.status, live[i])
		}
		if n, hib, woke := h.Registry().Len(), h.Registry().Hibernated(), rec.woke.Load(); n != 0 || hib != 2 || woke != 0 {
			t.Fatalf("after %s: %d sessions live, %d hibernated, %d woken; want 0, 2, 0 (nothing woken)", q.name, n, hib, woke)
		}
	}

	st, err := s.Resume(ctx, cursor)
	if err != nil {
		t.Fatalf("resume with %s after the refusals: %v", cursor, err)
	}
	evs, err := st.Collect()
	st.Close()
	if err != nil || len(evs) != 2 || !evs[0].ResumesFrom(cursor) || evs[1].ID != answer.ID || string(evs[1].Data) != string(answer.Data) {
		t.Fatalf("resumed stream: %v, %v; want a priming event resuming from %s, then the answer %s: %s", evs, err, cursor, answer.ID, answer.Data)
	}
	if n, hib, woke := h.Registry().Len(), h.Registry().Hibernated(), rec.woke.Load(); n != 1 || hib != 1 || woke != 1 {
		t.Fatalf("after the resume: %d sessions live, %d hibernated, %d woken; want 1, 1, 1", n, hib, woke)
	}
}
