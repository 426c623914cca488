package connect_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// rawHost is a host writing and reading the bridge's stdio as lines, so
// that a test sees the exact bytes of each id (the go-sdk's decoder turns
// every number into an int64).
type rawHost struct {
	t     *testing.T
	out   io.WriteCloser
	lines chan string
}

// rawLine is one message line from the bridge, its id as written.
type rawLine struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	text string
}

// serveClosing starts a loopback HTTP server of next and, when the test
// ends, cuts its connections, closes it, then closes h (its handler).
func serveClosing(t *testing.T, next http.Handler, h io.Closer) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(next)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	})
	return srv
}

// startRawHost runs the bridge of tidemark connect (HostTransport and Run)
// toward url with o; the test's cleanup closes the host's end and
// requires Run to return nil.
func startRawHost(t *testing.T, url string, o connect.Options, logger *slog.Logger) *rawHost {
	t.Helper()
	toBridge, hostOut := io.Pipe()
	fromBridge, bridgeOut := io.Pipe()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := (&connect.HostTransport{Reader: toBridge, Writer: bridgeOut, Logger: logger}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o.URL = url
	o.Logger = logger
	done := make(chan error, 1)
	go func() {
		done <- connect.Run(context.Background(), conn, o)
		conn.Close()
	}()
	h := &rawHost{t: t, out: hostOut, lines: make(chan string, 256)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(fromBridge)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		stopRun(t, hostOut, bridgeOut, done)
		for range h.lines {
		}
	})
	return h
}

func (h *rawHost) send(lines ...string) {
	h.t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(h.out, l+"\n"); err != nil {
			h.t.Fatal(err)
		}
	}
}

// next returns the next line from the bridge, decoded.
func (h *rawHost) next() rawLine {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			h.t.Fatal("the bridge closed its output")
		}
		var m rawLine
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			h.t.Fatalf("line from the bridge %q: %v", l, err)
		}
		m.text = l
		return m
	case <-time.After(hostTimeout):
		h.t.Fatalf("no line from the bridge within %v", hostTimeout)
		return rawLine{}
	}
}

// answers reads lines up to the answer whose id is written last, and
// returns the answers read, each under its id as written, in order.
func (h *rawHost) answers(last string) (ids []string, byID map[string][]rawLine) {
	h.t.Helper()
	byID = make(map[string][]rawLine)
	for {
		m := h.next()
		if m.Method != "" {
			continue // a notification or a request of the server's
		}
		id := string(m.ID)
		ids = append(ids, id)
		byID[id] = append(byID[id], m)
		if id == last {
			return ids, byID
		}
	}
}

const rawInitialize = `{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`

// echoLine is a call of the demo's echo tool with id, whose text is id.
func echoLine(id string) string {
	text, _ := json.Marshal(id) // a string always encodes
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"echo","arguments":{"text":` + string(text) + `}}}`
}

// TestHostIDsVerbatim: each answer reaches the host under its request's
// id exactly as the host wrote it (MCP 2025-11-25, "Base Protocol":
// RequestId is a string or a number; JSON-RPC 2.0, section 5: the same
// value as the request's), in both eras: a fraction, an integer past 2^53,
// an exponent and a string, beside an integer that a lossy decoding would
// give two of them. The call with id 2.5 gets its own echo, and the call
// with id 2 its own countdown, each answered once.
func TestHostIDsVerbatim(t *testing.T) {
	for _, protocol := range []string{connect.ProtocolStateful, connect.ProtocolSessionless} {
		t.Run(protocol, func(t *testing.T) {
			h := newHandler()
			srv := serveClosing(t, h, h)
			host := startRawHost(t, srv.URL, connect.Options{Protocol: protocol}, nil)
			host.send(rawInitialize)
			if _, got := host.answers("6"); got["6"][0].Error != nil {
				t.Fatalf("initialize: %s", got["6"][0].text)
			}
			host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"countdown","arguments":{"n":2,"delay_ms":300}}}`,
				`{"jsonrpc":"2.0","id":2.5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"I am 2.5"}}}`,
				echoLine(`1.5`),
				echoLine(`9007199254740993`),
				echoLine(`1e3`),
				echoLine(`"1000"`),
			)
			want := map[string]string{
				"2":                `"countdown of 2 finished"`,
				"2.5":              `"I am 2.5"`,
				"1.5":              `"1.5"`,
				"9007199254740993": `"9007199254740993"`,
				"1e3":              `"1e3"`,
				`"1000"`:           `"\"1000\""`,
			}
			got := make(map[string][]rawLine)
			for len(got) < len(want) {
				m := host.next()
				if m.Method != "" {
					continue
				}
				got[string(m.ID)] = append(got[string(m.ID)], m)
				if _, ok := want[string(m.ID)]; !ok {
					t.Errorf("an answer under id %s, which the host never sent: %s", m.ID, m.text)
				}
			}
			// Any second answer has come by the time a later ping is answered.
			host.send(echoLine(`"end"`))
			_, after := host.answers(`"end"`)
			for id, w := range want {
				all := append(got[id], after[id]...)
				if len(all) != 1 {
					t.Errorf("id %s: %d answers, want 1", id, len(all))
					continue
				}
				if all[0].Error != nil || !strings.Contains(string(all[0].Result), w) {
					t.Errorf("id %s: answer %s, want a result holding %s", id, all[0].text, w)
				}
			}
		})
	}
}

// TestDuplicateIDInFlight: of two calls with the same id in flight, the
// first runs and the later one is refused at once, never sent: -32600,
// error.data.reason duplicate_request_id, under that id. Once the first is
// answered the id is free again.
func TestDuplicateIDInFlight(t *testing.T) {
	for _, protocol := range []string{connect.ProtocolStateful, connect.ProtocolSessionless} {
		t.Run(protocol, func(t *testing.T) {
			h := newHandler()
			srv := serveClosing(t, h, h)
			host := startRawHost(t, srv.URL, connect.Options{Protocol: protocol}, nil)
			host.send(rawInitialize)
			host.answers("6")
			host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"countdown","arguments":{"n":2,"delay_ms":300}}}`,
				`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"SECOND"}}}`,
			)
			_, first := host.answers("7")
			refusal := first["7"][0]
			if refusal.Error == nil || refusal.Error.Code != -32600 || string(refusal.Error.Data) != `{"reason":"duplicate_request_id"}` ||
				!strings.HasPrefix(refusal.Error.Message, "invalid request: a call with id 7 is in flight, and this one was not sent") {
				t.Errorf("first answer under id 7: %s, want -32600 duplicate_request_id", refusal.text)
			}
			_, second := host.answers("7")
			if r := second["7"][0]; r.Error != nil || !strings.Contains(string(r.Result), `"countdown of 2 finished"`) {
				t.Errorf("second answer under id 7: %s, want the countdown's result", r.text)
			}
			host.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"THIRD"}}}`)
			if _, third := host.answers("7"); third["7"][0].Error != nil || !strings.Contains(string(third["7"][0].Result), `"THIRD"`) {
				t.Errorf("id 7 once free again: %s, want THIRD", third["7"][0].text)
			}
		})
	}
}

// TestCancelledHostID: the host cancels its call of id 2.5 (the stateful
// era); the server gets notifications/cancelled naming the id the bridge
// sent that call under, the host gets no answer for 2.5, and 2.5 is free
// again. A cancellation naming no call in flight never reaches the server.
func TestCancelledHostID(t *testing.T) {
	var mu sync.Mutex
	var callIDs, cancelIDs []string // as the server received them
	srv := serve(t, demo.NewServer(), func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				var m struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
					Params struct {
						RequestID json.RawMessage `json:"requestId"`
						Name      string          `json:"name"`
					} `json:"params"`
				}
				json.Unmarshal(body, &m)
				mu.Lock()
				switch {
				case m.Method == "tools/call" && m.Params.Name == "countdown":
					callIDs = append(callIDs, string(m.ID))
				case m.Method == "notifications/cancelled":
					cancelIDs = append(cancelIDs, string(m.Params.RequestID))
				}
				mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	})
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful}, nil)
	host.send(rawInitialize)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2.5,"method":"tools/call","params":{"name":"countdown","arguments":{"n":1,"delay_ms":60000}}}`)
	deadline := time.Now().Add(hostTimeout)
	for {
		mu.Lock()
		n := len(callIDs)
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server got no countdown call within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	host.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2.5,"reason":"stop"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"never sent"}}`,
		echoLine(`2.5`))
	ids, byID := host.answers("2.5")
	if r := byID["2.5"][0]; len(ids) != 1 || r.Error != nil || !strings.Contains(string(r.Result), `"2.5"`) {
		t.Errorf("answers after the cancellation: %v, the one under 2.5 %s; want one, the echo of the second call with id 2.5", ids, r.text)
	}
	// The countdown's end, had it not been cancelled, has had time to come.
	time.Sleep(300 * time.Millisecond)
	host.send(echoLine(`"end"`))
	if ids, _ := host.answers(`"end"`); len(ids) != 1 {
		t.Errorf("answers before the last call's: %v, want none", ids[:len(ids)-1])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(cancelIDs) != 1 || cancelIDs[0] != callIDs[0] {
		t.Errorf("the server got notifications/cancelled for %v, its countdown call had id %v; want one, that id", cancelIDs, callIDs)
	}
}

// TestEventTooLarge: a tool's answer of more than Options.MaxEventSize
// (64 KiB here; tidemark connect's is client.DefaultMaxEventSize) bytes in
// one SSE event fails its call at once, never resumed (the same
// event would come again): -32603, reason stream_lost, an error.message
// and a WARN line that say the event was over the bound and what to do.
// The bridge goes on: a later call is answered.
func TestEventTooLarge(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "large", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "large"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return textResult(strings.Repeat("x", 64<<10)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, args struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return textResult(args.Text), nil, nil
	})
	srv := serve(t, s, nil)
	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful, MaxEventSize: 64 << 10}, logger)
	host.send(rawInitialize)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"large","method":"tools/call","params":{"name":"large","arguments":{}}}`)
	_, got := host.answers(`"large"`)
	r := got[`"large"`][0]
	const say = "the MCP server's answer to this call holds an SSE event of more than 65536 bytes, more than tidemark connect reads in one event; the call was sent and may have run, but its answer cannot be read: ask the server for less (a narrower request, a smaller page)"
	if r.Error == nil || r.Error.Code != -32603 || string(r.Error.Data) != `{"reason":"stream_lost"}` || r.Error.Message != say {
		t.Errorf("answer to the large call: %.300s, want -32603 stream_lost: %s", r.text, say)
	}
	host.send(echoLine(`"after"`))
	if _, got := host.answers(`"after"`); got[`"after"`][0].Error != nil {
		t.Errorf("the call after: %s", got[`"after"`][0].text)
	}
	out := logs.String()
	if !strings.Contains(out, "an SSE event of more than 65536 bytes") || strings.Contains(out, "before the server sent an event ID") {
		t.Errorf("the log does not say the event was over 65536 bytes, or says the stream had no event ID:\n%s", out)
	}
}

// TestHostBatch: a host that negotiated MCP 2025-03-26 may send a
// JSON-RPC batch, which a receiver of that revision must accept: its
// notifications and calls go on in order, and its answer is one JSON array
// written once every call is answered, each answer under its call's id as
// written, with the error answer of a message of it that is none (JSON-RPC
// 2.0, section 6). A batch of notifications only gets no answer. Under a
// revision without batches (2025-06-18 and later) a batch is refused whole.
func TestHostBatch(t *testing.T) {
	srv := serve(t, demo.NewServer(), nil)
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful}, nil)
	host.send(`{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
	host.answers("6")
	host.send(`[{"jsonrpc":"2.0","method":"notifications/initialized"}]`,
		`[`+`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"countdown","arguments":{"n":2,"delay_ms":100}}},`+
			echoLine(`2.5`)+`,{"jsonrpc":"2.0","id":"p","method":"ping"},{"jsonrpc":"1.0","id":9}]`,
		echoLine(`"after"`))
	var batch string
	for batch == "" {
		select {
		case l := <-host.lines:
			if strings.HasPrefix(l, "[") {
				batch = l
			}
		case <-time.After(hostTimeout):
			t.Fatal("no batch answer within 10s")
		}
	}
	var answers []rawLine
	if err := json.Unmarshal([]byte(batch), &answers); err != nil {
		t.Fatalf("batch answer %s: %v", batch, err)
	}
	got := make(map[string]string)
	for _, a := range answers {
		switch {
		case a.Error != nil:
			got[string(a.ID)] = a.Error.Message
		default:
			got[string(a.ID)] = string(a.Result)
		}
	}
	want := map[string]string{
		"2":   `{"content":[{"type":"text","text":"countdown of 2 finished"}]}`,
		"2.5": `{"content":[{"type":"text","text":"2.5"}]}`,
		`"p"`: `{}`,
		"9":   "invalid request: not a JSON-RPC 2.0 request, notification or response",
	}
	if len(answers) != len(want) || !maps.Equal(got, want) {
		t.Errorf("batch answer %s\nwant one answer each: %v", batch, want)
	}

	h2 := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful}, nil)
	h2.send(rawInitialize)
	h2.answers("6")
	h2.send(`[` + echoLine(`1`) + `]`)
	if m := h2.next(); string(m.ID) != "null" || m.Error == nil || m.Error.Message != "invalid request: protocol 2025-11-25 has no JSON-RPC batches (MCP 2025-06-18 removed them): write each message on a line of its own" {
		t.Errorf("a batch under 2025-11-25: %s, want -32600 protocol 2025-11-25 has no JSON-RPC batches", m.text)
	}
}

// TestHostBatchOrder: a batch's answer lists its answers in the order of
// its messages, whatever order its calls finish in (docs/connect.md; JSON-
// RPC 2.0, section 6, allows any order, and a host that reads answers by
// position gets the right one): the countdown that finishes last comes
// first, the error answer of a message that is none at its place.
func TestHostBatchOrder(t *testing.T) {
	srv := serve(t, demo.NewServer(), nil)
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful}, nil)
	host.send(`{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`[{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"countdown","arguments":{"n":1,"delay_ms":300}}},`+
			`{"jsonrpc":"2.0","id":"b","method":"ping"},`+
			`{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"echo","arguments":{"text":"c"}}},`+
			`"junk",`+
			`{"jsonrpc":"2.0","id":"d","method":"tools/call","params":{"name":"echo","arguments":{"text":"d"}}}]`)
	var batch string
	for batch == "" {
		select {
		case l := <-host.lines:
			if strings.HasPrefix(l, "[") {
				batch = l
			}
		case <-time.After(hostTimeout):
			t.Fatal("no batch answer within 10s")
		}
	}
	want := `[{"jsonrpc":"2.0","id":"a","result":{"content":[{"type":"text","text":"countdown of 1 finished"}]}},` +
		`{"jsonrpc":"2.0","id":"b","result":{}},` +
		`{"jsonrpc":"2.0","id":"c","result":{"content":[{"type":"text","text":"c"}]}},` +
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: not a JSON-RPC 2.0 request, notification or response"}},` +
		`{"jsonrpc":"2.0","id":"d","result":{"content":[{"type":"text","text":"d"}]}}]`
	if batch != want {
		t.Errorf("batch answer\n%s\nwant\n%s", batch, want)
	}
}
