package upstream_test

// What the gateway tells a client whose call's upstream stream it cannot
// carry on: an event over the size limit, and a stream cut before its
// first event by an upstream whose events carry IDs.

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
)

// scriptedUpstream is an MCP server over HTTP on loopback whose events
// carry IDs and whose tools/call answer is written by call: it answers
// initialize and ping with JSON, notifications with 202, GET with 405 and
// DELETE with 204.
func scriptedUpstream(t *testing.T, call func(w http.ResponseWriter)) string {
	return scriptedResumes(t, func(w http.ResponseWriter, _ *jsonrpc.Request) { call(w) }, nil)
}

// scriptedResumes is scriptedUpstream whose call also gets the tools/call
// request, and whose answer to a GET with Last-Event-ID is written by
// resume (nil: 405, as to any GET).
func scriptedResumes(t *testing.T, call func(w http.ResponseWriter, req *jsonrpc.Request), resume func(w http.ResponseWriter, r *http.Request)) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			if resume != nil && r.Header.Get("Last-Event-ID") != "" {
				resume(w, r)
				return
			}
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
			return
		}
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.DecodeMessage(body)
		req, ok := m.(*jsonrpc.Request)
		if err != nil || !ok || !req.IsCall() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		result := json.RawMessage(`{}`)
		switch req.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "up-1")
			result = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"scripted","version":"1"}}`)
		case "tools/call":
			call(w, req)
			return
		}
		out, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Result: result})
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + "/mcp"
}

// sseHeader starts an SSE answer with a priming event whose ID is e1.
func sseHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, "id: e1\nretry: 50\ndata: \n\n")
	w.(http.Flusher).Flush()
}

// failedCall calls a tool through a gateway to up and returns the error
// message and reason of the call's answer.
func failedCall(t *testing.T, up string) (string, string) {
	ctx := testContext(t)
	g := newGateway(t, up, upstream.Options{ResumeTimeout: 2 * time.Second})
	s := g.initialize(t, ctx)
	evs := call(t, ctx, s, mcptest.ToolCall(2, "big", map[string]any{}, nil))
	r := response(t, evs)
	reason, gen := errorData(t, r)
	if gen != 1 {
		t.Errorf("generation %v, want 1", gen)
	}
	return r.Error.(*jsonrpc.Error).Message, reason
}

// TestUpstreamEventTooLarge: an upstream event over the gateway's limit on
// one message (16 MiB) fails the call at once with upstream_stream_cut and
// a message that names the limit, not a lack of event IDs (the events
// carry IDs) and not a resume (which would send the event again).
func TestUpstreamEventTooLarge(t *testing.T) {
	up := scriptedUpstream(t, func(w http.ResponseWriter) {
		sseHeader(w)
		io.WriteString(w, `id: e2`+"\n"+`data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`)
		io.WriteString(w, strings.Repeat("x", 20<<20))
		io.WriteString(w, "\"}}\n\n")
	})
	msg, reason := failedCall(t, up)
	want := "the upstream MCP server sent the call's stream an event over 16777216 bytes, the gateway's limit on one upstream message: " +
		"sse: event too large; the call fails (resuming would send the same event again): the answer must be smaller"
	if reason != string(replay.ReasonUpstreamStreamCut) || msg != want {
		t.Fatalf("call failed with %q %q, want %q %q", reason, msg, replay.ReasonUpstreamStreamCut, want)
	}
}

// TestUpstreamCutBeforeFirstEvent: an upstream answer stream that ends
// before its first event (a relay dropped the connection) cannot be
// resumed, for want of an event ID, whether or not the upstream's events
// carry IDs: the call fails with upstream_stream_cut, and the message says
// that, not that the events carry no IDs.
func TestUpstreamCutBeforeFirstEvent(t *testing.T) {
	up := scriptedUpstream(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	msg, reason := failedCall(t, up)
	want := "the call's upstream stream ended before its answer and before its first event, so there is no event ID to resume it from: " +
		"the stream ended before its first event: "
	if reason != string(replay.ReasonUpstreamStreamCut) || !strings.HasPrefix(msg, want) || strings.Contains(msg, "carry no IDs") {
		t.Fatalf("call failed with %q %q, want %q and a message starting %q", reason, msg, replay.ReasonUpstreamStreamCut, want)
	}
}

// TestCutResumeRefusedWithReason: the upstream's events carry IDs, the
// call's stream ends after its priming event, and the upstream refuses the
// resume with a 409 that gives a reason (as Tidemark does for a
// generation that is gone): that never changes, so the call fails with
// upstream_stream_cut after that one resume, not at Options.ResumeTimeout.
func TestCutResumeRefusedWithReason(t *testing.T) {
	var resumes atomic.Int32
	up := scriptedResumes(t, func(w http.ResponseWriter, _ *jsonrpc.Request) { sseHeader(w) }, func(w http.ResponseWriter, r *http.Request) {
		resumes.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"gone","data":{"reason":"generation_mismatch"}}}`)
	})
	ctx := testContext(t)
	g := newGateway(t, up, upstream.Options{ResumeTimeout: time.Hour})
	s := g.initialize(t, ctx)
	r := response(t, call(t, ctx, s, mcptest.ToolCall(2, "x", map[string]any{}, nil)))
	reason, _ := errorData(t, r)
	want := "the call's upstream stream was cut and the upstream MCP server refused to resume it: upstream answered GET with " +
		`Last-Event-ID with HTTP 409: {"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"gone","data":{"reason":"generation_mismatch"}}}`
	if msg := r.Error.(*jsonrpc.Error).Message; reason != string(replay.ReasonUpstreamStreamCut) || msg != want {
		t.Errorf("call failed with %q %q\nwant %q %q", reason, msg, replay.ReasonUpstreamStreamCut, want)
	}
	if n := resumes.Load(); n != 1 {
		t.Errorf("%d resumes, want 1", n)
	}
}

// TestCutResumeAfterRetryAfter: the upstream answers the first resume of a
// cut stream 503 with Retry-After 1, and the second, no sooner than a
// second later, with the rest of the stream: the call gets its answer.
func TestCutResumeAfterRetryAfter(t *testing.T) {
	var (
		mu      sync.Mutex
		id      jsonrpc.ID
		resumes []time.Time
	)
	up := scriptedResumes(t, func(w http.ResponseWriter, req *jsonrpc.Request) {
		mu.Lock()
		id = req.ID
		mu.Unlock()
		sseHeader(w)
	}, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		resumes = append(resumes, time.Now())
		n, callID := len(resumes), id
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		out, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: callID, Result: json.RawMessage(`{"content":[{"type":"text","text":"resumed"}]}`)})
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: e2\ndata: "+string(out)+"\n\n")
	})
	ctx := testContext(t)
	g := newGateway(t, up, upstream.Options{ResumeTimeout: 10 * time.Second})
	s := g.initialize(t, ctx)
	r := response(t, call(t, ctx, s, mcptest.ToolCall(2, "x", map[string]any{}, nil)))
	if got := toolText(t, r); got != "resumed" {
		t.Errorf("result %q, want resumed", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resumes) != 2 {
		t.Fatalf("%d resumes, want 2", len(resumes))
	}
	if d := resumes[1].Sub(resumes[0]); d < time.Second {
		t.Errorf("second resume %v after a 503 with Retry-After 1, want at least 1s", d)
	}
}

// TestUpstreamAnswerNeitherJSONNorSSE: an upstream that answers a call
// with a 2xx whose body is neither application/json nor text/event-stream
// (a web page, plain text, a body without Content-Type), or with 202 and a
// body, fails the call with upstream_error and a message that says what
// came (status, Content-Type, size) and what to check; never that no body
// came.
func TestUpstreamAnswerNeitherJSONNorSSE(t *testing.T) {
	const check = ": an MCP server answers a request with application/json or text/event-stream " +
		"(MCP 2025-11-25, basic/transports); check that --upstream names the MCP endpoint of a running server"
	for _, tc := range []struct {
		name   string
		status int
		ctype  string // "": none
		body   string
		want   string
	}{
		{"text/plain", http.StatusOK, "text/plain", "hello",
			"the upstream MCP server answered the call with HTTP 200 with Content-Type text/plain, 5 bytes, not JSON or SSE" + check},
		{"html page", http.StatusOK, "text/html; charset=utf-8", "<html>a page</html>",
			"the upstream MCP server answered the call with HTTP 200 with Content-Type text/html, 19 bytes, not JSON or SSE" + check},
		{"no Content-Type", http.StatusOK, "", "hello",
			"the upstream MCP server answered the call with HTTP 200 with no Content-Type, 5 bytes, not JSON or SSE" + check},
		{"202 with a body", http.StatusAccepted, "application/json", "{}",
			"the upstream MCP server accepted the call without answering it (HTTP 202 with Content-Type application/json, 2 bytes)" + check},
		{"200 without a body", http.StatusOK, "", "",
			"the upstream MCP server accepted the call without answering it (HTTP 200, no body)" + check},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := scriptedUpstream(t, func(w http.ResponseWriter) {
				w.Header()["Content-Type"] = nil // no sniffing: only what the case sets
				if tc.ctype != "" {
					w.Header().Set("Content-Type", tc.ctype)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			msg, reason := failedCall(t, up)
			if reason != string(replay.ReasonUpstreamError) || msg != tc.want {
				t.Errorf("call failed with %q %q\nwant %q %q", reason, msg, replay.ReasonUpstreamError, tc.want)
			}
		})
	}
}
