// sessionlesswrite_test.go tests the bounds the handler puts on the
// responses of Options.Sessionless: the write deadline on a listen stream
// whose client does not read, and the end of listen streams at Drain.

package transport_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/transport"
)

// sessionlessListen is a subscriptions/listen of 2026-07-28 for uri.
func sessionlessListen(id int, uri string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":[%q]},`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},`+
		`"io.modelcontextprotocol/clientCapabilities":{}}}}`, id, uri)
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
// tools/call raising the next update of its URI, for over 300 s.
func TestSessionlessListenWriteTimeout(t *testing.T) {
	ctx := testContext(t)
	const writeTimeout = 200 * time.Millisecond
	server, ended := listenServer()
	st := newStackOn(t, server, &tidemark.Options{Transport: transport.Options{WriteTimeout: writeTimeout}}, nil, func(c net.Conn) {
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
	// Read up to the acknowledgment: the subscription is in place.
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the acknowledgment: %v", err)
		}
		if strings.Contains(line, "notifications/subscriptions/acknowledged") {
			break
		}
	}

	// The client reads no more; the notifications fill the buffers until
	// a write waits, and the stream must end within about writeTimeout.
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
		default:
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
}
