package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// host is a test's MCP host: it runs `tidemark connect` and speaks
// newline-delimited JSON-RPC over the bridge's stdin and stdout, as a
// desktop host does.
type host struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *testenv.LogBuffer
	in     chan jsonrpc.Message // what the bridge wrote, in order
	exited chan struct{}        // closed when the bridge has exited
	err    error                // its exit status, read after exited

	mu  sync.Mutex
	all []jsonrpc.Message // everything the bridge wrote so far
}

// startConnect starts `tidemark connect args...` as a host would.
func startConnect(t *testing.T, bin string, args ...string) *host {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"connect"}, args...)...)
	h := &host{t: t, cmd: cmd, stderr: &testenv.LogBuffer{}, in: make(chan jsonrpc.Message, 1024), exited: make(chan struct{})}
	cmd.Stderr = h.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			m, err := jsonrpc.DecodeMessage(sc.Bytes())
			if err != nil {
				t.Errorf("the bridge wrote a line that is not JSON-RPC: %q: %v", sc.Text(), err)
				continue
			}
			h.mu.Lock()
			h.all = append(h.all, m)
			h.mu.Unlock()
			h.in <- m
		}
	}()
	go func() {
		<-read
		h.err = cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-h.exited
		if strings.Contains(h.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("tidemark connect reported a data race")
		}
		if t.Failed() {
			t.Logf("stderr of tidemark connect:\n%s", h.stderr.String())
		}
	})
	return h
}

// send writes msg to the bridge's stdin.
func (h *host) send(msg jsonrpc.Message) {
	h.t.Helper()
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.stdin.Write(append(data, '\n')); err != nil {
		h.t.Fatalf("write to tidemark connect: %v", err)
	}
}

// request sends the call id (an int) of method with params.
func (h *host) request(id int64, method string, params any) {
	h.t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		h.t.Fatal(err)
	}
	h.send(&jsonrpc.Request{ID: mustID(id), Method: method, Params: raw})
}

// notify sends the notification method with params.
func (h *host) notify(method string, params any) {
	h.t.Helper()
	raw, _ := json.Marshal(params)
	h.send(&jsonrpc.Request{Method: method, Params: raw})
}

// until returns the first message from the bridge that match accepts,
// and the ones before it; it fails the test after timeout.
func (h *host) until(timeout time.Duration, what string, match func(jsonrpc.Message) bool) (jsonrpc.Message, []jsonrpc.Message) {
	h.t.Helper()
	deadline := time.After(timeout)
	var before []jsonrpc.Message
	for {
		select {
		case m := <-h.in:
			if match(m) {
				return m, before
			}
			before = append(before, m)
		case <-deadline:
			h.t.Fatalf("no %s from tidemark connect within %v; got %d other messages", what, timeout, len(before))
		case <-h.exited:
			h.t.Fatalf("tidemark connect exited (%v) while the host awaited %s", h.err, what)
		}
	}
}

// answer returns the response to call id, and the messages before it.
func (h *host) answer(id int64, timeout time.Duration) (*jsonrpc.Response, []jsonrpc.Message) {
	h.t.Helper()
	want := mustID(id)
	m, before := h.until(timeout, fmt.Sprintf("answer to call %d", id), func(m jsonrpc.Message) bool {
		r, ok := m.(*jsonrpc.Response)
		return ok && r.ID == want
	})
	return m.(*jsonrpc.Response), before
}

// initialize runs the host's handshake (call id 1) and returns the
// server's initialize result.
func (h *host) initialize() json.RawMessage {
	h.t.Helper()
	h.request(1, "initialize", map[string]any{
		"protocolVersion": "2025-11-25",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "test-host", "version": "1.0.0"},
	})
	r, _ := h.answer(1, 20*time.Second)
	if r.Error != nil {
		h.t.Fatalf("initialize: %v", r.Error)
	}
	h.notify("notifications/initialized", map[string]any{})
	return r.Result
}

// initializeAnswers counts the initialize answers the host received (the
// responses to call 1), and fails on any response whose ID the host never
// used (the bridge's own calls must not reach it).
func (h *host) initializeAnswers(used ...int64) int {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.all {
		r, ok := m.(*jsonrpc.Response)
		if !ok {
			continue
		}
		if r.ID == mustID(1) {
			n++
		} else if !slices.ContainsFunc(used, func(id int64) bool { return r.ID == mustID(id) }) {
			h.t.Errorf("the host received a response to id %v, which it never used", r.ID.Raw())
		}
	}
	return n
}

func mustID(v int64) jsonrpc.ID {
	id, err := jsonrpc.MakeID(float64(v)) // MakeID takes a JSON number as float64
	if err != nil {
		panic(err)
	}
	return id
}

// toolText returns the text of a tools/call result's first content.
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
	if err := json.Unmarshal(r.Result, &res); err != nil || len(res.Content) == 0 || res.IsError {
		t.Fatalf("call %v: result %s, want a tool result with text", r.ID.Raw(), r.Result)
	}
	return res.Content[0].Text
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

// countdown returns the params of a countdown call with a progress token.
func countdown(n, delayMS int) map[string]any {
	return map[string]any{"name": "countdown", "arguments": map[string]any{"n": n, "delay_ms": delayMS}, "_meta": map[string]any{"progressToken": "cd"}}
}

// hostErrorData is the error.data the bridge gives a failed call.
type hostErrorData struct {
	Reason       string `json:"reason"`
	Status       int    `json:"status"`
	ServerReason string `json:"serverReason"`
}

// wantCallError checks that r failed with code -32603 and data.
func wantCallError(t *testing.T, r *jsonrpc.Response, want hostErrorData) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(r.Error, &we) {
		t.Fatalf("call %v: answer %s, want a JSON-RPC error", r.ID.Raw(), r.Result)
	}
	var got hostErrorData
	if err := json.Unmarshal(we.Data, &got); err != nil {
		t.Fatalf("call %v: error.data %s: %v", r.ID.Raw(), we.Data, err)
	}
	if we.Code != jsonrpc.CodeInternalError || got != want {
		t.Fatalf("call %v: error code %d data %+v (%s), want -32603 and %+v", r.ID.Raw(), we.Code, got, we.Message, want)
	}
}

// TestConnectBridgesDemo: through `tidemark connect`, a host initializes
// with `tidemark serve` (the demo, memory store), lists its tools and calls
// one.
func TestConnectBridgesDemo(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0")
	h := startConnect(t, bin, testenv.ServeURL(t, p))
	var init struct {
		ProtocolVersion string         `json:"protocolVersion"`
		ServerInfo      map[string]any `json:"serverInfo"`
	}
	if err := json.Unmarshal(h.initialize(), &init); err != nil || init.ProtocolVersion != "2025-11-25" {
		t.Fatalf("initialize result: %+v (%v), want protocol 2025-11-25", init, err)
	}
	h.request(2, "tools/list", map[string]any{})
	r, _ := h.answer(2, 10*time.Second)
	var tools struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Result, &tools); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if got := strings.Join(names, ","); got != "confirm,countdown,echo,notify" {
		t.Errorf("tools/list through the bridge: %s, want confirm,countdown,echo,notify", got)
	}
	h.request(3, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "through the bridge"}})
	r, _ = h.answer(3, 10*time.Second)
	if got := toolText(t, r); got != "through the bridge" {
		t.Errorf("echo through the bridge: %q, want %q", got, "through the bridge")
	}
	// The host closes stdin: the bridge ends its session and exits 0.
	h.stdin.Close()
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("tidemark connect still runs 10s after the host closed stdin")
	}
	if h.err != nil {
		t.Errorf("tidemark connect after stdin closed: %v, want exit 0", h.err)
	}
}

// startOn starts `tidemark serve` on the loopback port with extra args and
// waits until it serves.
func startOn(t *testing.T, bin string, port int, extra ...string) *testenv.Process {
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:" + strconv.Itoa(port), "--retry", "100ms"}, extra...)
	p := testenv.StartProcess(t, bin, args...)
	p.WaitFor(t, `msg=serving`, 20*time.Second)
	return p
}

// restartMidCall runs a slow countdown through the bridge, kills the
// server with SIGKILL once two progress notifications arrived, restarts
// it on the same port with the same args, and checks what the host sees:
// the call fails within 2 s of the restart with want, the host's next call
// succeeds, it never sees a second initialize answer, and it is told to
// read its tool list again.
func restartMidCall(t *testing.T, extra []string, want hostErrorData) {
	bin := testenv.BuildTidemark(t)
	port := testenv.FreePort(t)
	p := startOn(t, bin, port, extra...)
	h := startConnect(t, bin, "http://127.0.0.1:"+strconv.Itoa(port)+"/mcp")
	h.initialize()

	h.request(10, "tools/call", countdown(1000, 100))
	steps := 0
	h.until(20*time.Second, "two progress notifications", func(m jsonrpc.Message) bool {
		if _, ok := progressOf(m); ok {
			steps++
		}
		return steps == 2
	})
	kill9(t, p)
	startOn(t, bin, port, extra...)
	restarted := time.Now()

	r, seen := h.answer(10, 20*time.Second)
	if took := time.Since(restarted); took > 2*time.Second {
		t.Errorf("the call in flight failed %v after the server's restart, want within 2s", took.Round(time.Millisecond))
	}
	wantCallError(t, r, want)

	h.request(11, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "after the restart"}})
	r, before := h.answer(11, 20*time.Second)
	seen = append(seen, before...)
	if got := toolText(t, r); got != "after the restart" {
		t.Errorf("the next call: %q, want %q", got, "after the restart")
	}
	listChanged := func(m jsonrpc.Message) bool {
		req, ok := m.(*jsonrpc.Request)
		return ok && req.Method == "notifications/tools/list_changed"
	}
	if !slices.ContainsFunc(seen, listChanged) {
		h.until(5*time.Second, "notifications/tools/list_changed", listChanged)
	}
	if n := h.initializeAnswers(10, 11); n != 1 {
		t.Errorf("the host received %d initialize answers, want 1", n)
	}
}

// TestConnectKill9Durable: SIGKILL and restart of `tidemark serve
// --data-dir` mid-call: the server re-creates the session at generation+1
// and answers the call's resume 409 generation_mismatch listing it in
// lostRequests; the host's call fails at once with request_lost.
func TestConnectKill9Durable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	restartMidCall(t, []string{"--data-dir", dir}, hostErrorData{
		Reason: replay.ReasonRequestLost.String(), Status: 409, ServerReason: replay.ReasonGenerationMismatch.String(),
	})
}

// TestConnectKill9Memory: the same with the in-memory store: the restarted
// server no longer knows the session (404 session_not_found).
func TestConnectKill9Memory(t *testing.T) {
	restartMidCall(t, nil, hostErrorData{
		Reason: replay.ReasonRequestLost.String(), Status: 404, ServerReason: replay.ReasonSessionNotFound.String(),
	})
}

// TestConnectSIGTERMDurable: a graceful stop (SIGTERM) of `tidemark serve
// --data-dir` while the bridge keeps its standalone GET stream open hands
// the session over (handed_over=1 not_handed_over=0), and the process
// restarted on the same port and directory wakes it at generation 1,
// re-creating nothing: the host's next call succeeds and the host is
// told nothing, no list_changed notification and no second initialize
// answer (regression: the session was often not handed over, the next
// process claimed generation 2, and the bridge told the host its lists
// may have changed, as after a crash).
func TestConnectSIGTERMDurable(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	port := testenv.FreePort(t)
	extra := []string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--metrics-addr", "127.0.0.1:0"}
	p := startOn(t, bin, port, extra...)
	h := startConnect(t, bin, "http://127.0.0.1:"+strconv.Itoa(port)+"/mcp")
	h.initialize()
	echo := func(id int64, text string) {
		t.Helper()
		h.request(id, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": text}})
		r, _ := h.answer(id, 20*time.Second)
		if got := toolText(t, r); got != text {
			t.Fatalf("call %d: %q, want %q", id, got, text)
		}
	}
	echo(10, "before the restart")
	awaitReader(t, p.WaitFor(t, `msg="operator's listener started" url=(\S+)`, 10*time.Second)[1])

	terminate(t, p, `handed_over=1 not_handed_over=0`)
	p2 := startOn(t, bin, port, extra...)
	echo(11, "after the restart")
	p2.WaitFor(t, `msg="session woke" session=\S+ generation=1`, 10*time.Second)
	if strings.Contains(p2.Output(), `msg="session re-created"`) {
		t.Errorf("the restarted process re-created the session:\n%s", p2.Output())
	}
	h.mu.Lock()
	for _, m := range h.all {
		if req, ok := m.(*jsonrpc.Request); ok && strings.HasSuffix(req.Method, "/list_changed") {
			t.Errorf("the host received %s after a graceful restart", req.Method)
		}
	}
	h.mu.Unlock()
	if n := h.initializeAnswers(10, 11); n != 1 {
		t.Errorf("the host received %d initialize answers, want 1", n)
	}
}

// awaitReader waits, up to 10 seconds, until the operator's listener at
// operator (an http:// URL) lists one session with one connection reading
// its streams: the bridge's standalone GET stream.
func awaitReader(t *testing.T, operator string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body := get(t, operator+"/debug/sessions")
		var list admin.List
		if code == http.StatusOK && json.Unmarshal([]byte(body), &list) == nil && len(list.Sessions) == 1 && list.Sessions[0].Readers == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session with one reader on %s/debug/sessions within 10 s: %d %s", operator, code, body)
		}
	}
}

// TestConnectCutStreamResumes: a proxy cuts the call's SSE stream right
// after its third progress notification; the bridge resumes it with
// Last-Event-ID, and every progress notification, then the result,
// reaches the host exactly once.
func TestConnectCutStreamResumes(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--retry", "100ms")
	u := testenv.ServeURL(t, p)
	target := strings.TrimPrefix(strings.TrimSuffix(u, "/mcp"), "http://")
	cutter := faultproxy.NewEventCutter(func(ev []byte) bool {
		return strings.Contains(string(ev), `"notifications/progress"`) && strings.Contains(string(ev), `"progress":3,`)
	})
	px, err := faultproxy.New(target, cutter.Filter)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	h := startConnect(t, bin, "--log-level", "DEBUG", "http://"+px.Addr()+"/mcp")
	h.initialize()
	const n = 8
	h.request(20, "tools/call", countdown(n, 50))
	r, before := h.answer(20, 30*time.Second)
	if got, want := toolText(t, r), "countdown of 8 finished"; got != want {
		t.Errorf("countdown result %q, want %q", got, want)
	}
	var got []float64
	for _, m := range before {
		if v, ok := progressOf(m); ok {
			got = append(got, v)
		}
	}
	if want := []float64{1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(got, want) {
		t.Errorf("progress the host received: %v, want %v, each once", got, want)
	}
	if _, cut := cutter.Cut(); !cut {
		t.Fatal("the proxy never cut the stream")
	}
	if !strings.Contains(h.stderr.String(), "client: resumed") {
		t.Errorf("no resume in the bridge's log")
	}
}

// TestConnectUnreachable: a URL where nothing listens: the host's
// initialize gets server_unreachable, and the bridge exits 1 with one line
// on stderr that names the URL and the failure.
func TestConnectUnreachable(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	url := "http://" + addr + "/mcp"
	h := startConnect(t, bin, "--start-timeout", "300ms", url)
	h.request(1, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "test-host", "version": "1"}})
	r, _ := h.answer(1, 10*time.Second)
	wantCallError(t, r, hostErrorData{Reason: replay.ReasonServerUnreachable.String()})
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("tidemark connect still runs 10s after its first initialize failed to connect")
	}
	var exit *exec.ExitError
	if !errors.As(h.err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit: %v, want status 1", h.err)
	}
	want := "tidemark connect: cannot reach the MCP server at " + url + ": dial tcp " + addr + ": connect: connection refused\n"
	if got := h.stderr.String(); got != want {
		t.Errorf("stderr:\n%q\nwant one line:\n%q", got, want)
	}
}

// TestConnectVersion: `tidemark connect --version` prints the build line.
func TestConnectVersion(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	out, err := exec.Command(bin, "connect", "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "tidemark ") || strings.Count(string(out), "\n") != 1 {
		t.Errorf("tidemark connect --version: %q, %v; want one line starting with \"tidemark \"", out, err)
	}
}

// TestAddHeader: --header expands ${VAR} from the environment, turns $$
// into $, and refuses an unset variable and a line net/http would refuse,
// never repeating the value.
func TestAddHeader(t *testing.T) {
	env := map[string]string{"TOKEN": "s3cret"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for in, want := range map[string]string{
		"Authorization: Bearer ${TOKEN}": "Authorization=Bearer s3cret",
		"X-Price: $$5":                   "X-Price=$5",
		"X-Token:$TOKEN":                 "X-Token=s3cret",
	} {
		h := make(map[string][]string)
		if err := addHeader(h, in, lookup); err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		for k, v := range h {
			if got := k + "=" + v[0]; got != want {
				t.Errorf("%q: %s, want %s", in, got, want)
			}
		}
	}
	for in, want := range map[string]string{
		"Authorization: Bearer ${MISSING}": "want NAME: VALUE whose ${VAR} are set; not set: MISSING",
		"no colon ${TOKEN}":                `want NAME: VALUE, e.g. "Authorization: Bearer ${TOKEN}"`,
		"Bad Name: x":                      `want NAME: VALUE, e.g. "Authorization: Bearer ${TOKEN}"`,
		"X-Line: a\nb":                     `want NAME: VALUE, e.g. "Authorization: Bearer ${TOKEN}"`,
	} {
		err := addHeader(make(map[string][]string), in, lookup)
		if err == nil || err.Error() != want || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}
