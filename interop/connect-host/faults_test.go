package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// The faults of docs/connect.md ("Against other servers, beside
// mcp-remote") in front of two MCP servers Tidemark did not write, each
// with the event store its SDK offers for resumption, and in front of
// `tidemark serve` (memory and --data-dir), through two stdio bridges a
// host starts: `tidemark connect URL` and mcp-remote 0.15.1
// (`mcp-remote URL`), spoken to by the same host (host.go).

const (
	// cutSteps and cutStepMS are the countdown whose stream a proxy cuts
	// right after progress cutAt: the steps left after the cut take 100 ms.
	cutSteps, cutStepMS, cutAt = 8, 20, 3
	// window is how long the host waits for an answer before it records
	// "no answer".
	window = 10 * time.Second
	// lostWithin bounds how soon after the server's restart tidemark
	// connect fails the call in flight: its resume backoff is capped at
	// 1 s (docs/connect.md, "What the bridge does on each fault").
	lostWithin = 2 * time.Second
	// noticeWithin bounds the wait for notifications/tools/list_changed
	// after the next call's answer.
	noticeWithin = 3 * time.Second
	// startBound bounds a process's start and the host's initialize.
	startBound = 30 * time.Second
)

// peer is an MCP server that a test runs on a loopback port.
type peer struct {
	name  string
	start func(t *testing.T, port int) *testenv.Process
	// lost is error.data of tidemark connect's answer to the call in
	// flight when this server restarts.
	lost map[string]any
	// noCut leaves the stream cut out (it would repeat another peer's).
	noCut bool
}

// lost404 is error.data after a restart that forgot the session, from a
// server that names no reason of its own in its 404.
var lost404 = map[string]any{"reason": replay.ReasonRequestLost.String(), "status": 404.0}

// tidemarkPeer is `tidemark serve --retry 100ms`, with --data-dir (a
// directory per port, kept across the restart) when durable: the other
// bridge's behaviour in front of Tidemark, beside the other servers.
func tidemarkPeer(t *testing.T, durable bool) peer {
	bin, dir := testenv.BuildTidemark(t), t.TempDir()
	p := peer{name: "tidemark serve (memory)", lost: map[string]any{
		"reason": replay.ReasonRequestLost.String(), "status": 404.0, "serverReason": replay.ReasonSessionNotFound.String()}}
	if durable {
		p = peer{name: "tidemark serve --data-dir", noCut: true, lost: map[string]any{
			"reason": replay.ReasonRequestLost.String(), "status": 409.0, "serverReason": replay.ReasonGenerationMismatch.String()}}
	}
	p.start = func(t *testing.T, port int) *testenv.Process {
		args := []string{"serve", "--addr", "127.0.0.1:" + strconv.Itoa(port), "--retry", "100ms"}
		if durable {
			args = append(args, "--data-dir", filepath.Join(dir, strconv.Itoa(port)))
		}
		proc := testenv.StartProcess(t, bin, args...)
		proc.WaitFor(t, `msg=serving`, startBound)
		return proc
	}
	return p
}

// goSDKPeer is interop/go-sdk-memstore: the go-sdk v1.8.0's own Streamable
// HTTP handler with mcp.NewMemoryEventStore, serving internal/demo's tools.
func goSDKPeer(t *testing.T) peer {
	bin := testenv.Build(t, "./interop/go-sdk-memstore")
	return peer{name: "go-sdk v1.8.0 + MemoryEventStore", lost: lost404, start: func(t *testing.T, port int) *testenv.Process {
		p := testenv.StartProcess(t, bin, "--addr", "127.0.0.1:"+strconv.Itoa(port))
		p.WaitFor(t, `msg=serving`, startBound)
		return p
	}}
}

// tsPeer is bench/peers/ts/server.mjs: the TypeScript SDK 1.32.2's
// StreamableHTTPServerTransport with its InMemoryEventStore, one per
// session, serving a countdown tool like internal/demo's.
func tsPeer(t *testing.T) peer {
	node, modules := testenv.Node(t), testenv.NodeModules(t)
	script := filepath.Join(testenv.ModuleRoot(t), "bench", "peers", "ts", "server.mjs")
	return peer{name: "TypeScript SDK 1.32.2 + InMemoryEventStore", lost: lost404, start: func(t *testing.T, port int) *testenv.Process {
		p := testenv.StartProcess(t, node, script, "--port", strconv.Itoa(port), "--node-modules", modules)
		p.WaitFor(t, `listening http://`, startBound)
		return p
	}}
}

// bridge is a stdio bridge a host starts for a server's URL.
type bridge struct {
	name     string
	tidemark bool // tidemark connect, whose outcomes the test asserts
	command  func(t *testing.T, url string) *exec.Cmd
}

func bridges(t *testing.T) []bridge {
	tidemark := testenv.BuildTidemark(t)
	node, mcpRemote := testenv.Node(t), testenv.NPMBin(t, "mcp-remote")
	return []bridge{
		{name: "tidemark connect", tidemark: true, command: func(t *testing.T, url string) *exec.Cmd {
			return exec.Command(tidemark, "connect", "--log-level", "DEBUG", url)
		}},
		{name: "mcp-remote 0.15.1", command: func(t *testing.T, url string) *exec.Cmd {
			cmd := exec.Command(node, mcpRemote, url)
			// It keeps OAuth state under ~/.mcp-auth.
			cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
			return cmd
		}},
	}
}

// startBridge starts b for url as the host's server and initializes.
func startBridge(t *testing.T, b bridge, url string) *host {
	t.Helper()
	cmd := b.command(t, url)
	stderr := &testenv.LogBuffer{}
	cmd.Stderr = stderr
	h, err := startHost(cmd)
	if err != nil {
		t.Fatalf("start %s: %v", b.name, err)
	}
	t.Cleanup(func() {
		// tidemark connect exits 0 once the host closes its stdin; what
		// mcp-remote does then is its own affair.
		if err := h.close(closeGrace); b.tidemark && err != nil {
			t.Errorf("%s after the host closed its stdin: %v, want exit 0", b.name, err)
		}
		if s := h.strays(); b.tidemark && len(s) > 0 {
			t.Errorf("%s wrote %d stdout lines that are not JSON-RPC, the first: %q", b.name, len(s), s[0])
		}
		if strings.Contains(stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race", b.name)
		}
		if t.Failed() {
			t.Logf("stderr of %s:\n%s", b.name, stderr.String())
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), startBound)
	defer cancel()
	if _, err := h.initialize(ctx, "2025-11-25"); err != nil {
		t.Fatalf("initialize through %s: %v", b.name, err)
	}
	return h
}

// observation is what the host saw of one fault.
type observation struct {
	answer    *jsonrpc.Response // the call's answer; nil: none within window
	progress  []float64         // the call's progress, in the order received
	after     time.Duration     // from the fault to the answer, if one came
	next      *jsonrpc.Response // the next call's answer; nil: none within window
	nextAfter time.Duration     // from its sending to its answer
	seen      []jsonrpc.Message // everything the host received from the fault on
}

// countdownCall is a countdown of n steps of ms each, with a progress
// token when token is set.
func countdownCall(n, ms int, token bool) map[string]any {
	p := map[string]any{"name": "countdown", "arguments": map[string]any{"n": n, "delay_ms": ms}}
	if token {
		p["_meta"] = map[string]any{"progressToken": "host"}
	}
	return p
}

// progressOf returns the progress value of a notifications/progress
// message, and false for any other message.
func progressOf(m jsonrpc.Message) (float64, bool) {
	req, ok := m.(*jsonrpc.Request)
	if !ok || req.Method != "notifications/progress" {
		return 0, false
	}
	var p struct {
		Progress float64 `json:"progress"`
	}
	json.Unmarshal(req.Params, &p)
	return p.Progress, true
}

// awaitWithin awaits the answer to id for window; nil when none came.
func awaitWithin(t *testing.T, h *host, id jsonrpc.ID) (*jsonrpc.Response, []jsonrpc.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), window)
	defer cancel()
	r, before, err := h.await(ctx, id)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("host: %v", err)
	}
	return r, before
}

// nextCall sends the host's next call, a countdown of one step, and
// records its answer in o.
func nextCall(t *testing.T, h *host, o *observation) {
	t.Helper()
	id, err := h.send("tools/call", countdownCall(1, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	var before []jsonrpc.Message
	o.next, before = awaitWithin(t, h, id)
	o.nextAfter = time.Since(sent)
	o.seen = append(o.seen, before...)
}

// cutStream runs a countdown through b in front of srv behind a proxy that
// cuts the call's stream right after progress cutAt.
func cutStream(t *testing.T, srv peer, b bridge) observation {
	port := testenv.FreePort(t)
	srv.start(t, port)
	match := regexp.MustCompile(`"progress":` + strconv.Itoa(cutAt) + `[,}]`)
	cutter := faultproxy.NewEventCutter(func(ev []byte) bool {
		return strings.Contains(string(ev), `"notifications/progress"`) && match.Match(ev)
	})
	var (
		mu      sync.Mutex
		cutTime time.Time
	)
	px, err := faultproxy.New("127.0.0.1:"+strconv.Itoa(port), func(conn int, chunk []byte) faultproxy.Decision {
		d := cutter.Filter(conn, chunk)
		if d.Cut {
			mu.Lock()
			cutTime = time.Now()
			mu.Unlock()
		}
		return d
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	h := startBridge(t, b, "http://"+px.Addr()+"/mcp")

	id, err := h.send("tools/call", countdownCall(cutSteps, cutStepMS, true))
	if err != nil {
		t.Fatal(err)
	}
	var o observation
	o.answer, o.seen = awaitWithin(t, h, id)
	answered := time.Now()
	for _, m := range o.seen {
		if v, ok := progressOf(m); ok {
			o.progress = append(o.progress, v)
		}
	}
	mu.Lock()
	if cutTime.IsZero() {
		t.Fatalf("the proxy never cut the stream; progress the host received: %v", o.progress)
	}
	o.after = answered.Sub(cutTime)
	mu.Unlock()
	nextCall(t, h, &o)
	return o
}

// restartServer runs a slow countdown through b in front of srv, kills
// srv with SIGKILL after two progress notifications and starts it again
// on the same port.
func restartServer(t *testing.T, srv peer, b bridge) observation {
	port := testenv.FreePort(t)
	p := srv.start(t, port)
	h := startBridge(t, b, "http://127.0.0.1:"+strconv.Itoa(port)+"/mcp")

	id, err := h.send("tools/call", countdownCall(1000, 100, true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), startBound)
	defer cancel()
	steps := 0
	if _, _, err := h.until(ctx, func(m jsonrpc.Message) bool {
		if _, ok := progressOf(m); ok {
			steps++
		}
		return steps == 2
	}); err != nil {
		t.Fatalf("awaiting two progress notifications: %v", err)
	}
	p.Kill()
	<-p.Done()
	srv.start(t, port)
	restarted := time.Now()

	var o observation
	o.answer, o.seen = awaitWithin(t, h, id)
	o.after = time.Since(restarted)
	nextCall(t, h, &o)
	// The bridge may tell the host to read its lists again after the next
	// call's answer: the new session starts with that call.
	if !slices.ContainsFunc(o.seen, listChanged) {
		ctx, cancel := context.WithTimeout(t.Context(), noticeWithin)
		defer cancel()
		m, before, _ := h.until(ctx, listChanged)
		o.seen = append(o.seen, before...)
		if m != nil {
			o.seen = append(o.seen, m)
		}
	}
	return o
}

// listChanged reports whether m is notifications/tools/list_changed.
func listChanged(m jsonrpc.Message) bool {
	r, ok := m.(*jsonrpc.Request)
	return ok && r.Method == "notifications/tools/list_changed"
}

// fault is one fault a test applies to a server in front of a bridge.
type fault struct {
	name string
	// moment is what the time to the call's answer counts from.
	moment string
	// progress reports that the call's progress belongs in its outcome.
	progress bool
	apply    func(t *testing.T, srv peer, b bridge) observation
	// check asserts tidemark connect's observation in front of srv.
	check func(t *testing.T, srv peer, o observation)
}

var faults = []fault{
	{name: "stream cut after progress 3 of 8", moment: "cut", progress: true, apply: cutStream, check: checkCutResumes},
	{name: "kill -9 and restart mid-call", moment: "restart", apply: restartServer, check: checkRestartLosesCall},
}

// checkCutResumes: the cut call's progress reaches the host once each, in
// order, then its result; the next call works.
func checkCutResumes(t *testing.T, _ peer, o observation) {
	t.Helper()
	if o.answer == nil {
		t.Fatalf("the cut call got no answer within %v", window)
	}
	if text, err := toolText(o.answer.Result); o.answer.Error != nil || err != nil || text != "countdown of 8 finished" {
		t.Errorf("the cut call: result %s, error %v; want %q", o.answer.Result, o.answer.Error, "countdown of 8 finished")
	}
	if want := []float64{1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(o.progress, want) {
		t.Errorf("progress the host received: %v, want %v, each once", o.progress, want)
	}
	checkNext(t, o)
}

// checkRestartLosesCall: the call in flight fails within lostWithin of
// the restart with the lost-request error, error.data srv.lost; the next
// call works, the host is told to read
// its tool list again and never sees a second initialize answer.
func checkRestartLosesCall(t *testing.T, srv peer, o observation) {
	t.Helper()
	if o.answer == nil {
		t.Fatalf("the call in flight got no answer within %v of the restart", window)
	}
	if o.after > lostWithin {
		t.Errorf("the call in flight failed %v after the restart, want within %v", o.after.Round(time.Millisecond), lostWithin)
	}
	var we *jsonrpc.Error
	var data map[string]any
	if !errors.As(o.answer.Error, &we) || we.Code != jsonrpc.CodeInternalError || json.Unmarshal(we.Data, &data) != nil || !maps.Equal(data, srv.lost) {
		t.Errorf("the call in flight: result %s, error %v (data %s), want code -32603, data %v", o.answer.Result, o.answer.Error, dataOf(o.answer), srv.lost)
	}
	checkNext(t, o)
	if !slices.ContainsFunc(o.seen, listChanged) {
		t.Errorf("the host was not sent notifications/tools/list_changed within %v of the next call's answer", noticeWithin)
	}
	first, _ := jsonrpc.MakeID(float64(1))
	if slices.ContainsFunc(o.seen, func(m jsonrpc.Message) bool {
		r, ok := m.(*jsonrpc.Response)
		return ok && r.ID == first
	}) {
		t.Errorf("the host received a second answer to its initialize")
	}
}

// checkNext: the call after the fault succeeds.
func checkNext(t *testing.T, o observation) {
	t.Helper()
	if o.next == nil {
		t.Fatalf("the next call got no answer within %v", window)
	}
	if text, err := toolText(o.next.Result); o.next.Error != nil || err != nil || text != "countdown of 1 finished" {
		t.Errorf("the next call: result %s, error %v; want %q", o.next.Result, o.next.Error, "countdown of 1 finished")
	}
}

// dataOf returns error.data of r's error, if any.
func dataOf(r *jsonrpc.Response) string {
	var we *jsonrpc.Error
	if r == nil || !errors.As(r.Error, &we) {
		return ""
	}
	return string(we.Data)
}

// describe says in a few words what the host got for a call.
func describe(r *jsonrpc.Response, progress []float64, withProgress bool) string {
	if r == nil {
		return fmt.Sprintf("no answer within %v", window)
	}
	var s string
	var we *jsonrpc.Error
	switch {
	case errors.As(r.Error, &we):
		s = fmt.Sprintf("error %d", we.Code)
		if len(we.Data) > 0 {
			s += " " + string(we.Data)
		} else {
			s += fmt.Sprintf(" %q", we.Message)
		}
	case r.Error != nil:
		s = "error " + r.Error.Error()
	default:
		text, err := toolText(r.Result)
		if err != nil {
			s = "tool error " + text
		} else {
			s = "result"
		}
	}
	if withProgress {
		if want := []float64{1, 2, 3, 4, 5, 6, 7, 8}; slices.Equal(progress, want) {
			s += ", progress 1 to 8 once each"
		} else {
			s += fmt.Sprintf(", progress %v", progress)
		}
	}
	return s
}

// TestConnectFaultsBesideMCPRemote applies each fault to each server in
// front of each bridge, with real processes on loopback, and logs what the
// host observed as the rows of docs/connect.md's table. It asserts
// tidemark connect's outcomes exactly (the checks of faults) and records
// mcp-remote's as they are: only its harness (processes that do not start,
// a host that cannot initialize) fails the test.
func TestConnectFaultsBesideMCPRemote(t *testing.T) {
	testenv.NeedNode(t)
	peers := []peer{goSDKPeer(t), tsPeer(t), tidemarkPeer(t, false), tidemarkPeer(t, true)}
	bs := bridges(t)
	var rows []string
	for _, srv := range peers {
		for _, f := range faults {
			if srv.noCut && f.moment == "cut" {
				continue
			}
			cells := make([]string, len(bs))
			for i, b := range bs {
				t.Run(srv.name+"/"+f.name+"/"+b.name, func(t *testing.T) {
					o := f.apply(t, srv, b)
					cells[i] = fmt.Sprintf("%s; next call: %s in %v", outcome(o, f), describe(o.next, nil, false), o.nextAfter.Round(time.Millisecond))
					t.Logf("%s", cells[i])
					if b.tidemark {
						f.check(t, srv, o)
					}
				})
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %s |", srv.name+": "+f.name, cells[0], cells[1]))
		}
	}
	t.Logf("the table of docs/connect.md:\n| server: fault | %s | %s |\n| --- | --- | --- |\n%s", bs[0].name, bs[1].name, strings.Join(rows, "\n"))
}

// outcome says what the host got for the faulted call, and when.
func outcome(o observation, f fault) string {
	s := describe(o.answer, o.progress, f.progress)
	if o.answer != nil {
		s += fmt.Sprintf(", %v after the %s", o.after.Round(time.Millisecond), f.moment)
	}
	return s
}
