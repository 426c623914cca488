// writes_test.go tests how many write system calls a POST's answer takes,
// on a real loopback connection.

package transport_test

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/transport"
)

// answerEngine answers every call with an empty result (initialize with
// the protocol version asked for): at once inside Deliver when gate is
// nil, the answer then in the log before the POST's stream starts, or
// else from its own goroutine once gate is closed.
type answerEngine struct{ gate chan struct{} }

func (e answerEngine) Start(ctx context.Context, info engine.Info, out engine.Outbox) (engine.Session, error) {
	return &answerSession{gate: e.gate, out: out, done: make(chan struct{})}, nil
}

type answerSession struct {
	gate chan struct{}
	out  engine.Outbox
	once sync.Once
	done chan struct{}
}

func (s *answerSession) Deliver(ctx context.Context, msg jsonrpc.Message, _ engine.Request) error {
	r, ok := msg.(*jsonrpc.Request)
	if !ok || !r.IsCall() {
		return nil
	}
	result := []byte(`{}`)
	if r.Method == "initialize" {
		result = []byte(`{"capabilities":{},"protocolVersion":"2025-11-25","serverInfo":{"name":"answer","version":"1"}}`)
	}
	resp := &jsonrpc.Response{ID: r.ID, Result: result}
	if s.gate == nil || r.Method == "initialize" {
		return s.out.Send(ctx, resp, r.ID)
	}
	go func() {
		select {
		case <-s.gate:
			s.out.Send(context.Background(), resp, r.ID)
		case <-s.done:
		}
	}()
	return nil
}

func (s *answerSession) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

func (s *answerSession) Done() <-chan struct{} { return s.done }

// writeCounter counts the Write calls on every connection the server
// accepts: each is one write system call on a loopback TCP connection.
type writeCounter struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, writes: &l.writes}, nil
}

type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// serveAnswers serves eng through the transport on a loopback listener
// whose server-side writes it counts; everything ends with the test.
func serveAnswers(t *testing.T, eng engine.Engine) (*mcptest.Client, *writeCounter) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	st := memory.New(memory.Options{})
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), eng, session.Options{Logger: quiet})
	h := transport.New(reg, transport.Options{Logger: quiet})
	srv := httptest.NewUnstartedServer(h)
	wc := &writeCounter{Listener: srv.Listener}
	srv.Listener = wc
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		reg.Close()
	})
	return &mcptest.Client{URL: srv.URL, HTTP: srv.Client()}, wc
}

// TestAnswerReadyIsOneWrite: a call whose answer is in the log when its
// stream starts is answered in one write system call: the headers, the
// priming event and the answer together, with the end of the chunked
// body.
func TestAnswerReadyIsOneWrite(t *testing.T) {
	ctx := testContext(t)
	c, wc := serveAnswers(t, answerEngine{})
	s, err := c.Initialize(ctx, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(2); id < 5; id++ {
		before := wc.writes.Load()
		str, err := s.Call(ctx, mcptest.MustCall(id, "ping", nil))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := str.Collect()
		str.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || !evs[0].IsPriming() || !evs[1].IsResponseTo(mcptest.ID(id)) {
			t.Fatalf("call %d: events %v, want the priming event and the response", id, evs)
		}
		if got := wc.writes.Load() - before; got != 1 {
			t.Errorf("call %d: %d write calls on the connection, want 1", id, got)
		}
	}
}

// TestSlowAnswerPrimesFirst: a call answered later than the stream's first
// moments gets its headers and priming event first, in one write, without
// waiting for the answer, and the answer with the end of the body in a
// second.
func TestSlowAnswerPrimesFirst(t *testing.T) {
	ctx := testContext(t)
	gate := make(chan struct{})
	c, wc := serveAnswers(t, answerEngine{gate: gate})
	s, err := c.Initialize(ctx, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	before := wc.writes.Load()
	str, err := s.Call(ctx, mcptest.MustCall(2, "ping", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer str.Close()
	if e := next(t, str); !e.IsPriming() {
		t.Fatalf("first event %v, want the priming event", e)
	}
	if got := wc.writes.Load() - before; got != 1 {
		t.Errorf("%d write calls before the answer, want 1", got)
	}
	close(gate)
	evs, err := str.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || !evs[0].IsResponseTo(mcptest.ID(2)) {
		t.Fatalf("events after the priming event %v, want the response", evs)
	}
	if got := wc.writes.Load() - before; got != 2 {
		t.Errorf("%d write calls in all, want 2", got)
	}
}

// TestLargeAnswerIntact: an answer of more than 64 KiB, which the stream
// writes from the stored event instead of copying it, arrives whole as
// one event with its cursor, after the priming event, on a stream whose
// cursors a resume accepts.
func TestLargeAnswerIntact(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "2025-11-25")
	text := strings.Repeat("0123456789abcdef", 20000) // 320,000 bytes
	str, err := s.Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": text}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer str.Close()
	evs, err := str.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("stream had %d events, want 2: the priming event and the echo response", len(evs))
	}
	wantPriming(t, evs[0], "", time.Second)
	r, ok := evs[1].Response()
	if !ok {
		t.Fatalf("stream ended with %+v, want the echo response", evs[1])
	}
	if got := toolText(t, r); got != text {
		t.Fatalf("echo returned %d bytes, want %d", len(got), len(text))
	}
	if c := parseCursor(t, evs[1].ID); c.Sequence != parseCursor(t, evs[0].ID).Sequence+1 {
		t.Fatalf("response cursor %q, want the one after the priming event's %q", evs[1].ID, evs[0].ID)
	}
	res, err := s.Resume(ctx, evs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	again, err := res.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(again) == 0 || again[len(again)-1].ID != evs[1].ID || string(again[len(again)-1].Data) != string(evs[1].Data) {
		t.Fatalf("resumed after the priming event: %d events, want the same response again", len(again))
	}
}
