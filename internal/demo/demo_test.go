package demo_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// clientTimeout bounds one client's calls against a server process.
const clientTimeout = 60 * time.Second

// startServe starts `tidemark serve` on a free loopback port with args and
// returns the process and its endpoint URL.
func startServe(t *testing.T, args ...string) (*testenv.Process, string) {
	t.Helper()
	p := testenv.StartProcess(t, testenv.BuildTidemark(t), append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	return p, testenv.ServeURL(t, p)
}

// connect connects the go-sdk client to url at protocol version (""
// for the client's default) with opts, over an HTTP client of its own that
// sends header with every request, through base (default: a fresh
// http.Transport).
func connect(t *testing.T, url, version string, header http.Header, opts *mcp.ClientOptions, base ...http.RoundTripper) *mcp.ClientSession {
	t.Helper()
	var rt http.RoundTripper = &http.Transport{}
	if len(base) > 0 {
		rt = base[0]
	}
	httpClient := &http.Client{Transport: headerTransport{header, rt}}
	t.Cleanup(httpClient.CloseIdleConnections)
	var sopts *mcp.ClientSessionOptions
	if version != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	ctx, cancel := context.WithTimeout(t.Context(), clientTimeout)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tidemark-demo-test", Version: "1.0.0"}, opts).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: httpClient}, sopts)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
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

// answering returns client options whose elicitation handler answers every
// question with action and content, and records the questions asked.
func answering(action string, content map[string]any) (*mcp.ClientOptions, func() []string) {
	var mu sync.Mutex
	var asked []string
	opts := &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, req.Params.Message)
			return &mcp.ElicitResult{Action: action, Content: content}, nil
		},
	}
	return opts, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// rotate is an http.RoundTripper that sends each request to the next of
// its hosts in turn, as a load balancer without affinity would.
type rotate struct {
	mu    sync.Mutex
	next  int
	hosts []string
	base  http.RoundTripper
}

func (r *rotate) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	host := r.hosts[r.next%len(r.hosts)]
	r.next++
	r.mu.Unlock()
	req = req.Clone(req.Context())
	req.URL.Host, req.Host = host, host
	return r.base.RoundTrip(req)
}

// startFleet starts a redis-server and n `tidemark serve --redis`
// replicas sharing it and a key ring, each with extra flags, and returns
// their endpoints.
func startFleet(t *testing.T, n int, extra ...string) []string {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	keys := writeKeys(t, fleetKey)
	urls := make([]string, n)
	for i := range urls {
		_, urls[i] = startServe(t, append([]string{"--redis", srv.URL(), "--replica-id", fmt.Sprintf("r%d", i), "--request-state-keys", keys}, extra...)...)
	}
	return urls
}

// targets returns what the every-tool tests run against: one `tidemark
// serve`, and a fleet of three replicas whose clients send each request to
// the next replica.
func targets(t *testing.T) []struct {
	name string
	urls []string
} {
	_, one := startServe(t)
	return []struct {
		name string
		urls []string
	}{{"serve", []string{one}}, {"fleet", startFleet(t, 3)}}
}

// TestGoClientCallsEveryTool: the go-sdk client (v1.8.0) calls countdown,
// echo, confirm and notify against `tidemark serve` and against a fleet of
// three replicas (each request to the next), at its default protocol
// version (2026-07-28: confirm asks through an input-required result) and
// at 2025-11-25 (the server sends elicitation/create), with the same
// outcome.
func TestGoClientCallsEveryTool(t *testing.T) {
	for _, target := range targets(t) {
		for _, tc := range []struct{ name, version, negotiated string }{
			{"default", "", "2026-07-28"},
			{"2025-11-25", "2025-11-25", "2025-11-25"},
		} {
			t.Run(target.name+"/"+tc.name, func(t *testing.T) {
				callEveryTool(t, target.urls, tc.version, tc.negotiated)
			})
		}
	}
}

// callEveryTool connects the go-sdk client at version through urls in
// turn and calls every demo tool.
func callEveryTool(t *testing.T, urls []string, version, negotiated string) {
	opts, asked := answering("accept", map[string]any{"confirmed": true})
	var mu sync.Mutex
	var progress []float64
	opts.ProgressNotificationHandler = func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, req.Params.Progress)
	}
	rt := &rotate{base: &http.Transport{}}
	for _, u := range urls {
		pu, err := neturl.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		rt.hosts = append(rt.hosts, pu.Host)
	}
	cs := connect(t, urls[0], version, nil, opts, rt)
	if got := cs.InitializeResult().ProtocolVersion; got != negotiated {
		t.Fatalf("negotiated %s, want %s", got, negotiated)
	}
	ctx, cancel := context.WithTimeout(t.Context(), clientTimeout)
	defer cancel()
	params := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": 3}}
	params.SetProgressToken("p")
	for _, call := range []struct {
		params *mcp.CallToolParams
		want   string
	}{
		{params, "countdown of 3 finished"},
		{&mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}, "hello"},
		{&mcp.CallToolParams{Name: "confirm", Arguments: map[string]any{"question": "Proceed?"}}, "accepted"},
		{&mcp.CallToolParams{Name: "notify", Arguments: map[string]any{"method": "notifications/tools/list_changed"}},
			"notified notifications/tools/list_changed"},
	} {
		res, err := cs.CallTool(ctx, call.params)
		if err != nil {
			t.Fatalf("call %s: %v", call.params.Name, err)
		}
		if got := text(t, res); got != call.want || res.IsError {
			t.Errorf("call %s: %q (isError %v), want %q", call.params.Name, got, res.IsError, call.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(progress, []float64{1, 2, 3}) {
		t.Errorf("countdown progress %v, want [1 2 3]", progress)
	}
	if got := asked(); !slices.Equal(got, []string{"Proceed?"}) {
		t.Errorf("confirm asked %q, want exactly [\"Proceed?\"]", got)
	}
}

// TestTypeScriptClientCallsEveryTool: the official TypeScript SDK client
// (the version scripts/deps.sh pins), at its default protocol version,
// calls every demo tool against `tidemark serve` and against a fleet of
// three replicas (each HTTP request to the next). That SDK's newest
// protocol version is 2025-11-25, so it negotiates that one and confirm's
// question reaches it as elicitation/create.
func TestTypeScriptClientCallsEveryTool(t *testing.T) {
	node := testenv.Node(t)
	for _, target := range targets(t) {
		t.Run(target.name, func(t *testing.T) {
			client := testenv.StartProcess(t, node, append([]string{testenv.NodeScript(t, "testdata/tools.mjs")}, target.urls...)...)
			select {
			case <-client.Done():
			case <-time.After(clientTimeout):
				t.Fatalf("tools.mjs still running after %v", clientTimeout)
			}
			if err := client.Wait(); err != nil {
				t.Fatalf("tools.mjs: %v", err)
			}
			var got []string
			for line := range strings.SplitSeq(client.Output(), "\n") {
				if strings.HasPrefix(line, "{") {
					got = append(got, line)
				}
			}
			want := []string{
				`{"protocolVersion":"2025-11-25"}`,
				`{"tool":"countdown","text":"countdown of 3 finished","isError":false,"progress":[1,2,3]}`,
				`{"tool":"echo","text":"hello","isError":false}`,
				`{"tool":"confirm","text":"accepted","isError":false,"asked":["Proceed?"]}`,
				`{"tool":"notify","text":"notified notifications/tools/list_changed","isError":false}`,
			}
			if !slices.Equal(got, want) {
				t.Errorf("tools.mjs reported:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestConfirmOutcomes: each answer gives the same outcome on both protocol
// eras, and a client without the elicitation capability is told so.
func TestConfirmOutcomes(t *testing.T) {
	_, url := startServe(t)
	for _, version := range []string{"", "2025-11-25"} {
		for _, tc := range []struct {
			action  string
			content map[string]any
			want    string
		}{
			{"accept", map[string]any{"confirmed": true}, "accepted"},
			{"accept", map[string]any{"confirmed": false}, "declined"},
			{"decline", nil, "declined"},
			{"cancel", nil, "cancelled"},
		} {
			opts, _ := answering(tc.action, tc.content)
			res, err := connect(t, url, version, nil, opts).CallTool(t.Context(),
				&mcp.CallToolParams{Name: "confirm", Arguments: map[string]any{"question": "Proceed?"}})
			if err != nil {
				t.Fatalf("protocol %q, %s %v: %v", version, tc.action, tc.content, err)
			}
			if got := text(t, res); got != tc.want {
				t.Errorf("protocol %q, %s %v: %q, want %q", version, tc.action, tc.content, got, tc.want)
			}
		}
		res, err := connect(t, url, version, nil, nil).CallTool(t.Context(),
			&mcp.CallToolParams{Name: "confirm", Arguments: map[string]any{"question": "Proceed?"}})
		want := "confirm needs a client that answers elicitation requests; this one declared no elicitation capability"
		if err != nil || !res.IsError || text(t, res) != want {
			t.Errorf("protocol %q, no elicitation capability: %v, %+v; want the tool error %q", version, err, res, want)
		}
	}
}

// manual returns client options that leave the multi round-trip rounds to
// the test.
func manual() *mcp.ClientOptions {
	opts, _ := answering("accept", map[string]any{"confirmed": true})
	opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	return opts
}

// confirmFlow is one confirm call's first round and what its retry sends.
type confirmFlow struct {
	retry *mcp.CallToolParams
}

// askConfirm sends confirm's first round to url as the holder of header and
// returns the retry that answers it with "confirmed".
func askConfirm(t *testing.T, url string, header http.Header) confirmFlow {
	t.Helper()
	args := map[string]any{"question": "Proceed?"}
	first, err := connect(t, url, "", header, manual()).CallTool(t.Context(), &mcp.CallToolParams{Name: "confirm", Arguments: args})
	if err != nil {
		t.Fatalf("first round on %s: %v", url, err)
	}
	if !first.NeedsInput() || first.RequestState == "" || first.InputRequests["confirm"] == nil {
		t.Fatalf("first round on %s: %+v, want an input-required result asking \"confirm\" with a requestState", url, first)
	}
	return confirmFlow{retry: &mcp.CallToolParams{
		Name: "confirm", Arguments: args, RequestState: first.RequestState,
		InputResponses: mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirmed": true}}},
	}}
}

// withState returns the flow's retry carrying state instead.
func (f confirmFlow) withState(state string) *mcp.CallToolParams {
	p := *f.retry
	p.RequestState = state
	return &p
}

// retryOn sends retry to url and returns confirm's text, or the error.
func retryOn(t *testing.T, url string, header http.Header, retry *mcp.CallToolParams) (string, error) {
	t.Helper()
	res, err := connect(t, url, "", header, manual()).CallTool(t.Context(), retry)
	if err != nil {
		return "", err
	}
	return text(t, res), nil
}

// wantAccepted checks that a retry completed the call.
func wantAccepted(t *testing.T, what, got string, err error) {
	t.Helper()
	if err != nil || got != "accepted" {
		t.Fatalf("%s: %q, %v; want \"accepted\"", what, got, err)
	}
}

// wantRefused checks that a retry was refused with a JSON-RPC error -32602
// whose error.data.reason is reason.
func wantRefused(t *testing.T, what string, err error, reason replay.Reason) {
	t.Helper()
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInvalidParams || requeststate.ReasonOf(err) != reason {
		t.Fatalf("%s: %v (data %s), want JSON-RPC error -32602 with reason %s", what, err, dataOf(err), reason)
	}
}

func dataOf(err error) string {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return string(wire.Data)
	}
	return ""
}

// writeKeys writes text to a key ring file, private to its owner, and
// returns its path.
func writeKeys(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "request-state-keys")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fleetKey is the key the multi-process tests share (32 bytes of 0x01).
const fleetKey = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"

// TestConfirmRetryOnAnotherProcess: three `tidemark serve` processes with
// in-memory stores share a key ring file. A confirm flow begun on A
// completes on B; the same retry with a tampered state, with a state that
// expired (sealed by C, whose --request-state-ttl is 1s), or with a state
// sealed by a process of another ring is refused with its reason.
func TestConfirmRetryOnAnotherProcess(t *testing.T) {
	keys := writeKeys(t, fleetKey)
	a, urlA := startServe(t, "--request-state-keys", keys)
	b, urlB := startServe(t, "--request-state-keys", keys)
	_, urlC := startServe(t, "--request-state-keys", keys, "--request-state-ttl", "1s")
	_, urlLone := startServe(t)
	a.WaitFor(t, `msg="request state keys" source="file [^"]+" keys=\[1a15a15e\] sealing=1a15a15e`, 5*time.Second)

	flow := askConfirm(t, urlA, nil)
	got, err := retryOn(t, urlB, nil, flow.retry)
	wantAccepted(t, "retry of A's state on B", got, err)

	// A character changed in the middle of the state.
	state := []byte(flow.retry.RequestState)
	i := len(state) / 2
	state[i] = map[bool]byte{true: 'B', false: 'A'}[state[i] == 'A']
	_, err = retryOn(t, urlB, nil, flow.withState(string(state)))
	wantRefused(t, "tampered state on B", err, replay.ReasonStateInvalid)

	short := askConfirm(t, urlC, nil)
	time.Sleep(1100 * time.Millisecond)
	_, err = retryOn(t, urlB, nil, short.retry)
	wantRefused(t, "expired state on B", err, replay.ReasonStateExpired)

	// A process without the ring seals with a key of its own.
	lone := askConfirm(t, urlLone, nil)
	_, err = retryOn(t, urlB, nil, lone.retry)
	wantRefused(t, "another ring's state on B", err, replay.ReasonStateKeyUnknown)

	// The refusals are logged with their reasons on B.
	for _, reason := range []string{"state_invalid", "state_expired", "state_key_unknown"} {
		b.WaitFor(t, `msg="request state refused" reason=`+reason+` method=tools/call target=confirm`, 5*time.Second)
	}
}

// TestConfirmSingleUseAcrossProcesses: with --request-state-single-use, the
// process that accepted a state refuses its replay with state_replayed;
// another process, which keeps its own memory of used states, accepts it
// once more (docs/requeststate.md, "Sealed requestState", Single use: what a
// fleet without shared storage can promise).
func TestConfirmSingleUseAcrossProcesses(t *testing.T) {
	keys := writeKeys(t, fleetKey)
	_, urlA := startServe(t, "--request-state-keys", keys, "--request-state-single-use")
	_, urlB := startServe(t, "--request-state-keys", keys, "--request-state-single-use")

	flow := askConfirm(t, urlA, nil)
	got, err := retryOn(t, urlB, nil, flow.retry)
	wantAccepted(t, "first use on B", got, err)
	_, err = retryOn(t, urlB, nil, flow.retry)
	wantRefused(t, "replay on B", err, replay.ReasonStateReplayed)
	got, err = retryOn(t, urlA, nil, flow.retry)
	wantAccepted(t, "replay on A, which did not see the first use", got, err)
	_, err = retryOn(t, urlA, nil, flow.retry)
	wantRefused(t, "second replay on A", err, replay.ReasonStateReplayed)
}

// TestConfirmSingleUseAcrossFleet: with --request-state-single-use and
// --redis, the replicas share the memory of used states: a state accepted
// on B is refused as replayed on B and on C.
func TestConfirmSingleUseAcrossFleet(t *testing.T) {
	urls := startFleet(t, 3, "--request-state-single-use")
	flow := askConfirm(t, urls[0], nil)
	got, err := retryOn(t, urls[1], nil, flow.retry)
	wantAccepted(t, "first use on B", got, err)
	for _, i := range []int{1, 2} {
		_, err = retryOn(t, urls[i], nil, flow.retry)
		wantRefused(t, fmt.Sprintf("replay on replica %d", i), err, replay.ReasonStateReplayed)
	}
}

// TestConfirmForeignUserAcrossProcesses: two processes of the demo behind
// the go-sdk's bearer-token middleware (testdata/authreplica; `tidemark
// serve` has no authentication) share the key ring. Alice's flow begun on
// one completes on the other; Bob presenting her state there is refused
// with state_principal_mismatch.
func TestConfirmForeignUserAcrossProcesses(t *testing.T) {
	keys := writeKeys(t, fleetKey)
	bin := testenv.Build(t, "./internal/demo/testdata/authreplica")
	urls := make([]string, 2)
	for i := range urls {
		p := testenv.StartProcess(t, bin, "--addr", "127.0.0.1:0", "--request-state-keys", keys)
		urls[i] = testenv.ServeURL(t, p)
	}
	alice := http.Header{"Authorization": {"Bearer alice"}}
	bob := http.Header{"Authorization": {"Bearer bob"}}

	flow := askConfirm(t, urls[0], alice)
	_, err := retryOn(t, urls[1], bob, flow.retry)
	wantRefused(t, "Bob with Alice's state", err, replay.ReasonStatePrincipalMismatch)
	got, err := retryOn(t, urls[1], alice, flow.retry)
	wantAccepted(t, "Alice's retry on the other process", got, err)
}

// TestConfirmAnswersWithoutState: answers sent without the state they
// answer are refused as invalid params, not taken as a fresh question.
func TestConfirmAnswersWithoutState(t *testing.T) {
	_, url := startServe(t)
	flow := askConfirm(t, url, nil)
	_, err := retryOn(t, url, nil, flow.withState(""))
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInvalidParams || wire.Message != "inputResponses were sent without the requestState they answer" {
		t.Fatalf("answers without a state: %v, want JSON-RPC error -32602 %q", err, "inputResponses were sent without the requestState they answer")
	}
}

// TestToolNames: ToolNames names exactly the tools tools/list answers.
func TestToolNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := demo.NewServer().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tool := range res.Tools {
		got = append(got, tool.Name)
	}
	slices.Sort(got)
	if want := demo.ToolNames(); !slices.Equal(got, want) {
		t.Errorf("tools/list names %v, ToolNames %v", got, want)
	}
}

// TestSubscribeEmptyURI: a subscription to the empty URI is refused with
// JSON-RPC error -32602 (invalid params), in both eras: through
// resources/subscribe (2025-11-25) and through a subscriptions/listen
// filter (2026-07-28), which the go-sdk turns into the same subscribe.
func TestSubscribeEmptyURI(t *testing.T) {
	_, url := startServe(t)
	cs := connect(t, url, "2025-11-25", nil, nil)
	ctx, cancel := context.WithTimeout(t.Context(), clientTimeout)
	defer cancel()
	err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: ""})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams ||
		we.Message != "the resource URI is empty: name the resource to subscribe to" {
		t.Fatalf("Subscribe(\"\") = %v, want JSON-RPC error -32602 naming the empty URI", err)
	}
	listen := mcptest.SessionlessBody(7, "subscriptions/listen",
		map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{"demo://a", ""}}}, nil)
	resp, _, err := (&mcptest.Client{URL: url}).Listen(ctx, listen)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("listen with an empty URI: HTTP %d and acknowledged, want 400", resp.StatusCode)
	}
	se, ok := mcptest.AsStatusError(err)
	if !ok {
		t.Fatal(err)
	}
	if want := `{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"the resource URI is empty: name the resource to subscribe to"}}`; se.Status != http.StatusBadRequest || strings.TrimSpace(string(se.RawBody)) != want {
		t.Errorf("listen with an empty URI: %d %s, want 400 %s", se.Status, se.RawBody, want)
	}
}
