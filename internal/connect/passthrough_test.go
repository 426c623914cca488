package connect_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/transport"
)

// hostTimeout bounds each wait of the host below for a message.
const hostTimeout = 10 * time.Second

// hostSide is a host speaking to connect.Run over a pipe, as a desktop
// host does over the bridge's stdio.
type hostSide struct {
	t    *testing.T
	out  io.WriteCloser
	in   chan jsonrpc.Message
	seen []jsonrpc.Message // every message read so far, in order
}

// stopRun closes the host's end of a bridge and requires Run (done) to
// return nil within hostTimeout, then closes the bridge's end so that the
// reader of its output ends.
func stopRun(t *testing.T, hostOut, bridgeOut io.Closer, done <-chan error) {
	t.Helper()
	hostOut.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil when the host closes its end", err)
		}
	case <-time.After(hostTimeout):
		t.Error("Run still runs 10s after the host closed its end")
	}
	bridgeOut.Close()
}

// startBridge runs the bridge toward url with o (URL and Logger set here)
// and returns its host side. The test's cleanup closes the host's end and
// requires Run to return nil.
func startBridge(t *testing.T, url string, o connect.Options) *hostSide {
	t.Helper()
	toBridge, hostOut := io.Pipe()
	fromBridge, bridgeOut := io.Pipe()
	conn, err := (&mcp.IOTransport{Reader: toBridge, Writer: bridgeOut}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o.URL = url
	o.Logger = slog.New(slog.DiscardHandler)
	done := make(chan error, 1)
	go func() {
		done <- connect.Run(context.Background(), conn, o)
		conn.Close()
	}()
	h := &hostSide{t: t, out: hostOut, in: make(chan jsonrpc.Message, 256)}
	go func() {
		defer close(h.in)
		sc := bufio.NewScanner(fromBridge)
		for sc.Scan() {
			if m, err := jsonrpc.DecodeMessage(sc.Bytes()); err == nil {
				h.in <- m
			}
		}
	}()
	t.Cleanup(func() {
		stopRun(t, hostOut, bridgeOut, done)
		for range h.in {
		}
	})
	return h
}

// send writes one message line to the bridge.
func (h *hostSide) send(line string) {
	h.t.Helper()
	if _, err := io.WriteString(h.out, line+"\n"); err != nil {
		h.t.Fatal(err)
	}
}

// reply answers the server-to-client request req with result.
func (h *hostSide) reply(req *jsonrpc.Request, result string) {
	h.t.Helper()
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Result: json.RawMessage(result)})
	if err != nil {
		h.t.Fatal(err)
	}
	h.send(string(data))
}

// next returns the next message from the bridge.
func (h *hostSide) next() jsonrpc.Message {
	h.t.Helper()
	select {
	case m, ok := <-h.in:
		if !ok {
			h.t.Fatal("the bridge closed its output")
		}
		h.seen = append(h.seen, m)
		return m
	case <-time.After(hostTimeout):
		h.t.Fatalf("no message from the bridge within %v", hostTimeout)
		return nil
	}
}

// answer reads messages up to the answer to id and returns it with the
// messages read before it.
func (h *hostSide) answer(id any) (*jsonrpc.Response, []jsonrpc.Message) {
	h.t.Helper()
	want, err := jsonrpc.MakeID(id)
	if err != nil {
		h.t.Fatal(err)
	}
	var before []jsonrpc.Message
	for {
		m := h.next()
		if r, ok := m.(*jsonrpc.Response); ok && r.ID == want {
			return r, before
		}
		before = append(before, m)
	}
}

// request reads messages up to the next server-to-client request.
func (h *hostSide) request() *jsonrpc.Request {
	h.t.Helper()
	for {
		if r, ok := h.next().(*jsonrpc.Request); ok && r.IsCall() {
			return r
		}
	}
}

// initialize opens the session with the client capabilities caps.
func (h *hostSide) initialize(caps string) {
	h.t.Helper()
	h.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":` + caps + `,"clientInfo":{"name":"host","version":"1"}}}`)
	if r, _ := h.answer("init"); r.Error != nil {
		h.t.Fatalf("initialize: %v", r.Error)
	}
	h.send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
}

// toolText returns the text of a tool result's single text content.
func toolText(t *testing.T, r *jsonrpc.Response) string {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("call %v: error %v", r.ID.Raw(), r.Error)
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil || len(res.Content) != 1 || res.IsError {
		t.Fatalf("call %v: result %s, want one text content and no isError", r.ID.Raw(), r.Result)
	}
	return res.Content[0].Text
}

// sameJSON reports whether got and want hold the same JSON value; absent
// params (got empty) are null.
func sameJSON(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	if len(got) == 0 {
		got = json.RawMessage("null")
	}
	return json.Unmarshal(got, &g) == nil && reflect.DeepEqual(g, w)
}

// textResult is a tool result of one text content.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// serve serves s through Tidemark's handler on loopback (the stateful era)
// behind wrap (nil: none), until the test's end.
func serve(t *testing.T, s *mcp.Server, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	h := tidemark.NewHandler(s, &tidemark.Options{
		Transport: transport.Options{Retry: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
	})
	var handler http.Handler = h
	if wrap != nil {
		handler = wrap(h)
	}
	return serveClosing(t, handler, h)
}

// asking is a server whose tools put the server-to-client requests to the
// client of the call and return what it answered: ask (elicitation/create),
// sample (sampling/createMessage), roots (roots/list), ping (ping).
func asking() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "asking", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
			Message: "Proceed?",
			RequestedSchema: map[string]any{
				"type":       "object",
				"properties": map[string]any{"ok": map[string]any{"type": "boolean"}},
				"required":   []any{"ok"},
			},
		})
		if err != nil {
			return nil, nil, err
		}
		return textResult(fmt.Sprintf("%s ok=%v", res.Action, res.Content["ok"])), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "sample"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
			MaxTokens: 10,
			Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say hi"}}},
		})
		if err != nil {
			return nil, nil, err
		}
		text, _ := res.Content.(*mcp.TextContent)
		if text == nil {
			return nil, nil, fmt.Errorf("sampling answered %T, want text", res.Content)
		}
		return textResult(res.Model + ": " + text.Text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "roots"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		text := ""
		for _, r := range res.Roots {
			text += r.URI + " " + r.Name + ";"
		}
		return textResult(text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "ping"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if err := req.Session.Ping(ctx, nil); err != nil {
			return nil, nil, err
		}
		return textResult("pong"), nil, nil
	})
	return s
}

// TestServerToClientRequests: in the stateful era, a tool that asks the
// client for an elicitation, a sampling and its roots reaches the host
// through the bridge: the host receives elicitation/create,
// sampling/createMessage, roots/list and ping with the params the server
// sent, answers each, and the tool's result carries the host's answer.
func TestServerToClientRequests(t *testing.T) {
	srv := serve(t, asking(), nil)
	h := startBridge(t, srv.URL, connect.Options{})
	h.initialize(`{"elicitation":{},"sampling":{},"roots":{}}`)

	for _, tc := range []struct {
		tool, method, params, answer, result string
	}{
		{
			tool:   "ask",
			method: "elicitation/create",
			params: `{"mode":"form","message":"Proceed?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}}`,
			answer: `{"action":"accept","content":{"ok":true}}`,
			result: "accept ok=true",
		},
		{
			tool:   "sample",
			method: "sampling/createMessage",
			params: `{"maxTokens":10,"messages":[{"role":"user","content":{"type":"text","text":"Say hi"}}]}`,
			answer: `{"role":"assistant","content":{"type":"text","text":"hi from the host"},"model":"host-model"}`,
			result: "host-model: hi from the host",
		},
		{
			tool:   "roots",
			method: "roots/list",
			params: `null`, // the SDK sends roots/list without params
			answer: `{"roots":[{"uri":"file:///work/project","name":"project"}]}`,
			result: "file:///work/project project;",
		},
		{
			tool:   "ping",
			method: "ping",
			params: `null`,
			answer: `{}`,
			result: "pong",
		},
	} {
		t.Run(tc.method, func(t *testing.T) {
			h.t = t
			h.send(`{"jsonrpc":"2.0","id":"` + tc.tool + `","method":"tools/call","params":{"name":"` + tc.tool + `","arguments":{}}}`)
			req := h.request()
			if req.Method != tc.method || !sameJSON(t, req.Params, tc.params) {
				t.Fatalf("the host received %s %s, want %s %s", req.Method, req.Params, tc.method, tc.params)
			}
			h.reply(req, tc.answer)
			r, _ := h.answer(tc.tool)
			if got := toolText(t, r); got != tc.result {
				t.Errorf("%s's result: %q, want %q", tc.tool, got, tc.result)
			}
		})
	}
}

// TestCancelledPassesThrough: the host sends notifications/cancelled for a
// call whose tool runs; the bridge passes it to the server, whose tool's
// context ends with context.Canceled, the server received the host's
// notification as sent, and the host gets no answer for the cancelled id (MCP 2025-11-25, "Cancellation": the receiver does not
// answer, and the bridge stops reading the call's stream). The session
// goes on: the host's next call is answered.
func TestCancelledPassesThrough(t *testing.T) {
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	s := mcp.NewServer(&mcp.Implementation{Name: "waiting", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			ended <- ctx.Err()
			return nil, nil, ctx.Err()
		case <-time.After(hostTimeout):
			ended <- nil
			return textResult("not cancelled"), nil, nil
		}
	})
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, args struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return textResult(args.Text), nil, nil
	})
	cancels := make(chan string, 4) // the bodies of notifications/cancelled POSTs
	srv := serve(t, s, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				if m, err := jsonrpc.DecodeMessage(body); err == nil {
					if req, ok := m.(*jsonrpc.Request); ok && req.Method == "notifications/cancelled" {
						cancels <- string(req.Params)
					}
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	h := startBridge(t, srv.URL, connect.Options{})
	h.initialize(`{}`)

	h.send(`{"jsonrpc":"2.0","id":"w","method":"tools/call","params":{"name":"wait","arguments":{}}}`)
	select {
	case <-started:
	case <-time.After(hostTimeout):
		t.Fatal("the wait tool did not start within 10s")
	}
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"w","reason":"the user stopped it"}}`)
	select {
	case err := <-ended:
		if err != context.Canceled {
			t.Fatalf("the tool's context ended with %v, want context.Canceled", err)
		}
	case <-time.After(hostTimeout):
		t.Fatal("the tool's context did not end within 10s of notifications/cancelled")
	}
	select {
	case p := <-cancels:
		if want := `{"requestId":"w","reason":"the user stopped it"}`; !sameJSON(t, json.RawMessage(p), want) {
			t.Errorf("the server received notifications/cancelled %s, want %s", p, want)
		}
	case <-time.After(hostTimeout):
		t.Fatal("the server received no notifications/cancelled within 10s")
	}
	// Whatever the server still writes for the call has had time to
	// reach the bridge before the next call is sent.
	time.Sleep(300 * time.Millisecond)
	h.send(`{"jsonrpc":"2.0","id":"after","method":"tools/call","params":{"name":"echo","arguments":{"text":"still here"}}}`)
	r, _ := h.answer("after")
	if got := toolText(t, r); got != "still here" {
		t.Errorf("the call after the cancellation: %q, want %q", got, "still here")
	}
	w, _ := jsonrpc.MakeID("w")
	for _, m := range h.seen {
		if r, ok := m.(*jsonrpc.Response); ok && r.ID == w {
			t.Errorf("the host got an answer to the cancelled call: result %s, error %v; want none", r.Result, r.Error)
		}
	}
}

// TestProgressPassesThrough: the progress notifications a tool sends reach
// the host in the order sent, each with the host's own progress token and
// the server's progress, total and message, all before the call's result.
func TestProgressPassesThrough(t *testing.T) {
	const steps = 5
	s := mcp.NewServer(&mcp.Implementation{Name: "counting", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "count"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		for i := 1; i <= steps; i++ {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: steps, Message: fmt.Sprintf("step %d", i),
			}); err != nil {
				return nil, nil, err
			}
		}
		return textResult("counted"), nil, nil
	})
	srv := serve(t, s, nil)
	h := startBridge(t, srv.URL, connect.Options{})
	h.initialize(`{}`)

	h.send(`{"jsonrpc":"2.0","id":"count","method":"tools/call","params":{"name":"count","arguments":{},"_meta":{"progressToken":"host-token-1"}}}`)
	r, before := h.answer("count")
	if got := toolText(t, r); got != "counted" {
		t.Errorf("count's result: %q, want %q", got, "counted")
	}
	var got []string
	for _, m := range before {
		if req, ok := m.(*jsonrpc.Request); ok && req.Method == "notifications/progress" {
			got = append(got, string(req.Params))
		}
	}
	if len(got) != steps {
		t.Fatalf("the host got %d progress notifications before the result, want %d: %v", len(got), steps, got)
	}
	for i, p := range got {
		want := fmt.Sprintf(`{"progressToken":"host-token-1","progress":%d,"total":%d,"message":"step %d"}`, i+1, steps, i+1)
		if !sameJSON(t, json.RawMessage(p), want) {
			t.Errorf("progress notification %d: %s, want %s", i+1, p, want)
		}
	}
}

// unavailable answers the first n POSTs of tools/call (n < 0: every one)
// 503 with Retry-After: 1 and a JSON-RPC error body, and passes the rest
// to next; times records when each tools/call POST arrived.
type unavailable struct {
	next http.Handler
	n    int

	mu    sync.Mutex
	times []time.Time
}

func (u *unavailable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if m, err := jsonrpc.DecodeMessage(body); err == nil {
			if req, ok := m.(*jsonrpc.Request); ok && req.Method == "tools/call" {
				u.mu.Lock()
				u.times = append(u.times, time.Now())
				refuse := u.n < 0 || len(u.times) <= u.n
				u.mu.Unlock()
				if refuse {
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusServiceUnavailable)
					io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"the server is overloaded"}}`)
					return
				}
			}
		}
	}
	u.next.ServeHTTP(w, r)
}

// posts returns when each tools/call POST arrived.
func (u *unavailable) posts() []time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.times)
}

// TestRetryAfter503: a server that answers a tools/call POST 503 with
// Retry-After: 1 gets it again no sooner than a second later, until it
// takes it: the host gets the call's result. A server that answers 503 for
// longer than --resume-timeout (1.5 s here) fails the host's call with
// -32603, the server's message and error.data exactly
// {"reason":"server_refused","status":503}, once the next Retry-After would
// end past the bound: after the second POST, a second after the first.
func TestRetryAfter503(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		u := &unavailable{n: 2}
		srv := serve(t, demo.NewServer(), func(next http.Handler) http.Handler { u.next = next; return u })
		h := startBridge(t, srv.URL, connect.Options{})
		h.initialize(`{}`)
		h.send(`{"jsonrpc":"2.0","id":"echo","method":"tools/call","params":{"name":"echo","arguments":{"text":"after two 503s"}}}`)
		r, _ := h.answer("echo")
		if got := toolText(t, r); got != "after two 503s" {
			t.Errorf("echo's result: %q, want %q", got, "after two 503s")
		}
		times := u.posts()
		if len(times) != 3 {
			t.Fatalf("the server received %d tools/call POSTs, want 3 (two refused, one taken)", len(times))
		}
		for i := 1; i < len(times); i++ {
			gap := times[i].Sub(times[i-1])
			if gap < time.Second {
				t.Errorf("POST %d came %v after the 503 with Retry-After: 1, want at least 1s", i+1, gap)
			}
			t.Logf("POST %d: %v after the 503 before it", i+1, gap)
		}
	})
	t.Run("beyond the bound", func(t *testing.T) {
		const bound = 1500 * time.Millisecond
		u := &unavailable{n: -1}
		srv := serve(t, demo.NewServer(), func(next http.Handler) http.Handler { u.next = next; return u })
		h := startBridge(t, srv.URL, connect.Options{ResumeTimeout: bound})
		h.initialize(`{}`)
		start := time.Now()
		h.send(`{"jsonrpc":"2.0","id":"echo","method":"tools/call","params":{"name":"echo","arguments":{"text":"never taken"}}}`)
		r, _ := h.answer("echo")
		took := time.Since(start)
		const wantMsg = "the MCP server refused the call with HTTP 503: the server is overloaded"
		if r.Error == nil {
			t.Fatalf("the host got the result %s, want the error %q", r.Result, wantMsg)
		}
		we, ok := r.Error.(*jsonrpc.Error)
		if !ok || we.Code != jsonrpc.CodeInternalError || we.Message != wantMsg || !sameJSON(t, we.Data, `{"reason":"server_refused","status":503}`) {
			t.Errorf("the host's error: %#v, want code -32603, message %q, data {\"reason\":\"server_refused\",\"status\":503}", r.Error, wantMsg)
		}
		times := u.posts()
		if len(times) != 2 {
			t.Errorf("the server received %d tools/call POSTs, want 2: a third would come 2s after the first, past the bound", len(times))
		}
		if len(times) == 2 && times[1].Sub(times[0]) < time.Second {
			t.Errorf("the second POST came %v after the first 503, want at least 1s", times[1].Sub(times[0]))
		}
		t.Logf("the call failed %v after it was sent, after %d POSTs", took, len(times))
		if margin := time.Second; took > bound+margin {
			t.Errorf("the call failed %v after it was sent, want within the bound %v plus %v", took, bound, margin)
		}
	})
}
