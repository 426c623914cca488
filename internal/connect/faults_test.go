package connect_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// errorData is error.data of an error answer the bridge made.
type errorData struct {
	Reason string `json:"reason"`
}

// wantFailure requires r to be the bridge's -32603 error answer with
// error.data.reason reason and a message containing say.
func wantFailure(t *testing.T, r *jsonrpc.Response, reason replay.Reason, say string) {
	t.Helper()
	if r.Error == nil {
		t.Fatalf("answer %s, want error with reason %s", r.Result, reason)
	}
	var we *jsonrpc.Error
	if !errors.As(r.Error, &we) {
		t.Fatalf("error %v is not a JSON-RPC error", r.Error)
	}
	var d errorData
	json.Unmarshal(we.Data, &d)
	if we.Code != jsonrpc.CodeInternalError || d.Reason != reason.String() {
		t.Errorf("error code %d reason %q, want %d %q (%s)", we.Code, d.Reason, jsonrpc.CodeInternalError, reason, we.Data)
	}
	if !strings.Contains(we.Message, say) {
		t.Errorf("error message %q does not say %q", we.Message, say)
	}
}

// TestSilentServerAtStart: toward a server that accepts connections but
// never answers, the host's initialize fails with server_unreachable once
// the start timeout has passed, and Run returns an error wrapping
// ErrUnreachable, as toward a server that refuses connections. With
// --protocol auto, the server/discover probe is bounded by the start
// timeout too, not by its own 5 s.
func TestSilentServerAtStart(t *testing.T) {
	for _, protocol := range []string{connect.ProtocolStateful, connect.ProtocolAuto} {
		t.Run(protocol, func(t *testing.T) { silentServerAtStart(t, protocol) })
	}
}

func silentServerAtStart(t *testing.T, protocol string) {
	url := testenv.SilentServer(t, "/mcp")
	start := time.Now()
	toBridge, hostOut := io.Pipe()
	fromBridge, bridgeOut := io.Pipe()
	conn, err := (&mcp.IOTransport{Reader: toBridge, Writer: bridgeOut}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- connect.Run(context.Background(), conn, connect.Options{URL: url, Protocol: protocol,
			StartTimeout: 200 * time.Millisecond, ResumeTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		conn.Close()
		bridgeOut.Close()
	}()
	h := &hostSide{t: t, out: hostOut, in: make(chan jsonrpc.Message, 16)}
	go func() {
		defer close(h.in)
		sc := bufio.NewScanner(fromBridge)
		for sc.Scan() {
			if m, err := jsonrpc.DecodeMessage(sc.Bytes()); err == nil {
				h.in <- m
			}
		}
	}()
	defer hostOut.Close()
	h.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`)
	r, _ := h.answer("init")
	wantFailure(t, r, replay.ReasonServerUnreachable, "did not answer initialize")
	// Each bounded wait is 200 ms; the probe's own bound is 5 s.
	if waited := time.Since(start); waited >= 4*time.Second {
		t.Errorf("the host's initialize failed after %v, want within the start timeout of the probe and of initialize", waited)
	}
	select {
	case err := <-done:
		if !errors.Is(err, connect.ErrUnreachable) || !strings.Contains(err.Error(), ": client: initialize id init: stream lost: client: no answer from the server within 200ms") {
			t.Errorf("Run: %v, want an error wrapping ErrUnreachable that names the missing answer", err)
		}
	case <-time.After(hostTimeout):
		t.Fatal("Run still runs after the host's initialize failed")
	}
}

// callMethod returns the method of a POSTed message r, restoring its body.
func callMethod(r *http.Request) string {
	if req, ok := postedRequest(r); ok {
		return req.Method
	}
	return ""
}

// silentOnCalls serves what h serves, but takes each tools/call POST and
// never answers it, as a stopped server does.
func silentOnCalls(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && callMethod(r) == "tools/call" {
			<-r.Context().Done()
			return
		}
		h.ServeHTTP(w, r)
	})
}

// TestSilentServerMidSession: a server that takes a call's POST and sends
// no answer headers (stopped, SIGSTOP) fails the call with stream_lost
// within the resume timeout, saying it may or may not have run; the
// bridge stays up.
func TestSilentServerMidSession(t *testing.T) {
	srv := serve(t, demo.NewServer(), silentOnCalls)
	h := startBridge(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful, ResumeTimeout: 200 * time.Millisecond})
	h.initialize(`{}`)
	h.send(`{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
	r, _ := h.answer("call")
	wantFailure(t, r, replay.ReasonStreamLost, "may or may not have run")
	h.send(`{"jsonrpc":"2.0","id":"ping","method":"ping"}`)
	if r, _ := h.answer("ping"); r.Error != nil {
		t.Errorf("ping after the failed call: %v", r.Error)
	}
}

// TestSilentServerLogsMayHaveRun: the WARN line of a call whose POST the
// server took and never answered says it was sent and may have run, as
// the host's error does, never that it failed before the server took it.
func TestSilentServerLogsMayHaveRun(t *testing.T) {
	srv := serve(t, demo.NewServer(), silentOnCalls)
	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful, ResumeTimeout: 200 * time.Millisecond}, logger)
	host.send(rawInitialize)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
	host.answers(`"call"`)
	deadline := time.Now().Add(2 * time.Second) // the line follows the host's answer
	for !strings.Contains(logs.String(), "connect: call ") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	out := logs.String()
	if !strings.Contains(out, `msg="connect: call failed after it was sent; it may have run"`) || strings.Contains(out, "before the server took it") {
		t.Errorf("the log does not say the call was sent and may have run:\n%s", out)
	}
}

// TestServerGoneMidCall: a call whose stream delivered progress and then
// broke, the server gone (no connection can be made), fails with
// stream_lost and a message saying it may or may not have run, never
// server_unreachable's "was not sent".
func TestServerGoneMidCall(t *testing.T) {
	var srv *httptest.Server
	srv = serve(t, demo.NewServer(), func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && callMethod(r) == "tools/call" {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				io.WriteString(w, "id: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n")
				w.(http.Flusher).Flush()
				srv.Listener.Close() // the server dies: no more connections
				panic(http.ErrAbortHandler)
			}
			h.ServeHTTP(w, r)
		})
	})
	h := startBridge(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful, ResumeTimeout: 300 * time.Millisecond,
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	h.initialize(`{}`)
	h.send(`{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"progressToken":"p"}}}`)
	r, before := h.answer("call")
	progress := 0
	for _, m := range before {
		if n, ok := m.(*jsonrpc.Request); ok && n.Method == "notifications/progress" {
			progress++
		}
	}
	if progress != 1 {
		t.Errorf("the host got %d progress notifications before the error, want 1", progress)
	}
	wantFailure(t, r, replay.ReasonStreamLost, "may or may not have run")
}
