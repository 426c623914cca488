package fanout_test

// Tests of a subscriptions/listen client that stops reading: a raw TCP
// connection whose receive buffer is small and which, once it has sent its
// listen request, never reads.

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/fanout"
	"github.com/tidemark-mcp/tidemark/internal/listentest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// Sizes of the stall tests. A stalled stream holds its queue, the
// notification being written and what the socket buffers take (the
// server's SO_SNDBUF of stallSndbuf, the client's SO_RCVBUF of
// stallRcvbuf, each doubled by Linux, and net/http's 4 KiB write buffer:
// about 20 updates of a stallURI); stallRaises is well above the sum.
// Raises go in batches of stallBatch, each heard by the healthy listeners
// before the next is raised, so that a listener that reads never has more
// than stallBatch notifications queued, however slow the machine.
const (
	stallSndbuf = 16 << 10
	stallRcvbuf = 4 << 10
	stallBatch  = 256
	stallRaises = 5 * stallBatch
)

// stallURI is a resource URI of about 2 KiB, so that few updates fill the
// socket buffers of a stream that does not read.
var stallURI = "test://" + strings.Repeat("x", 2<<10)

// smallWrites is a listener whose TCP connections have a send buffer of
// size bytes (SO_SNDBUF).
type smallWrites struct {
	net.Listener
	size int
}

func (l smallWrites) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(l.size)
	}
	return c, err
}

// listenTo connects a go-sdk client to r with two streams, tools list
// changes and updates of uri, and returns what it hears once the server
// acknowledged both.
func listenTo(t *testing.T, r *replica, uri string) *listentest.Recorder {
	t.Helper()
	rec, cs := connect(t, r)
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	rec.WaitFor(t, listentest.Acknowledged, 2, wait)
	return rec
}

// stall opens on r a subscriptions/listen stream for updates of uri from a
// raw TCP connection with a receive buffer of stallRcvbuf bytes, which
// never reads; the connection is closed with the test.
func stall(t *testing.T, r *replica, uri string) {
	t.Helper()
	u, err := url.Parse(r.url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.(*net.TCPConn).SetReadBuffer(stallRcvbuf); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": "stalled", "method": "subscriptions/listen",
		"params": map[string]any{
			"_meta": map[string]any{
				"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
				"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "stalled", "version": "1.0.0"},
				"io.modelcontextprotocol/clientCapabilities": map[string]any{},
			},
			"notifications": map[string]any{"resourceSubscriptions": []string{uri}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := fmt.Sprintf("POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"+
		"Mcp-Method: subscriptions/listen\r\nContent-Length: %d\r\n\r\n", u.Host, len(body))
	if _, err := c.Write(append([]byte(req), body...)); err != nil {
		t.Fatal(err)
	}
}

// waitListeners waits up to wait until b has n listeners.
func waitListeners(t *testing.T, b *fanout.Bus, n int, why string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for b.Listeners() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners %s, want %d", b.Listeners(), why, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// raiseAll raises stallRaises updates of stallURI on b in batches of
// stallBatch, each heard by every healthy recorder before the next, and
// fails the test when a batch does not return within wait.
func raiseAll(t *testing.T, b *fanout.Bus, healthy ...*listentest.Recorder) {
	t.Helper()
	key := listentest.Key(listentest.ResourceUpdated, stallURI)
	for done := 0; done < stallRaises; done += stallBatch {
		errs := make(chan error, 1)
		go func() {
			for range stallBatch {
				if err := b.Raise(t.Context(), fanout.Notification{Method: fanout.ResourceUpdated, URI: stallURI}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("raise: %v", err)
			}
		case <-time.After(wait):
			var heard []int
			for _, rec := range healthy {
				heard = append(heard, rec.Count(key))
			}
			t.Fatalf("raises %d … %d did not return within %v; the healthy listeners heard %v updates", done+1, done+stallBatch, wait, heard)
		}
		for _, rec := range healthy {
			rec.WaitFor(t, key, done+stallBatch, wait)
		}
	}
	for _, rec := range healthy {
		rec.Exactly(t, map[string]int{key: stallRaises}, wait)
	}
}

// cutLine is the line a Bus logs when it cuts a stream that does not read.
const cutLine = `level=WARN msg="a subscriptions/listen stream is not reading its notifications as fast as they come; it is cut, and its client listens again" method=notifications/resources/updated queued=1024 reason=listener_stalled`

// TestStalledListener: one process; a listener that never reads does not
// hold up Raise nor a healthy listener of the same URI, which hears every
// update once; the stalled stream is cut once its queue is full, with one
// log line.
func TestStalledListener(t *testing.T) {
	var logs testenv.LogBuffer
	b := newBus(t, fanout.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	r := serve(t, b, stallSndbuf)
	healthy := listenTo(t, r, stallURI)
	stall(t, r, stallURI)
	waitListeners(t, b, 3, "after the stalled stream was opened")
	raiseAll(t, b, healthy)
	waitListeners(t, b, 2, "after the raises")
	if got := strings.Count(logs.String(), cutLine); got != 1 {
		t.Errorf("%d lines saying the stalled stream was cut, want 1; log:\n%s", got, logs.String())
	}
}

// TestStalledListenerFleet: a listener that never reads on B does not hold
// up B's reader of the fleet's stream: healthy listeners on A and on B hear
// every update raised on A once, and the stalled stream is cut.
func TestStalledListenerFleet(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var logs testenv.LogBuffer
	var rs []*replica
	for range 2 {
		opts := fanout.Options{Redis: client(t, srv), Block: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		rs = append(rs, serve(t, newBus(t, opts), stallSndbuf))
	}
	onA, onB := listenTo(t, rs[0], stallURI), listenTo(t, rs[1], stallURI)
	stall(t, rs[1], stallURI)
	waitListeners(t, rs[1].bus, 3, "on B after the stalled stream was opened")
	raiseAll(t, rs[0].bus, onA, onB)
	waitListeners(t, rs[1].bus, 2, "on B after the raises")
	if got := strings.Count(logs.String(), cutLine); got != 1 {
		t.Errorf("%d lines saying the stalled stream was cut, want 1; log:\n%s", got, logs.String())
	}
}
