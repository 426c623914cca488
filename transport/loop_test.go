package transport_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/via"
)

// TestLoopRefusalReadsTheBody: a POST whose Via names this process (a
// gateway's request come back round a loop) gets 508 loop_detected only
// after its body was read, on a connection kept open: the sender, another
// gateway that streams the body, reads the whole refusal. (The refusal used
// to go out at once with Connection: close, and a close with the body's
// bytes unread resets the connection: under load a gateway in the loop
// passed on a 508 without its body.)
func TestLoopRefusalReadsTheBody(t *testing.T) {
	st := newStack(t, nil, nil, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(st.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nVia: 1.1 %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\n\r\n",
		strings.TrimPrefix(st.srv.URL, "http://"), via.Pseudonym(), len(body))
	time.Sleep(50 * time.Millisecond) // the body comes later, as a proxy streams it
	io.WriteString(conn, body)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusLoopDetected || !strings.Contains(string(got), `"reason":"loop_detected"`) || resp.Close {
		t.Fatalf("refusal: HTTP %d, close %v, body %q, %v; want 508 loop_detected on a connection kept open", resp.StatusCode, resp.Close, got, err)
	}
}
