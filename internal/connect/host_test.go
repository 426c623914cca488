package connect_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestMalformedHostLines: each line from the host that is not a JSON-RPC
// 2.0 message gets its error answer (-32700 for what is not JSON, -32600
// otherwise, with the line's id when it has a valid one, else null), and
// the bridge reads on: the host's initialize after them is answered, and
// Run returns nil when the host closes its end.
func TestMalformedHostLines(t *testing.T) {
	srv := serve(t, demo.NewServer(), nil)
	toBridge, hostOut := io.Pipe()
	fromBridge, bridgeOut := io.Pipe()
	conn, err := (&connect.HostTransport{Reader: toBridge, Writer: bridgeOut, Logger: slog.New(slog.DiscardHandler)}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- connect.Run(context.Background(), conn, connect.Options{URL: srv.URL, Protocol: connect.ProtocolStateful, Logger: slog.New(slog.DiscardHandler)})
		conn.Close()
	}()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(fromBridge)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the bridge closed its output")
			}
			return l
		case <-time.After(hostTimeout):
			t.Fatalf("no line from the bridge within %v", hostTimeout)
			return ""
		}
	}
	for _, c := range []struct{ in, want string }{
		{`garbage`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the line is not JSON"}}`},
		{`[1,2]`, `[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: not a JSON-RPC 2.0 request, notification or response"}},{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: not a JSON-RPC 2.0 request, notification or response"}}]`},
		{` [ ]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: an empty batch (JSON-RPC 2.0, section 6)"}}`},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: the id of a request must be a string or a number, not null (MCP 2025-11-25, \"Base Protocol\")"}}`},
		{`{"jsonrpc":"1.0","id":2.5,"method":"ping"}`, `{"jsonrpc":"2.0","id":2.5,"error":{"code":-32600,"message":"invalid request: not a JSON-RPC 2.0 request, notification or response"}}`},
		{`{"jsonrpc":"1.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: not a JSON-RPC 2.0 request, notification or response"}}`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: not a JSON-RPC 2.0 request, notification or response"}}`},
		{`{"jsonrpc":"2.0","id":"x","method":` + strings.Repeat(" ", connect.MaxHostLine) + `"ping"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: a message longer than 16777216 bytes"}}`},
		{`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`, `{"jsonrpc":"2.0","id":"init","result":`},
	} {
		if _, err := io.WriteString(hostOut, c.in+"\n"); err != nil {
			t.Fatal(err)
		}
		if got := next(); !strings.HasPrefix(got, c.want) || (!strings.HasSuffix(c.want, ":") && got != c.want) {
			t.Errorf("line %.60q: answer %s, want %s", c.in, got, c.want)
		}
	}
	hostOut.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil when the host closes its end", err)
		}
	case <-time.After(hostTimeout):
		t.Fatal("Run still runs after the host closed its end")
	}
	bridgeOut.Close()
	for range lines {
	}
}

// TestCallBeforeInitialize: a host's call before its initialize is
// answered by the bridge with -32600 and reason session_required, and
// never reaches the server; the initialize after it is answered.
func TestCallBeforeInitialize(t *testing.T) {
	var calls atomic.Int32
	srv := serve(t, demo.NewServer(), func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && callMethod(r) == "tools/list" {
				calls.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	h := startBridge(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful})
	h.send(`{"jsonrpc":"2.0","id":"early","method":"tools/list"}`)
	r, _ := h.answer("early")
	var we *jsonrpc.Error
	if !errors.As(r.Error, &we) || we.Code != jsonrpc.CodeInvalidRequest || string(we.Data) != `{"reason":"session_required"}` || !strings.HasPrefix(we.Message, "send initialize first: ") {
		t.Errorf("answer to a call before initialize: %v (%s), want -32600 send initialize first, reason session_required", r.Error, r.Result)
	}
	h.initialize(`{}`)
	h.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
	if r, _ := h.answer("list"); r.Error != nil {
		t.Errorf("tools/list after initialize: %v", r.Error)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the server got %d tools/list POSTs, want 1 (the one after initialize)", n)
	}
}

// TestCallBeforeInitializeLogsHostID: the WARN line of a call before
// the host's initialize names the call by its id as the host wrote it
// (host_id, as the line of a duplicate id does), not by the number the
// bridge gave it.
func TestCallBeforeInitializeLogsHostID(t *testing.T) {
	srv := serve(t, demo.NewServer(), nil)
	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful}, logger)
	host.send(`{"jsonrpc":"2.0","id":42,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":"abc","method":"tools/list"}`)
	host.answers(`"abc"`)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, "call before the host's initialize") {
			got = append(got, l[strings.Index(l, "level="):])
		}
	}
	want := []string{
		`level=WARN msg="connect: call before the host's initialize; answered with an error" method=tools/list host_id=42 reason=session_required`,
		`level=WARN msg="connect: call before the host's initialize; answered with an error" method=tools/list host_id="\"abc\"" reason=session_required`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("the WARN lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNotificationBeforeInitialize: the host's notifications before its
// initialize are dropped, never sent (there is no session for them, and
// the server would refuse them 400 session_required); a WARN line names
// each. The initialize and the notifications after it reach the server.
func TestNotificationBeforeInitialize(t *testing.T) {
	var mu sync.Mutex
	var posts []string
	srv := serve(t, demo.NewServer(), func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				m := callMethod(r)
				mu.Lock()
				posts = append(posts, m)
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful}, logger)
	host.send(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		rawInitialize)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, echoLine(`"after"`))
	host.answers(`"after"`)
	mu.Lock()
	got := slices.Clone(posts)
	mu.Unlock()
	if want := []string{"initialize", "notifications/initialized", "tools/call"}; !slices.Equal(got, want) {
		t.Errorf("POSTs the server got: %q, want %q", got, want)
	}
	out := logs.String()
	for _, m := range []string{"notifications/roots/list_changed", "notifications/initialized"} {
		if !strings.Contains(out, `level=WARN msg="connect: notification before the host's initialize; dropped: send initialize first" method=`+m+"\n") {
			t.Errorf("no WARN line for %s in the log:\n%s", m, out)
		}
	}
	if strings.Contains(out, "not delivered") {
		t.Errorf("the log tells of a message not delivered:\n%s", out)
	}
}

// TestPingBeforeInitialize: in both eras, a host's ping before its
// initialize is answered by the bridge with an empty result under the
// host's id, and never sent (there is no session yet; MCP 2025-11-25,
// "Ping": either side may ping at any time); the initialize after it is
// answered.
func TestPingBeforeInitialize(t *testing.T) {
	for protocol, posts := range map[string]string{connect.ProtocolStateful: "initialize", connect.ProtocolSessionless: "server/discover"} {
		t.Run(protocol, func(t *testing.T) {
			rc := &recording{}
			h := newHandler()
			rc.h.Store(h)
			srv := serveClosing(t, rc, h)
			host := startRawHost(t, srv.URL, connect.Options{Protocol: protocol}, nil)
			host.send(`{"jsonrpc":"2.0","id":"early","method":"ping"}`)
			if m := host.next(); m.text != `{"jsonrpc":"2.0","id":"early","result":{}}` {
				t.Errorf("answer to a ping before initialize: %s, want {\"jsonrpc\":\"2.0\",\"id\":\"early\",\"result\":{}}", m.text)
			}
			host.send(rawInitialize)
			if _, got := host.answers("6"); got["6"][0].Error != nil {
				t.Errorf("initialize after the ping: %s", got["6"][0].text)
			}
			if got := strings.Join(rc.reset(), " "); got != posts {
				t.Errorf("POSTs the server got: %s, want %s", got, posts)
			}
		})
	}
}

// TestMessageWithOnlyID: a line that holds an id and neither method nor
// result nor error is no JSON-RPC 2.0 message (section 4 and 5): it gets
// -32600 under its id, and nothing reaches the server; the call after it
// is answered.
func TestMessageWithOnlyID(t *testing.T) {
	rc := &recording{}
	h := newHandler()
	rc.h.Store(h)
	srv := serveClosing(t, rc, h)
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful}, nil)
	host.send(rawInitialize)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	host.send(`{"jsonrpc":"2.0","id":77}`)
	if m := host.next(); m.text != `{"jsonrpc":"2.0","id":77,"error":{"code":-32600,"message":"invalid request: not a JSON-RPC 2.0 request, notification or response"}}` {
		t.Errorf("answer to {\"jsonrpc\":\"2.0\",\"id\":77}: %s, want -32600 under id 77", m.text)
	}
	host.send(echoLine(`"after"`))
	if _, got := host.answers(`"after"`); got[`"after"`][0].Error != nil {
		t.Errorf("the call after: %s", got[`"after"`][0].text)
	}
	if got, want := strings.Join(rc.reset(), " "), "initialize notifications/initialized tools/call"; got != want {
		t.Errorf("POSTs the server got: %s, want %s", got, want)
	}
}

// TestOversizedHostLine: a line from the host of 17 MiB, over
// connect.MaxHostLine (16 MiB), is answered -32700 under "id": null and
// never sent; its WARN line gives the line's size in bytes, counted to its
// newline, and the limit. The bytes past the limit are skipped to the
// line's end: the message that begins there (a ping with id "tail") is
// not read as one. The host's next call is answered.
func TestOversizedHostLine(t *testing.T) {
	rc := &recording{}
	h := newHandler()
	rc.h.Store(h)
	srv := serveClosing(t, rc, h)
	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful}, logger)
	host.send(rawInitialize)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	const size = 17 << 20
	tail := `{"jsonrpc":"2.0","id":"tail","method":"ping"}`
	host.send(strings.Repeat(" ", connect.MaxHostLine) + tail + strings.Repeat(" ", size-connect.MaxHostLine-len(tail)))
	host.send(echoLine(`"after"`))
	ids, got := host.answers(`"after"`)
	if want := []string{"null", `"after"`}; !slices.Equal(ids, want) {
		t.Errorf("answers under the ids %v, want %v", ids, want)
	}
	if m := got["null"][0]; m.text != `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: a message longer than 16777216 bytes"}}` {
		t.Errorf("answer to the 17 MiB line: %s", m.text)
	}
	if m := got[`"after"`][0]; m.Error != nil {
		t.Errorf("the call after: %s", m.text)
	}
	const warn = `level=WARN msg="connect: a line from the host is longer than tidemark connect reads; answered with an error and skipped to its end: the host must send smaller messages" code=-32700 bytes=17825792 limit=16777216` + "\n"
	if out := logs.String(); !strings.Contains(out, warn) || strings.Count(out, "\n") != 1 {
		t.Errorf("the log, want one line ending %s:\n%s", warn, out)
	}
	if got, want := strings.Join(rc.reset(), " "), "initialize notifications/initialized tools/call"; got != want {
		t.Errorf("POSTs the server got: %s, want %s", got, want)
	}
}

// TestLastHostLineOverLimit: the host's last line, ended by the end of
// its output rather than a newline, is held to connect.MaxHostLine as
// any other: a ping of one byte more is answered -32700, never read as a
// message.
func TestLastHostLineOverLimit(t *testing.T) {
	toBridge, hostOut := io.Pipe()
	fromBridge, bridgeOut := io.Pipe()
	conn, err := (&connect.HostTransport{Reader: toBridge, Writer: bridgeOut, Logger: slog.New(slog.DiscardHandler)}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ping := `{"jsonrpc":"2.0","id":"last","method":"ping"}`
	go func() {
		io.WriteString(hostOut, strings.Repeat(" ", connect.MaxHostLine+1-len(ping))+ping)
		hostOut.Close()
	}()
	answers := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(fromBridge)
		if sc.Scan() {
			answers <- sc.Text()
		}
		close(answers)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), hostTimeout)
	defer cancel()
	if msg, err := conn.Read(ctx); err != io.EOF {
		t.Errorf("Read: %v, %v, want the end of the host's output (io.EOF) and no message", msg, err)
	}
	select {
	case a := <-answers:
		if want := `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: a message longer than 16777216 bytes"}}`; a != want {
			t.Errorf("answer to the last line: %q, want %s", a, want)
		}
	case <-time.After(hostTimeout):
		t.Errorf("no answer to the last line within %v", hostTimeout)
	}
}
