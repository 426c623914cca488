package gosdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait for an outbound message in these tests.
const wait = 10 * time.Second

const (
	token      = "TESTTOKENABCDEFGHIJKLMNOPQ"
	initParams = `{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"unit-client","version":"1"}}`
)

// testServer is an *mcp.Server with the tools the tests call, and a record
// of the resource subscriptions its handler accepted.
type testServer struct {
	*mcp.Server
	release chan struct{} // closing it lets the hold tool finish

	mu         sync.Mutex
	subscribed []string
}

// newServer returns a server whose tools are work (a progress notification
// when the call carries a token, log messages at debug, info and warning,
// then the text "done"), hold (waits for release or its context, then logs
// "held" at warning) and ask (elicits an answer, then returns it). With
// subscriptions, its resources can be subscribed.
func newServer(subscriptions bool) *testServer {
	ts := &testServer{release: make(chan struct{})}
	opts := &mcp.ServerOptions{}
	if subscriptions {
		opts.SubscribeHandler = func(_ context.Context, req *mcp.SubscribeRequest) error {
			ts.mu.Lock()
			ts.subscribed = append(ts.subscribed, req.Params.URI)
			ts.mu.Unlock()
			return nil
		}
		opts.UnsubscribeHandler = func(context.Context, *mcp.UnsubscribeRequest) error { return nil }
	}
	ts.Server = mcp.NewServer(&mcp.Implementation{Name: "unit-server", Version: "1"}, opts)
	type none struct{}
	mcp.AddTool(ts.Server, &mcp.Tool{Name: "work"}, func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 1})
		}
		for _, level := range []mcp.LoggingLevel{"debug", "info", "warning"} {
			req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: level, Data: "at " + string(level)})
		}
		return text("done"), nil, nil
	})
	mcp.AddTool(ts.Server, &mcp.Tool{Name: "hold"}, func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		select {
		case <-ts.release:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Data: "held"})
		return text("released"), nil, nil
	})
	mcp.AddTool(ts.Server, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "colour?"})
		if err != nil {
			return nil, nil, err
		}
		return text(fmt.Sprintf("%s: %v", res.Action, res.Content["answer"])), nil, nil
	})
	return ts
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func (ts *testServer) subscriptions() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Clone(ts.subscribed)
}

// outbox records what the engine sends, each message as "RELATED JSON",
// RELATED being the related request's ID or "none".
type outbox struct{ ch chan string }

func (o *outbox) Send(_ context.Context, msg jsonrpc.Message, related jsonrpc.ID) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	tag := "none"
	if related.IsValid() {
		tag = fmt.Sprint(related.Raw())
	}
	o.ch <- tag + " " + string(data)
	return nil
}

// expect checks that the next messages sent are want, in order.
func (o *outbox) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-o.ch:
			if got != w {
				t.Fatalf("sent\n%s\nwant\n%s", got, w)
			}
		case <-time.After(wait):
			t.Fatalf("nothing sent within %v, want\n%s", wait, w)
		}
	}
}

// none checks that nothing more is sent within a short while.
func (o *outbox) none(t *testing.T) {
	t.Helper()
	select {
	case got := <-o.ch:
		t.Fatalf("unexpected message %s", got)
	case <-time.After(100 * time.Millisecond):
	}
}

// start begins generation gen of the test session from st (nil: fresh).
func start(t *testing.T, e *gosdk.Engine, gen uint64, st *engine.State) (engine.Session, *outbox) {
	t.Helper()
	out := &outbox{ch: make(chan string, 64)}
	s, err := e.Start(t.Context(), engine.Info{Token: token, Generation: gen, State: st}, out)
	if err != nil {
		t.Fatalf("Start gen %d: %v", gen, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, out
}

// deliver hands the JSON-RPC message raw to s.
func deliver(t *testing.T, s engine.Session, raw string) {
	t.Helper()
	msg, err := jsonrpc.DecodeMessage([]byte(raw))
	if err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	if err := s.Deliver(t.Context(), msg, engine.Request{}); err != nil {
		t.Fatalf("deliver %s: %v", raw, err)
	}
}

// TestFreshSession drives a session from initialize on: every outbound
// message is tagged with the request it belongs to (a response with its
// own ID, a handler's progress, log messages and elicitation with the
// call that ran the handler), also while two calls are in flight.
func TestFreshSession(t *testing.T) {
	ts := newServer(false)
	e := gosdk.New(ts.Server)
	s, out := start(t, e, 1, nil)

	deliver(t, s, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":`+initParams+`}`)
	out.expect(t, `1 {"jsonrpc":"2.0","id":1,"result":{"capabilities":{"logging":{},"tools":{"listChanged":true}},`+
		`"protocolVersion":"2025-11-25","serverInfo":{"name":"unit-server","version":"1"}}}`)
	deliver(t, s, `{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	deliver(t, s, `{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}`)
	out.expect(t, `2 {"jsonrpc":"2.0","id":2,"result":{}}`)

	// Call 3 waits in its handler while call 4 runs to its end.
	deliver(t, s, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"hold","arguments":{}}}`)
	deliver(t, s, `{"jsonrpc":"2.0","id":"four","method":"tools/call","params":{"_meta":{"progressToken":"p4"},"name":"work","arguments":{}}}`)
	out.expect(t,
		`four {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p4","progress":1,"total":1}}`,
		`four {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"at info","level":"info"}}`,
		`four {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"at warning","level":"warning"}}`,
		`four {"jsonrpc":"2.0","id":"four","result":{"content":[{"type":"text","text":"done"}]}}`)
	close(ts.release)
	out.expect(t,
		`3 {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"held","level":"warning"}}`,
		`3 {"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"released"}]}}`)

	// A server-to-client request is tagged with its call, and the client's
	// answer reaches the handler.
	deliver(t, s, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ask","arguments":{}}}`)
	out.expect(t, `5 {"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"mode":"form","message":"colour?"}}`)
	deliver(t, s, `{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"answer":"green"}}}`)
	out.expect(t, `5 {"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"accept: green"}]}}`)
	out.none(t)
}

// restored is the state of a session re-created at generation 2.
var restored = &engine.State{
	ProtocolVersion:  "2025-11-25",
	InitializeParams: json.RawMessage(initParams),
	Initialized:      true,
	LogLevel:         "warning",
	Subscriptions:    []string{"test://watched"},
}

// TestRecreatedSession starts a session from a saved State: it answers a
// tool call with no new initialize, keeps its log level (messages below
// warning are not sent) and its resource subscription (an update of the
// subscribed URI reaches it, one of another URI does not), and the
// subscription it replayed to the server is answered inside the engine.
func TestRecreatedSession(t *testing.T) {
	ts := newServer(true)
	e := gosdk.New(ts.Server)
	s, out := start(t, e, 2, restored)
	if got, want := ts.subscriptions(), []string{"test://watched"}; !slices.Equal(got, want) {
		t.Fatalf("the server's subscribe handler saw %q, want %q", got, want)
	}

	deliver(t, s, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"work","arguments":{}}}`)
	out.expect(t,
		`7 {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"at warning","level":"warning"}}`,
		`7 {"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"done"}]}}`)

	if err := ts.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: "test://other"}); err != nil {
		t.Fatal(err)
	}
	if err := ts.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: "test://watched"}); err != nil {
		t.Fatal(err)
	}
	out.expect(t, `none {"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"test://watched"}}`)
	out.none(t)
}

// TestRecreateRefused checks that Start fails, naming the replayed message,
// when the server refuses a subscription the state holds.
func TestRecreateRefused(t *testing.T) {
	e := gosdk.New(newServer(false).Server)
	s, err := e.Start(t.Context(), engine.Info{Token: token, Generation: 3, State: restored}, &outbox{ch: make(chan string, 64)})
	want := `gosdk: restore session TESTTOKE… gen 3: resources/subscribe {"uri":"test://watched"}: `
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Start = %v, %v; want an error starting %q", s, err, want)
	}
}

// TestClose checks that Close ends the session, even with a handler in
// flight that waits on its context: it returns, Done is closed, and a
// second Close does nothing.
func TestClose(t *testing.T) {
	e := gosdk.New(newServer(true).Server)
	s, out := start(t, e, 2, restored)
	deliver(t, s, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hold","arguments":{}}}`)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatalf("Close did not return within %v with a handler in flight", wait)
	}
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatalf("Done not closed within %v of Close", wait)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	out.none(t)
}

// TestDeliverAfterClose checks that a session that has ended takes no
// message: every Deliver after Close answers engine.ErrClosed, however
// much room the session's inbound queue has left.
func TestDeliverAfterClose(t *testing.T) {
	e := gosdk.New(newServer(true).Server)
	s, _ := start(t, e, 2, restored)
	s.Close()
	for i := range 10 {
		msg, _ := jsonrpc.DecodeMessage(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i+1))
		if err := s.Deliver(t.Context(), msg, engine.Request{}); !errors.Is(err, engine.ErrClosed) {
			t.Fatalf("Deliver %d after Close = %v, want engine.ErrClosed", i+1, err)
		}
	}
}
