package fanout_test

// Tests of the Bus in one process: real go-sdk clients on real HTTP
// (loopback) listening through the go-sdk's stateless handler, and a
// stateful-era session over an in-memory connection.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/fanout"
	"github.com/tidemark-mcp/tidemark/internal/listentest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds how long a test waits for a notification.
const wait = 10 * time.Second

// The resource the test servers offer, to which listeners subscribe.
const (
	watched = "test://watched"
	other   = "test://other"
)

// replica is one test server: an *mcp.Server with a bus attached, served
// by the go-sdk's stateless handler (protocol 2026-07-28) on loopback.
type replica struct {
	server *mcp.Server
	bus    *fanout.Bus
	url    string
}

// newReplica serves a server with one tool and one subscribable resource,
// attached to bus. The sending middleware below, if any, runs under the
// Bus's: it sees each message as it is written to the stream.
func newReplica(t *testing.T, bus *fanout.Bus, below ...mcp.Middleware) *replica {
	t.Helper()
	return serve(t, bus, 0, below...)
}

// serve is newReplica whose connections' send buffers are sndbuf bytes
// (SO_SNDBUF), or the system's when sndbuf is 0.
func serve(t *testing.T, bus *fanout.Bus, sndbuf int, below ...mcp.Middleware) *replica {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "fanout-test", Version: "1.0.0"}, &mcp.ServerOptions{
		Logger:             slog.New(slog.DiscardHandler),
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	mcp.AddTool(s, &mcp.Tool{Name: "noop"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	s.AddResource(&mcp.Resource{URI: watched, Name: "watched"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: watched, Text: "x"}}}, nil
	})
	s.AddSendingMiddleware(below...)
	bus.Attach(s)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewUnstartedServer(h)
	if sndbuf > 0 {
		srv.Listener = smallWrites{srv.Listener, sndbuf}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return &replica{server: s, bus: bus, url: srv.URL}
}

// listen connects a go-sdk client (protocol 2026-07-28, its default) to r
// and opens two subscriptions/listen streams: tools list changes (at
// Connect) and resource updates of watched. It returns once the server
// acknowledged both.
func listen(t *testing.T, r *replica) *listentest.Recorder {
	t.Helper()
	rec, cs := connect(t, r)
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: watched}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	rec.WaitFor(t, listentest.Acknowledged, 2, wait)
	return rec
}

// connect connects a go-sdk client (protocol 2026-07-28, its default) to
// r, which opens one subscriptions/listen stream for tools list changes,
// and returns what the client hears and its session, closed with the
// test.
func connect(t *testing.T, r *replica) (*listentest.Recorder, *mcp.ClientSession) {
	t.Helper()
	rec := listentest.New()
	c := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1.0.0"}, rec.Options())
	rec.Watch(c)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: r.url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != "2026-07-28" {
		t.Fatalf("negotiated %s, want 2026-07-28", got)
	}
	return rec, cs
}

// legacy connects a go-sdk client at 2025-11-25 to s over an in-memory
// connection, subscribed to watched with resources/subscribe.
func legacy(t *testing.T, s *mcp.Server) *listentest.Recorder {
	t.Helper()
	rec := listentest.New()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "legacy", Version: "1.0.0"}, rec.Options()).
		Connect(t.Context(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: watched}); err != nil {
		t.Fatalf("resources/subscribe: %v", err)
	}
	return rec
}

func newBus(t *testing.T, opts fanout.Options) *fanout.Bus {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	b, err := fanout.New(t.Context(), opts)
	if err != nil {
		t.Fatalf("fanout.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestInProcess: without Redis, a raised resource update and tools list
// change reach a 2026-07-28 listener and a 2025-11-25 session once each; an
// update of a URI nobody subscribed and a list change nobody asked for
// (prompts: the server has none, so no stream acknowledged them) reach
// nobody.
func TestInProcess(t *testing.T) {
	r := newReplica(t, newBus(t, fanout.Options{}))
	modern := listen(t, r)
	old := legacy(t, r.server)
	ctx := t.Context()
	for _, n := range []fanout.Notification{
		{Method: fanout.ResourceUpdated, URI: watched},
		{Method: fanout.ResourceUpdated, URI: other},
		{Method: fanout.ToolsListChanged},
	} {
		if err := r.bus.Raise(ctx, n); err != nil {
			t.Fatalf("raise %v: %v", n, err)
		}
	}
	want := map[string]int{
		listentest.Key(listentest.ResourceUpdated, watched): 1,
		listentest.ToolsChanged:                             1,
	}
	modern.Exactly(t, want, wait)
	old.Exactly(t, want, wait)
	if err := r.bus.Raise(ctx, fanout.Notification{Method: fanout.PromptsListChanged}); err != nil {
		t.Fatal(err)
	}
	modern.Exactly(t, want, wait)
}

// TestRegisteredBeforeAcknowledgment: a stream's listener is registered
// before its acknowledgment is written, so a notification raised as soon
// as the client has the acknowledgment reaches it. The client opens one
// stream (tools list changes, at Connect).
func TestRegisteredBeforeAcknowledgment(t *testing.T) {
	b := newBus(t, fanout.Options{})
	atAck := make(chan int, 1)
	r := newReplica(t, b, func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "notifications/subscriptions/acknowledged" {
				atAck <- b.Listeners()
			}
			return next(ctx, method, req)
		}
	})
	rec, _ := connect(t, r)
	rec.WaitFor(t, listentest.Acknowledged, 1, wait)
	if got := <-atAck; got != 1 {
		t.Errorf("%d listeners as the acknowledgment was written, want 1", got)
	}
	if err := b.Raise(t.Context(), fanout.Notification{Method: fanout.ToolsListChanged}); err != nil {
		t.Fatal(err)
	}
	rec.Exactly(t, map[string]int{listentest.ToolsChanged: 1}, wait)
}

// TestListenEnds: a stream the client closed hears nothing more, and its
// client's other stream still does.
func TestListenEnds(t *testing.T) {
	r := newReplica(t, newBus(t, fanout.Options{}))
	rec, cs := connect(t, r)
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: watched}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, listentest.Acknowledged, 2, wait)
	if err := cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: watched}); err != nil {
		t.Fatal(err)
	}
	// The server learns of the closed stream asynchronously.
	deadline := time.Now().Add(wait)
	for r.bus.Listeners() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners after the client closed one of its two streams, want 1", r.bus.Listeners())
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.bus.Raise(t.Context(), fanout.Notification{Method: fanout.ResourceUpdated, URI: watched})
	r.bus.Raise(t.Context(), fanout.Notification{Method: fanout.ToolsListChanged})
	rec.Exactly(t, map[string]int{listentest.ToolsChanged: 1}, wait)
}

// TestRaiseRefuses: what a Bus does not carry, and a closed Bus.
func TestRaiseRefuses(t *testing.T) {
	b := newBus(t, fanout.Options{})
	for _, n := range []fanout.Notification{
		{Method: fanout.ResourceUpdated},
		{Method: fanout.ToolsListChanged, URI: watched},
		{Method: "notifications/message"},
	} {
		if err := b.Raise(t.Context(), n); err == nil {
			t.Errorf("raise %+v: no error", n)
		}
	}
	b.Close()
	if err := b.Raise(t.Context(), fanout.Notification{Method: fanout.ToolsListChanged}); !errors.Is(err, fanout.ErrClosed) {
		t.Errorf("raise after Close: %v, want ErrClosed", err)
	}
}
