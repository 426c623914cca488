package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

const (
	// steps and cutAfter: countdown sends steps progress notifications;
	// the proxy cuts the POST stream right after the cutAfter-th.
	steps    = 50
	cutAfter = 10
	// wantResult is the countdown tool's text for steps steps.
	wantResult = "countdown of 50 finished"
	// clientTimeout bounds one client run; the countdown itself takes
	// steps × 20 ms = 1 s plus one reconnection.
	clientTimeout = 60 * time.Second
)

// progress is one progress notification as a client reported it.
type progress struct {
	Progress float64 `json:"progress"`
	Total    float64 `json:"total"`
}

// outcome is what a client saw of one countdown call.
type outcome struct {
	progress []progress
	results  []string // text of each tool result received
}

// TestTypeScriptClientResumesCountdown runs the official TypeScript SDK
// client (interop/ts/countdown.mjs) against `tidemark serve` through a
// proxy that cuts the tool call's stream after the 10th progress
// notification: the client must resume with Last-Event-ID and see every
// notification exactly once, in order, then the result once.
func TestTypeScriptClientResumesCountdown(t *testing.T) {
	testenv.NeedNode(t)
	env := startBehindCutter(t)
	node := testenv.Node(t)
	script := testenv.NodeScript(t, "ts/countdown.mjs")
	client := testenv.StartProcess(t, node, script, env.url)
	select {
	case <-client.Done():
	case <-time.After(clientTimeout):
		t.Fatalf("countdown.mjs still running after %v", clientTimeout)
	}
	if err := client.Wait(); err != nil {
		t.Fatalf("countdown.mjs: %v", err)
	}
	var got outcome
	for line := range strings.SplitSeq(client.Output(), "\n") {
		var msg struct {
			Progress       *float64 `json:"progress"`
			Total          float64  `json:"total"`
			Result         *string  `json:"result"`
			IsError        bool     `json:"isError"`
			TransportError string   `json:"transportError"`
		}
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &msg) != nil {
			continue // not a report line: Node.js diagnostics
		}
		switch {
		case msg.Progress != nil:
			got.progress = append(got.progress, progress{*msg.Progress, msg.Total})
		case msg.Result != nil:
			if msg.IsError {
				t.Errorf("tool result is an error: %q", *msg.Result)
			}
			got.results = append(got.results, *msg.Result)
		case msg.TransportError != "":
			t.Logf("transport reported: %s", msg.TransportError)
		}
	}
	env.check(t, got)
}

// TestGoClientResumesCountdown is TestTypeScriptClientResumesCountdown
// with the official Go SDK client (mcp.StreamableClientTransport).
func TestGoClientResumesCountdown(t *testing.T) {
	env := startBehindCutter(t)
	var (
		mu  sync.Mutex
		got outcome
	)
	client := mcp.NewClient(&mcp.Implementation{Name: "tidemark-interop-go", Version: "1.0.0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got.progress = append(got.progress, progress{req.Params.Progress, req.Params.Total})
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), clientTimeout)
	defer cancel()
	// An own HTTP transport, so its connections end with the test.
	httpClient := &http.Client{Transport: &http.Transport{}}
	defer httpClient.CloseIdleConnections()
	// Resumable streams belong to the session era: go-sdk v1.8.0 defaults to
	// the sessionless 2026-07-28, whose streams cannot be resumed (SEP-2575).
	cs, err := client.Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: env.url, HTTPClient: httpClient, MaxRetries: 5},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": steps, "delay_ms": 20}}
	params.SetProgressToken("interop-go")
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("call countdown: %v", err)
	}
	if res.IsError {
		t.Errorf("tool result is an error: %+v", res.Content)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	mu.Lock()
	got.results = append(got.results, text.String())
	mu.Unlock()
	if err := cs.Close(); err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("close session: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	env.check(t, got)
}

// env is a `tidemark serve` behind a proxy that cuts one stream.
type env struct {
	url    string // the MCP endpoint, through the proxy
	server *testenv.Process
	proxy  *faultproxy.Proxy
	cut    *cutter
}

// startBehindCutter starts `tidemark serve` on a free port with a 100 ms
// SSE retry field and a proxy in front of it that cuts the connection
// right after the cutAfter-th notifications/progress event.
func startBehindCutter(t *testing.T) *env {
	t.Helper()
	server := testenv.StartProcess(t, testenv.BuildTidemark(t), "serve", "--addr", "127.0.0.1:0", "--retry", "100ms")
	u, err := url.Parse(testenv.ServeURL(t, server))
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{pending: make(map[int][]byte)}
	proxy, err := faultproxy.New(u.Host, c.filter)
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	return &env{url: u.String(), server: server, proxy: proxy, cut: c}
}

// resumedRE matches the transport's log line for an accepted resumption
// and captures the client's cursor.
var resumedRE = regexp.MustCompile(`msg="stream resumed".* cursor="?([^\s"]+)"?`)

// check asserts the client's outcome and that the resumption happened as
// the test arranged: one cut after progress 10, one resumed stream whose
// Last-Event-ID is the cursor of the last event that got through.
func (e *env) check(t *testing.T, got outcome) {
	t.Helper()
	if len(got.progress) != steps {
		t.Errorf("got %d progress notifications, want %d: %v", len(got.progress), steps, got.progress)
	}
	for i, p := range got.progress {
		if want := (progress{float64(i + 1), steps}); p != want {
			t.Errorf("progress notification %d is %+v, want %+v (later ones not compared)", i+1, p, want)
			break
		}
	}
	if len(got.results) != 1 || got.results[0] != wantResult {
		t.Errorf("got results %q, want exactly [%q]", got.results, wantResult)
	}

	cuts, cursor, cutProgress, cutConn := e.cut.report()
	if cuts != 1 {
		t.Fatalf("the proxy cut %d connections, want 1 (it cuts after progress event %d)", cuts, cutAfter)
	}
	if cutProgress != cutAfter {
		t.Errorf("the event the proxy cut after carries progress %v, want %d", cutProgress, cutAfter)
	}
	// The resumption is logged before the replayed events are written, so
	// it is there once the client has its result; WaitFor only covers the
	// pipe between the server and this test.
	e.server.WaitFor(t, `msg="stream resumed"`, 5*time.Second)
	var resumed []string
	for _, m := range resumedRE.FindAllStringSubmatch(e.server.Output(), -1) {
		resumed = append(resumed, m[1])
	}
	if len(resumed) != 1 || resumed[0] != cursor {
		t.Errorf("server resumed streams at cursors %q, want exactly [%q] (the last event before the cut)", resumed, cursor)
	}
	t.Logf("cut connection %d after cursor %s; the proxy accepted %d connections", cutConn, cursor, e.proxy.Conns())
}

// cutter is a faultproxy.Filter that watches the SSE events the server
// sends on every connection and, once, cuts the connection right after the
// end of the cutAfter-th notifications/progress event. Events are found by
// their blank-line terminator in the raw bytes (chunked transfer encoding
// frames whole events, as the server flushes each write).
type cutter struct {
	mu          sync.Mutex
	pending     map[int][]byte // per connection: bytes after its last complete event
	progress    int            // progress events seen, all connections
	cuts        int
	cursor      string  // id of the event cut after
	cutProgress float64 // its params.progress
	cutConn     int
}

func (c *cutter) filter(conn int, chunk []byte) faultproxy.Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cuts > 0 {
		return faultproxy.Decision{Forward: len(chunk)}
	}
	prefix := len(c.pending[conn])
	buf := append(c.pending[conn], chunk...)
	start := 0
	for {
		i := bytes.Index(buf[start:], []byte("\n\n"))
		if i < 0 {
			break
		}
		end := start + i + 2
		event := buf[start:end]
		start = end
		if !bytes.Contains(event, []byte(`"method":"notifications/progress"`)) {
			continue
		}
		c.progress++
		if c.progress < cutAfter {
			continue
		}
		c.cuts++
		c.cutConn = conn
		c.cursor, c.cutProgress = parseProgress(event)
		delete(c.pending, conn)
		return faultproxy.Decision{Forward: end - prefix, Cut: true}
	}
	c.pending[conn] = bytes.Clone(buf[start:])
	return faultproxy.Decision{Forward: len(chunk)}
}

// parseProgress returns the id and params.progress of a raw SSE event
// carrying a progress notification, zero values when it does not parse.
func parseProgress(raw []byte) (string, float64) {
	// Anything before the event's first field (HTTP headers, a chunk
	// size line) is not part of it.
	if i := bytes.Index(raw, []byte("id:")); i > 0 {
		raw = raw[i:]
	}
	ev, err := sse.NewReader(bytes.NewReader(raw), 0).Next()
	if err != nil {
		return "", 0
	}
	var msg struct {
		Params struct {
			Progress float64 `json:"progress"`
		} `json:"params"`
	}
	if err := json.Unmarshal(ev.Data, &msg); err != nil {
		return ev.ID, 0
	}
	return ev.ID, msg.Params.Progress
}

func (c *cutter) report() (cuts int, cursor string, cutProgress float64, conn int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cuts, c.cursor, c.cutProgress, c.cutConn
}
