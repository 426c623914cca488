package connect_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestSessionlessRun: in process, a host initializes through the bridge
// in the sessionless mode, against a handler that serves both eras; the
// bridge answers initialize with the host's revision, a call passes, the
// host's server/discover is declined, and Run returns nil when the host
// closes its end, with no goroutine left behind (goleak).
func TestSessionlessRun(t *testing.T) {
	h := newHandler()
	srv := httptest.NewServer(h)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	}()
	toBridge, hostOut := io.Pipe()
	fromBridge, bridgeOut := io.Pipe()
	conn, err := (&mcp.IOTransport{Reader: toBridge, Writer: bridgeOut}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- connect.Run(context.Background(), conn, connect.Options{URL: srv.URL, Protocol: connect.ProtocolSessionless, Logger: slog.New(slog.DiscardHandler)})
		conn.Close()
	}()
	in := make(chan *jsonrpc.Response, 16)
	go func() {
		sc := bufio.NewScanner(fromBridge)
		for sc.Scan() {
			if m, err := jsonrpc.DecodeMessage(sc.Bytes()); err == nil {
				if r, ok := m.(*jsonrpc.Response); ok {
					in <- r
				}
			}
		}
		close(in)
	}()
	call := func(id, method, params string) *jsonrpc.Response {
		t.Helper()
		rid, _ := jsonrpc.MakeID(id)
		data, _ := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: rid, Method: method, Params: json.RawMessage(params)})
		if _, err := hostOut.Write(append(data, '\n')); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-in:
			if r.ID != rid {
				t.Fatalf("answer to %v, want %s", r.ID.Raw(), id)
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to %s within 10s", id)
		}
		return nil
	}
	r := call("init", "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"host","version":"1"}}`)
	if r.Error != nil || !strings.Contains(string(r.Result), `"protocolVersion":"2025-06-18"`) || strings.Contains(string(r.Result), `"extensions"`) {
		t.Errorf("initialize: %s %v, want protocol 2025-06-18 and no extensions", r.Result, r.Error)
	}
	r = call("d", "server/discover", `{}`)
	if we, ok := r.Error.(*jsonrpc.Error); !ok || we.Code != jsonrpc.CodeMethodNotFound {
		t.Errorf("server/discover from the host: %v, want -32601", r.Error)
	}
	r = call("echo", "tools/call", `{"name":"echo","arguments":{"text":"sessionless"}}`)
	if r.Error != nil || !strings.Contains(string(r.Result), `"text":"sessionless"`) {
		t.Errorf("echo: %s %v", r.Result, r.Error)
	}
	hostOut.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil when the host closes its end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still runs 10s after the host closed its end")
	}
	bridgeOut.Close()
	for range in {
	}
}

// TestSessionlessPing: toward a server of the sessionless era the host's
// ping is answered by the bridge, an empty result under the host's id,
// and never sent: MCP 2026-07-28 removed ping, and sent as the SDK
// frames it (no _meta) Tidemark's handler takes it for a request of an
// earlier revision and answers 400 session_required. The server sees
// server/discover, then the host's tools/list only, and the call after
// the ping is answered.
func TestSessionlessPing(t *testing.T) {
	rc := &recording{}
	h := newHandler()
	rc.h.Store(h)
	srv := serveClosing(t, rc, h)
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolSessionless}, nil)
	host.send(rawInitialize)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","id":"p","method":"ping"}`, `{"jsonrpc":"2.0","id":7,"method":"ping","params":{}}`)
	got := map[string]string{}
	for range 2 {
		m := host.next()
		got[string(m.ID)] = m.text
	}
	for id, want := range map[string]string{`"p"`: `{"jsonrpc":"2.0","id":"p","result":{}}`, "7": `{"jsonrpc":"2.0","id":7,"result":{}}`} {
		if got[id] != want {
			t.Errorf("answer to the ping %s: %q, want %s", id, got[id], want)
		}
	}
	host.send(`{"jsonrpc":"2.0","id":8,"method":"tools/list"}`)
	if _, got := host.answers("8"); got["8"][0].Error != nil || !strings.Contains(got["8"][0].text, `"name":"echo"`) {
		t.Errorf("tools/list after the pings: %.300s, want the demo's tools", got["8"][0].text)
	}
	if got, want := strings.Join(rc.reset(), " "), "server/discover tools/list"; got != want {
		t.Errorf("methods the server got: %s, want %s", got, want)
	}
}

// TestSessionlessRefusalStaysWithItsCall: toward a sessionless server, an
// HTTP refusal of one call (here 400 with a plain-text body, which holds
// no JSON-RPC error) fails that call only: the host's next call is sent
// and answered, never failed with the first one's connection.
func TestSessionlessRefusalStaysWithItsCall(t *testing.T) {
	h := newHandler()
	var refused atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && callMethod(r) == "tools/call" && refused.CompareAndSwap(false, true) {
			http.Error(w, "refused", http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	})
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolSessionless}, nil)
	host.send(rawInitialize)
	host.answers("6")
	host.send(echoLine(`"refused"`))
	if _, got := host.answers(`"refused"`); got[`"refused"`][0].Error == nil || got[`"refused"`][0].Error.Code != -32603 || string(got[`"refused"`][0].Error.Data) != `{"reason":"stream_lost"}` {
		t.Errorf("the refused call: %s, want -32603 {\"reason\":\"stream_lost\"}", got[`"refused"`][0].text)
	}
	host.send(echoLine(`"after"`))
	if _, got := host.answers(`"after"`); got[`"after"`][0].Error != nil || !strings.Contains(got[`"after"`][0].text, `"content":[{"type":"text","text":"\"after\""}]`) {
		t.Errorf("the call after the refused one: %.400s, want its echo", got[`"after"`][0].text)
	}
}

// TestSessionlessAnswersInHostRevision: a host of 2025-11-25, through
// the bridge toward a server of 2026-07-28 (Tidemark's handler, whose
// countdown runs as a task), gets each answer and notification in its own
// revision's shape: no resultType (MCP 2026-07-28, schema: Result), no
// ttlMs nor cacheScope (CacheableResult), no
// _meta["io.modelcontextprotocol/serverInfo"] (ResultMetaObject) nor
// _meta["io.modelcontextprotocol/subscriptionId"] (NotificationMetaObject):
// members the 2025-11-25 schema does not have.
func TestSessionlessAnswersInHostRevision(t *testing.T) {
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Transport: transport.Options{Logger: slog.New(slog.DiscardHandler)},
		Tasks:     &tidemark.TaskOptions{Tools: map[string]taskrun.Tool{"countdown": {Support: tasks.Optional}}, Poll: 20 * time.Millisecond},
	})
	srv := serveClosing(t, h, h)
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolSessionless}, nil)
	host.send(rawInitialize)
	if _, got := host.answers("6"); got["6"][0].text != `{"jsonrpc":"2.0","id":6,"result":{"capabilities":{"logging":{},"resources":{"listChanged":true,"subscribe":true},"tools":{"listChanged":true}},"protocolVersion":"2025-11-25","serverInfo":{"name":"tidemark-demo","version":"1.0.0"}}}` {
		t.Errorf("initialize: %s", got["6"][0].text)
	}
	for _, c := range []struct{ call, want string }{
		{echoLine("7"), `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"7"}]}}`},
		{`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"countdown","arguments":{"n":2}}}`, `{"jsonrpc":"2.0","id":8,"result":{"content":[{"type":"text","text":"countdown of 2 finished"}]}}`},
		{`{"jsonrpc":"2.0","id":9,"method":"resources/list"}`, `{"jsonrpc":"2.0","id":9,"result":{"resources":[{"description":"What the demo server serves.","mimeType":"text/plain","name":"readme","uri":"demo://readme"}]}}`},
		{`{"jsonrpc":"2.0","id":10,"method":"resources/templates/list"}`, `{"jsonrpc":"2.0","id":10,"result":{"resourceTemplates":[]}}`},
		{`{"jsonrpc":"2.0","id":11,"method":"prompts/list"}`, `{"jsonrpc":"2.0","id":11,"result":{"prompts":[]}}`},
		{`{"jsonrpc":"2.0","id":12,"method":"resources/subscribe","params":{"uri":"demo://readme"}}`, `{"jsonrpc":"2.0","id":12,"result":{}}`},
	} {
		host.send(c.call)
		var m rawLine
		for m = host.next(); m.Method != ""; m = host.next() {
		}
		if m.text != c.want {
			t.Errorf("answer to %s:\n got %s\nwant %s", c.call, m.text, c.want)
		}
	}
	// Members, where the whole answer holds the demo's prose.
	for _, c := range []struct{ call, want string }{
		{`{"jsonrpc":"2.0","id":13,"method":"tools/list"}`, "tools"},
		{`{"jsonrpc":"2.0","id":14,"method":"resources/read","params":{"uri":"demo://readme"}}`, "contents"},
	} {
		host.send(c.call)
		var m rawLine
		for m = host.next(); m.Method != ""; m = host.next() {
		}
		var result map[string]json.RawMessage
		json.Unmarshal(m.Result, &result)
		if got := strings.Join(slices.Sorted(maps.Keys(result)), ","); got != c.want {
			t.Errorf("answer to %s has the members %s, want %s: %.300s", c.call, got, c.want, m.text)
		}
	}
	host.send(`{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"notify","arguments":{"method":"notifications/resources/updated","uri":"demo://readme"}}}`)
	var note, answer string
	for note == "" || answer == "" {
		m := host.next()
		if m.Method != "" {
			note = m.text
		} else {
			answer = m.text
		}
	}
	if want := `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"demo://readme"}}`; note != want {
		t.Errorf("notification:\n got %s\nwant %s", note, want)
	}
	if want := `{"jsonrpc":"2.0","id":15,"result":{"content":[{"type":"text","text":"notified notifications/resources/updated demo://readme"}]}}`; answer != want {
		t.Errorf("answer to notify:\n got %s\nwant %s", answer, want)
	}
}
