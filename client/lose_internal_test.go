package client

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestLoseSessionTakesCallsBeforeLostCloses: the GET stream and a POST
// stream of one session are refused (404) at the same moment. The session
// must not read as lost while its call is still pending, since a stream
// that sees it lost fails its own call and the report then counts none:
// while the GET stream's report waits for the lock, s.lost stays open; the
// call is answered once, with the first report's error; and the one
// session-not-found event says Calls 1.
func TestLoseSessionTakesCallsBeforeLostCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		evMu   sync.Mutex
		events []Event
	)
	c := &conn{
		opts: Transport{OnEvent: func(e Event) {
			evMu.Lock()
			events = append(events, e)
			evMu.Unlock()
		}},
		logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		ctx:      ctx,
		cancel:   cancel,
		incoming: make(chan jsonrpc.Message, 4),
		done:     make(chan struct{}),
		closing:  make(chan struct{}),
		calls:    map[jsonrpc.ID]*call{},
	}
	s := newSession("S1")
	id, err := jsonrpc.MakeID(float64(3))
	if err != nil {
		t.Fatal(err)
	}
	cl := &call{id: id, method: "tools/call", cancel: func() {}, sess: s}
	c.calls[id] = cl

	c.mu.Lock() // the report cannot take the calls while this is held
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		c.loseSession(s, http.StatusNotFound, "session_not_found", "GET standalone", "t-1-0-3")
	}()
	select {
	case <-s.lost:
		pending := len(c.calls)
		c.mu.Unlock()
		t.Fatalf("session reads as lost with %d call(s) still pending", pending)
	case <-time.After(50 * time.Millisecond):
	}
	c.mu.Unlock()
	<-s.lost
	// What a POST stream does when it sees the session lost, or is refused
	// second: report, then fail its own call. Both must find it taken.
	c.loseSession(s, http.StatusNotFound, "session_not_found", "POST tools/call id 3", "t-1-4-7")
	c.failCall(cl, &CallError{Method: "tools/call", ID: id, Session: s.id, Cursor: "t-1-4-7", Status: http.StatusNotFound, Err: ErrSessionLost})
	<-firstDone

	msg := <-c.incoming
	resp, ok := msg.(*jsonrpc.Response)
	ce, isCE := resp.Error.(*CallError)
	if !ok || !isCE || ce.Cursor != "t-1-0-3" || ce.Status != http.StatusNotFound {
		t.Errorf("call answered with %#v, want the first report's CallError (cursor t-1-0-3, status 404)", msg)
	}
	select {
	case extra := <-c.incoming:
		t.Errorf("call answered twice; second answer %#v", extra)
	default:
	}
	evMu.Lock()
	defer evMu.Unlock()
	if len(events) != 1 || events[0].Kind != EventSessionNotFound || events[0].Calls != 1 || events[0].Stream != "GET standalone" {
		t.Errorf("events = %+v, want one session_not_found from GET standalone with Calls 1", events)
	}
}
