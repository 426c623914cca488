// sessionlesswrite_test.go tests the bounds the handler puts on the
// responses of Options.Sessionless: the write deadline on a listen stream
// whose client does not read, and the end of listen streams at Drain.

package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/listentest"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/transport"
)

// sessionlessListen is the body of a 2026-07-28 subscriptions/listen for
// uri.
func sessionlessListen(id int64, uri string) []byte {
	return mcptest.SessionlessBody(id, "subscriptions/listen",
		map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{uri}}}, nil)
}

// listenServer returns the demo server with an UnsubscribeHandler that
// closes the returned channel when the first listen stream ends (the
// go-sdk unsubscribes its URIs as its listen handler returns).
func listenServer() (*mcp.Server, <-chan struct{}) {
	ended := make(chan struct{})
	var once sync.Once
	server := demo.New(demo.Options{Server: &mcp.ServerOptions{
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error {
			once.Do(func() { close(ended) })
			return nil
		},
	}})
	return server, ended
}

// dialSmallBuffer dials addr with a receive buffer of 4 KiB, set before
// the connection is made so that the window it advertises stays small.
func dialSmallBuffer(t *testing.T, ctx context.Context, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestSessionlessListenWriteTimeout: a 2026-07-28 listen stream whose
// client stops reading loses its connection once a write has waited
// Options.WriteTimeout, as Tidemark's own streams do, and the notifier
// writing to it goes on. The failing input (a tester's): a listener on a
// 4 KiB receive buffer that never read held its connection, and the
// tools/call raising the next update of its URI, for over 300 s. The cut
// is logged in one WARN line with the reason of a listener cut for its full
// queue (fanout), listener_stalled: it was logged nowhere.
func TestSessionlessListenWriteTimeout(t *testing.T) {
	ctx := testContext(t)
	const writeTimeout = 200 * time.Millisecond
	server, ended := listenServer()
	var logs testenv.LogBuffer
	logger := logs.Logger()
	st := newStackOn(t, server, &tidemark.Options{Transport: transport.Options{WriteTimeout: writeTimeout, Logger: logger}}, nil, func(c net.Conn) {
		// A small send buffer, so that a few events fill the path.
		c.(*net.TCPConn).SetWriteBuffer(4096)
	})
	uri := "demo://" + strings.Repeat("x", 8000)
	conn := dialSmallBuffer(t, ctx, st.srv.Listener.Addr().String())
	body := sessionlessListen(1, uri)
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\nContent-Length: %d\r\n\r\n%s",
		st.srv.Listener.Addr(), len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("listen: HTTP %d, want 200", resp.StatusCode)
	}
	// The subscription is in place once acknowledged.
	if err := mcptest.ReadToAcknowledged(br); err != nil {
		t.Fatal(err)
	}

	// The client reads no more; the notifications fill the buffers until
	// a write waits, and the stream must end within about writeTimeout.
	// They come one every 20 ms, so that the stream's queue (fanout) stays
	// far from full and only the write's deadline can end it.
	start := time.Now()
	raised := 0
	bound := writeTimeout + 10*time.Second
	for waiting := true; waiting; {
		done := make(chan struct{})
		go func() {
			defer close(done)
			server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}()
		select {
		case <-done:
			raised++
		case <-ended:
			waiting = false
		case <-time.After(bound - time.Since(start)):
			t.Fatalf("the listen stream of a client that does not read was still open %v after the first of %d notifications", bound, raised)
		}
		select {
		case <-ended:
			waiting = false
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Logf("the stream ended %v after the first of %d notifications raised", time.Since(start), raised)

	// The server has closed the connection: reading what is buffered ends
	// with EOF or a reset, not with the read deadline.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open after its listen stream ended: %v", err)
	}

	// The line comes once the handler has returned, after the stream's end.
	const want = `level=WARN msg="a subscriptions/listen stream took no write for the write timeout, its client having stopped reading; it is cut, and its client listens again: if many are, look at the clients' network path" write_timeout=200ms reason=listener_stalled` + "\n"
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := strings.Count(logs.String(), want); got != 1 {
		t.Errorf("%d lines saying the listen stream was cut, want 1: %q; log:\n%s", got, want, logs.String())
	}
}

// TestDrainEndsSessionlessListens: Drain ends the open 2026-07-28 listen
// streams at once, their responses ending properly, while it still waits
// for a call in flight. The failing input (a tester's): with one idle
// listener, tidemark serve exited the whole --shutdown-grace plus 5 s after
// SIGTERM, and the stream was cut mid-chunk (curl exit 18).
func TestDrainEndsSessionlessListens(t *testing.T) {
	ctx := testContext(t)
	server, ended := listenServer()
	started, let := addHold(server)
	st := newStack(t, server, nil, nil)
	t.Cleanup(let)

	resp, br, err := st.client.Listen(ctx, sessionlessListen(5, "demo://a"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	call := sessionlessCall(t, ctx, st, 3, "hold", nil, nil)
	answered := make(chan string, 1)
	go func() {
		resp, err := st.client.Do(call)
		if err != nil {
			answered <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- fmt.Sprintf("HTTP %d %s %v", resp.StatusCode, b, err)
	}()
	<-started

	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- st.h.Drain(dctx) }()
	select {
	case <-ended:
	case <-dctx.Done():
		t.Fatal("the listen stream was still open 5 s into Drain")
	}
	// The rest of the stream ends with the response, not with an error
	// (a cut chunked body reads io.ErrUnexpectedEOF).
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("the listen stream ended with %v after %q, want its end", err, rest)
	}
	// The go-sdk's listen handler answers its ended subscription with a
	// SubscriptionsListenResult, which reaches the stream when it is
	// written before the go-sdk's transport, which watches the same
	// context, releases the response: either way the stream ends there.
	if got := strings.TrimSpace(string(rest)); got != "" {
		data, ok := strings.CutPrefix(got, "event: message\ndata: ")
		msg, err := jsonrpc.DecodeMessage([]byte(data))
		res, isResp := msg.(*jsonrpc.Response)
		if !ok || err != nil || !isResp || res.ID.Raw() != int64(5) || res.Error != nil ||
			!strings.Contains(string(res.Result), `"io.modelcontextprotocol/subscriptionId":5`) {
			t.Fatalf("the listen stream's rest after Drain: %q, want nothing or the listen's result", rest)
		}
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) with a sessionless call in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	let()
	if got := <-answered; !strings.HasPrefix(got, "HTTP 200") || !strings.Contains(got, `"text":"held"`) {
		t.Fatalf("the call in flight answered %s, want 200 with its result", got)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// TestSessionlessListenKeepAlive: a quiet 2026-07-28 listen stream gets a
// keep-alive comment after Options.KeepAlive without a write, as
// Tidemark's own streams do, so that a proxy's idle timeout does not cut
// it; a notification raised after it still arrives whole.
func TestSessionlessListenKeepAlive(t *testing.T) {
	ctx := testContext(t)
	server, _ := listenServer()
	rec := &opRecorder{Recorder: metrics.Discard}
	st := newStack(t, server, &tidemark.Options{Transport: transport.Options{KeepAlive: 100 * time.Millisecond}, Metrics: rec}, nil)
	const uri = "demo://quiet"
	resp, br, err := st.client.Listen(ctx, sessionlessListen(1, uri))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	next := func(want string) {
		t.Helper()
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the listen stream for %q: %v", want, err)
			}
			if strings.Contains(line, want) {
				return
			}
		}
	}
	if n := rec.open(metrics.StreamListen); n != 1 {
		t.Errorf("%d listen streams counted open, want 1", n)
	}
	next(": keep-alive")
	// The go-sdk's client reads past the comments: it hears the update
	// raised after a few of them, once.
	heard := listentest.New()
	c := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1.0.0"}, heard.Options())
	heard.Watch(c)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: st.srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	heard.WaitFor(t, listentest.Acknowledged, 2, 10*time.Second)
	time.Sleep(350 * time.Millisecond) // three keep-alives on each of its streams
	server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
	next(`"method":"notifications/resources/updated"`)
	heard.Exactly(t, map[string]int{listentest.Key(listentest.ResourceUpdated, uri): 1}, 10*time.Second)
	// The raw listener and the client's two: each counted until it ends.
	if n := rec.open(metrics.StreamListen); n != 3 {
		t.Errorf("%d listen streams counted open, want 3", n)
	}
	resp.Body.Close()
	cs.Close()
	for deadline := time.Now().Add(10 * time.Second); rec.open(metrics.StreamListen) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d listen streams still counted open 10s after they ended", rec.open(metrics.StreamListen))
		}
	}
}

// TestSessionlessPanicStopsKeepAlive: a sessionless handler that aborts
// its answer mid-body with http.ErrAbortHandler (as httputil.ReverseProxy
// does when its upstream cuts the answer, in the HTTP upstream gateway)
// leaves no keep-alive writer behind: it stopped only when the handler
// returned, so each such answer left a goroutine ticking for ever.
func TestSessionlessPanicStopsKeepAlive(t *testing.T) {
	before := goleak.IgnoreCurrent()
	quiet := slog.New(slog.DiscardHandler)
	st := memory.New(memory.Options{})
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), answerEngine{}, session.Options{Logger: quiet})
	h := transport.New(reg, transport.Options{Logger: quiet, KeepAlive: 20 * time.Millisecond,
		Sessionless: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		})})
	srv := httptest.NewServer(h)
	req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(sessionlessEcho))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "echo")
	if resp, err := srv.Client().Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	srv.CloseClientConnections()
	srv.Close()
	reg.Close()
	st.Close()
	goleak.VerifyNone(t, before)
}
