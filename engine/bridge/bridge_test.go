package bridge_test

// Tests of the bridge as the stdio gateway uses it: Tidemark's handler over
// the stdio engine, with the bridge serving sessionless requests through
// one more subprocess, on real HTTP on loopback, in front of real stdio MCP
// servers: the go-sdk's conformance everything-server (it speaks
// 2026-07-28) and the TypeScript reference server-everything (it speaks
// 2025-11-25 at most).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine/bridge"
	"github.com/tidemark-mcp/tidemark/engine/stdio"
	"github.com/tidemark-mcp/tidemark/internal/listentest"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
	"github.com/tidemark-mcp/tidemark/transport"
)

// wait bounds each call and each wait for a notification.
const wait = 30 * time.Second

// everythingServer is the go-sdk's conformance server, run in stdio mode.
const everythingServer = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server@v1.8.0"

// goEverything installs the go-sdk's everything-server into a directory of
// the test and returns its path.
func goEverything(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	install := exec.Command("go", "install", everythingServer)
	install.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", everythingServer, err, out)
	}
	return filepath.Join(bin, "everything-server")
}

// tsEverything returns the command of the TypeScript server-everything in
// stdio mode.
func tsEverything(t *testing.T) []string {
	t.Helper()
	testenv.NeedNode(t)
	return []string{testenv.Node(t), testenv.NPMBin(t, "mcp-server-everything"), "stdio"}
}

// gateway is a stdio gateway served on loopback.
type gateway struct {
	url    string
	engine *stdio.Engine
	logs   *testenv.LogBuffer
}

// startGateway serves command through the stdio engine (at most
// maxProcesses subprocesses; 0: the default) and a bridge with sealer, as
// `tidemark serve --stdio` wires them, behind wrap (nil: none).
func startGateway(t *testing.T, command []string, maxProcesses int, sealer *requeststate.Sealer, wrap func(http.Handler) http.Handler) *gateway {
	t.Helper()
	return startWatchedGateway(t, command, maxProcesses, sealer, wrap, nil)
}

// startWatchedGateway is startGateway whose bridge writes every message
// it exchanges with the backend to wire, when not nil.
func startWatchedGateway(t *testing.T, command []string, maxProcesses int, sealer *requeststate.Sealer, wrap func(http.Handler) http.Handler, wire io.Writer) *gateway {
	t.Helper()
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	eng, err := stdio.New(stdio.Options{Command: command[0], Args: command[1:], MaxProcesses: maxProcesses, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	dial := bridge.EngineTransport(eng, "bridge", logger)
	if wire != nil {
		engineDial := dial
		dial = func() mcp.Transport { return &mcp.LoggingTransport{Transport: engineDial(), Writer: wire} }
	}
	br := bridge.New(bridge.Options{
		Dial: dial, Sealer: sealer, Logger: logger,
		HTTP: mcp.StreamableHTTPOptions{DisableLocalhostProtection: true},
	})
	h := tidemark.NewEngineHandler(eng, &tidemark.Options{Transport: transport.Options{Logger: logger, Sessionless: br}})
	var root http.Handler = h
	if wrap != nil {
		root = wrap(h)
	}
	srv := httptest.NewServer(root)
	t.Cleanup(func() {
		srv.Close()
		br.Close()
		eng.Close()
		h.Close()
	})
	return &gateway{url: srv.URL, engine: eng, logs: logs}
}

// connect connects a go-sdk client at its default revision (2026-07-28) to
// url, as the holder of header, with opts (nil: none), and checks that it
// negotiated 2026-07-28.
func connect(t *testing.T, url string, header http.Header, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: headerTransport{header, &http.Transport{}}}
	t.Cleanup(hc.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bridge-test", Version: "1.0.0"}, opts).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != "2026-07-28" {
		t.Fatalf("negotiated %s, want 2026-07-28", got)
	}
	return cs
}

type headerTransport struct {
	header http.Header
	base   http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header[k] = v
	}
	return h.base.RoundTrip(r)
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// progressRecorder returns client options that record the progress
// values of the calls under the token "mine", and a function returning
// them once there are n, or after wait. The go-sdk client may hand a call
// its result before it has handled the notifications that preceded it, so
// the function waits.
func progressRecorder(opts *mcp.ClientOptions) (*mcp.ClientOptions, func(n int) []float64) {
	var mu sync.Mutex
	var got []float64
	arrived := make(chan struct{}, 1)
	if opts == nil {
		opts = &mcp.ClientOptions{}
	}
	opts.ProgressNotificationHandler = func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		if req.Params.ProgressToken == "mine" {
			got = append(got, req.Params.Progress)
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
	}
	return opts, func(n int) []float64 {
		deadline := time.After(wait)
		for {
			mu.Lock()
			out := slices.Clone(got)
			mu.Unlock()
			if len(out) >= n {
				return out
			}
			select {
			case <-arrived:
			case <-deadline:
				return out
			}
		}
	}
}

// listen connects a go-sdk client (2026-07-28) to url that listens for
// list changes and for updates of uri, and returns what it hears and its
// session.
func listen(t *testing.T, ctx context.Context, url, uri string) (*listentest.Recorder, *mcp.ClientSession) {
	t.Helper()
	rec := listentest.New()
	c := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1.0.0"}, rec.Options())
	rec.Watch(c)
	ls, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	if err := ls.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	return rec, ls
}

// TestModernBackend: a backend that speaks 2026-07-28 gets the client's
// requests with their _meta, so its input-required results reach the
// client; the bridge relays progress under the client's token, and a
// listener's subscription hears the backend's resource updates.
func TestModernBackend(t *testing.T) {
	g := startGateway(t, []string{goEverything(t)}, 0, nil, nil)
	opts, progress := progressRecorder(nil)
	cs := connect(t, g.url, nil, opts)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_simple_text"})
	if err != nil || text(res) != "This is a simple text response for testing." {
		t.Fatalf("test_simple_text: %v, %+v", err, res)
	}
	p := &mcp.CallToolParams{Name: "test_tool_with_progress"}
	p.SetProgressToken("mine")
	if _, err := cs.CallTool(ctx, p); err != nil {
		t.Fatalf("test_tool_with_progress: %v", err)
	}
	if got := progress(3); !slices.Equal(got, []float64{0, 50, 100}) {
		t.Errorf("progress under the client's token: %v, want [0 50 100]", got)
	}
	// The client's elicitation capability reaches the backend in _meta,
	// which asks through an input-required result.
	answers := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
	}}
	res, err = connect(t, g.url, nil, answers).CallTool(ctx, &mcp.CallToolParams{Name: "test_input_required_result_elicitation"})
	if err != nil || text(res) != "Hello, Ada!" {
		t.Errorf("input-required elicitation: %v, %+v; want \"Hello, Ada!\"", err, res)
	}

	rec, _ := listen(t, ctx, g.url, "test://watched-resource")
	// The backend updates its watched resource every 3 seconds.
	rec.WaitFor(t, listentest.Key(listentest.ResourceUpdated, "test://watched-resource"), 1, wait)
}

// TestStatefulBackend: a backend of 2025-11-25 is initialized once and
// serves the sessionless clients' calls; progress comes back under each
// client's own token although every client used the same; a listener's
// subscription becomes the backend's resources/subscribe, whose updates
// the listener hears.
func TestStatefulBackend(t *testing.T) {
	g := startGateway(t, tsEverything(t), 0, nil, nil)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 2 {
		opts, progress := progressRecorder(nil)
		cs := connect(t, g.url, nil, opts)
		wg.Go(func() {
			p := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 0.4, "steps": 4}}
			p.SetProgressToken("mine")
			res, err := cs.CallTool(ctx, p)
			if err != nil || !strings.HasPrefix(text(res), "Long running operation completed.") {
				t.Errorf("client %d: long-running operation: %v, %+v", i, err, res)
			}
			if got := progress(4); !slices.Equal(got, []float64{1, 2, 3, 4}) {
				t.Errorf("client %d: progress %v, want [1 2 3 4]", i, got)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(g.logs.String(), `msg="subprocess started" session=bridge`); n != 1 {
		t.Errorf("%d subprocesses started for sessionless requests, want 1", n)
	}
	if !strings.Contains(g.logs.String(), `msg="connected to the backend for sessionless requests" connection=1 protocol=2025-11-25`) {
		t.Errorf("the backend was not initialized at 2025-11-25; log:\n%s", g.logs.String())
	}

	const uri = "demo://resource/static/document/architecture.md"
	rec, ls := listen(t, ctx, g.url, uri)
	rec.WaitFor(t, listentest.Acknowledged, 1, wait)
	if res, err := ls.CallTool(ctx, &mcp.CallToolParams{Name: "toggle-subscriber-updates"}); err != nil || res.IsError {
		t.Fatalf("toggle-subscriber-updates: %v, %+v", err, res)
	}
	// The backend sends its simulated updates every 5 seconds.
	rec.WaitFor(t, listentest.Key(listentest.ResourceUpdated, uri), 1, wait)
}

// keys is a key ring file the sealing tests share (32 bytes of 0x02).
func keys(t *testing.T) *requeststate.Sealer {
	t.Helper()
	ring, err := requeststate.ParseRing("AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=")
	if err != nil {
		t.Fatal(err)
	}
	return requeststate.New(ring, requeststate.Options{})
}

// users puts the go-sdk's bearer-token middleware in front: the tokens
// "alice" and "bob" are the users of that name.
func users(h http.Handler) http.Handler {
	return auth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token == "alice" || token == "bob" {
			return &auth.TokenInfo{UserID: token, Expiration: time.Now().Add(time.Hour)}, nil
		}
		return nil, auth.ErrInvalidToken
	}, nil)(h)
}

// TestSealedState: the backend's requestState reaches the client sealed;
// the retry, on another gateway with the same key ring, reaches the
// backend with the backend's own state and completes; the backend's plain
// state, a tampered state and another user's state are refused with their
// reasons before they reach the backend.
func TestSealedState(t *testing.T) {
	bin := goEverything(t)
	a := startGateway(t, []string{bin}, 0, keys(t), users)
	b := startGateway(t, []string{bin}, 0, keys(t), users)
	alice := http.Header{"Authorization": {"Bearer alice"}}
	bob := http.Header{"Authorization": {"Bearer bob"}}
	manual := &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	const tool = "test_input_required_result_request_state"
	first, err := connect(t, a.url, alice, manual).CallTool(ctx, &mcp.CallToolParams{Name: tool})
	if err != nil || !first.NeedsInput() {
		t.Fatalf("first round: %v, %+v; want an input-required result", err, first)
	}
	if first.RequestState == "" || first.RequestState == "request_state" {
		t.Fatalf("requestState %q, want a sealed state in place of the backend's \"request_state\"", first.RequestState)
	}
	retry := func(url string, header http.Header, state string) (*mcp.CallToolResult, error) {
		return connect(t, url, header, manual).CallTool(ctx, &mcp.CallToolParams{
			Name: tool, RequestState: state,
			InputResponses: mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}},
		})
	}
	res, err := retry(b.url, alice, first.RequestState)
	if err != nil || text(res) != "state-ok: requestState received and confirmation accepted" {
		t.Errorf("retry on the other gateway: %v, %+v", err, res)
	}
	tampered := []byte(first.RequestState)
	tampered[len(tampered)/2] ^= 1
	for _, tc := range []struct {
		name   string
		header http.Header
		state  string
		reason replay.Reason
	}{
		{"the backend's own state", alice, "request_state", replay.ReasonStateInvalid},
		{"a tampered state", alice, string(tampered), replay.ReasonStateInvalid},
		{"Alice's state sent by Bob", bob, first.RequestState, replay.ReasonStatePrincipalMismatch},
	} {
		_, err := retry(b.url, tc.header, tc.state)
		var wire *jsonrpc.Error
		if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInvalidParams || requeststate.ReasonOf(err) != tc.reason {
			t.Errorf("%s: %v, want JSON-RPC error -32602 with reason %s", tc.name, err, tc.reason)
		}
	}
}

// TestBackendExit: a call in flight when the backend's process dies fails
// with reason server_exited; the next request starts a new process.
func TestBackendExit(t *testing.T) {
	g := startGateway(t, tsEverything(t), 0, nil, nil)
	opts, progress := progressRecorder(nil)
	cs := connect(t, g.url, nil, opts)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 20, "steps": 40}}
		p.SetProgressToken("mine")
		_, err := cs.CallTool(ctx, p)
		errc <- err
	}()
	pid := bridgePid(t, g, 1)
	if got := progress(1); len(got) == 0 { // the call is running on the backend
		t.Fatalf("no progress from the call within %v", wait)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInternalError || !strings.Contains(string(wire.Data), `"reason":"server_exited"`) {
		t.Errorf("call in flight: %v, want JSON-RPC error -32603 with reason server_exited", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "again"}})
	if err != nil || text(res) != "Echo: again" {
		t.Fatalf("echo after the backend died: %v, %+v", err, res)
	}
	bridgePid(t, g, 2)
}

// bridgePid returns the pid of the gen-th subprocess the bridge started,
// waiting for the log line that names it.
func bridgePid(t *testing.T, g *gateway, gen int) int {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`msg="subprocess started" session=bridge generation=%d pid=(\d+)`, gen))
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(g.logs.String()); m != nil {
			pid, _ := strconv.Atoi(m[1])
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no subprocess %d of the bridge started; log:\n%s", gen, g.logs.String())
	return 0
}

// TestCapacity: with every allowed subprocess held by a session, a
// sessionless request is refused with 503, reason capacity, Retry-After.
func TestCapacity(t *testing.T) {
	g := startGateway(t, tsEverything(t), 1, nil, nil)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	held, err := mcp.NewClient(&mcp.Implementation{Name: "holder", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	body := `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "server/discover")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(b.String(), `"reason":"capacity"`) {
		t.Errorf("sessionless request at capacity: %d, Retry-After %q, body %s; want 503, 1, reason capacity", resp.StatusCode, resp.Header.Get("Retry-After"), b.String())
	}
}

// TestToolChangeHeardOnce: a change of the backend's tools reaches a
// listener once. The bridge mirrors the changed tools on its own server,
// and that server's own list-change notification must not reach the
// listener besides the one relayed from the backend.
func TestToolChangeHeardOnce(t *testing.T) {
	g := startGateway(t, []string{goEverything(t)}, 0, nil, nil)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	rec, _ := listen(t, ctx, g.url, "test://watched-resource")
	rec.WaitFor(t, listentest.Acknowledged, 1, wait)
	cs := connect(t, g.url, nil, nil)
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_trigger_tool_change"}); err != nil || res.IsError {
		t.Fatalf("test_trigger_tool_change: %v, %+v", err, res)
	}
	rec.WaitFor(t, listentest.ToolsChanged, 1, wait)
	time.Sleep(listentest.Settle)
	if n := rec.Count(listentest.ToolsChanged); n != 1 {
		t.Errorf("the listener heard the tools change %d times, want 1; heard: %s", n, rec)
	}
}

// TestLastListenerUnsubscribesBackend: when the last listener naming a
// URI goes away, the backend of 2025-11-25 gets its resources/unsubscribe
// and answers it. The go-sdk calls the unsubscribe handler with the listen
// request's context, which has ended by then.
func TestLastListenerUnsubscribesBackend(t *testing.T) {
	wire := &testenv.LogBuffer{}
	g := startWatchedGateway(t, tsEverything(t), 0, nil, nil, wire)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	const uri = "demo://resource/static/document/architecture.md"
	rec, ls := listen(t, ctx, g.url, uri)
	rec.WaitFor(t, listentest.Acknowledged, 1, wait)
	if err := ls.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	unsubscribed := regexp.MustCompile(`write: \{"jsonrpc":"2.0","id":(\d+),"method":"resources/unsubscribe","params":\{"uri":"` + regexp.QuoteMeta(uri) + `"\}\}`)
	// The backend's answer is read after the request is written: both
	// must come within wait.
	deadline := time.Now().Add(wait)
	for {
		m := unsubscribed.FindStringSubmatch(wire.String())
		if m != nil && strings.Contains(wire.String(), `read: {"jsonrpc":"2.0","id":`+m[1]+`,"result":{}}`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no resources/unsubscribe reached the backend and was answered in %v; wire:\n%s\nlog:\n%s", wait, wire, g.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(g.logs.String(), "unsubscribing the backend failed") {
		t.Errorf("the gateway logged a failed unsubscribe:\n%s", g.logs)
	}
}

// TestListenerLeavingDuringSubscribe: a listener that goes away while the
// backend's resources/subscribe for its URI is on its way still leaves
// the backend unsubscribed: every URI the backend was subscribed to is
// unsubscribed once the listeners are gone. The failing input (a
// tester's): ten listeners each gone i ms after they asked, and the
// backend kept 3 to 7 of the ten subscriptions.
func TestListenerLeavingDuringSubscribe(t *testing.T) {
	wire := &testenv.LogBuffer{}
	g := startWatchedGateway(t, tsEverything(t), 0, nil, nil, wire)
	c := &mcptest.Client{URL: g.url, HTTP: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(c.HTTP.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	// A first listener connects the bridge to the backend, so that the
	// others' subscribes race their leaving, not the connection.
	if _, _, err := c.Listen(ctx, mcptest.SessionlessBody(1, "subscriptions/listen",
		map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{"test://first"}}}, nil)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			lctx, leave := context.WithTimeout(ctx, time.Duration(i)*time.Millisecond)
			defer leave()
			body := mcptest.SessionlessBody(int64(i+2), "subscriptions/listen",
				map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{fmt.Sprintf("test://race/%d", i)}}}, nil)
			if resp, _, err := c.Listen(lctx, body); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	count := func(method string, i int) int {
		return strings.Count(wire.String(), fmt.Sprintf(`"method":"%s","params":{"uri":"test://race/%d"}`, method, i))
	}
	deadline := time.Now().Add(wait)
	for i := 0; i < 10; {
		sub, unsub := count("resources/subscribe", i), count("resources/unsubscribe", i)
		if sub == unsub {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("test://race/%d: the backend got %d subscribe and %d unsubscribe once its listener was gone; wire:\n%s", i, sub, unsub, wire)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
