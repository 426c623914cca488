package stdio

// Gateway tests: the engine behind Tidemark's HTTP handler, as `tidemark
// serve --stdio` (built by testenv) or in process, in front of real stdio
// MCP servers, spoken to over real HTTP on loopback.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

// everythingServer is the go-sdk's conformance server, run in stdio mode
// (no -http flag) behind the gateway by TestGatewayConformance.
const everythingServer = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server@v1.8.0"

// runTimeout bounds one run of an external client (the conformance suite,
// the TypeScript client).
const runTimeout = 5 * time.Minute

// startGateway runs `tidemark serve --addr 127.0.0.1:0 FLAGS --stdio --
// COMMAND...` and returns it with its endpoint URL.
func startGateway(t *testing.T, flags []string, command ...string) (*testenv.Process, string) {
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0"}, flags...)
	args = append(append(args, "--stdio", "--"), command...)
	cmd := exec.Command(testenv.BuildTidemark(t), args...)
	cmd.Env = append(os.Environ(), noRaceExitSleep)
	p := testenv.StartCmd(t, cmd)
	return p, testenv.ServeURL(t, p)
}

// testServerGateway fronts this test binary as the test server.
func testServerGateway(t *testing.T, flags ...string) (*testenv.Process, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	flags = append(flags, "--env", roleEnv+"=server", "--env", noRaceExitSleep)
	return startGateway(t, flags, exe)
}

// httpClient returns a client whose idle connections close with the test.
func httpClient(t *testing.T) *http.Client {
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// initSession initializes a session and sets its log level to info.
func initSession(t *testing.T, c *mcptest.Client) *mcptest.Session {
	t.Helper()
	s, err := c.Initialize(t.Context(), "")
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	callOK(t, s, mcptest.MustCall(2, "logging/setLevel", map[string]string{"level": "info"}))
	return s
}

// callOK sends call and returns the events of its stream, failing unless
// the stream ends with a successful response.
func callOK(t *testing.T, s *mcptest.Session, call *jsonrpc.Request) []mcptest.Event {
	t.Helper()
	st, err := s.Call(t.Context(), call)
	if err != nil {
		t.Fatalf("%s: %v", call.Method, err)
	}
	defer st.Close()
	evs, err := st.Collect()
	if err != nil {
		t.Fatalf("%s: stream: %v", call.Method, err)
	}
	if len(evs) == 0 || !evs[len(evs)-1].IsResponseTo(call.ID) {
		t.Fatalf("%s: stream did not end with its response: %v", call.Method, evs)
	}
	if r, _ := evs[len(evs)-1].Response(); r.Error != nil {
		t.Fatalf("%s: %v", call.Method, r.Error)
	}
	return evs
}

// callWhoami returns the test server's whoami and the cursor of the event
// that carried it.
func callWhoami(t *testing.T, s *mcptest.Session, callID int64) (whoami, replay.Cursor) {
	t.Helper()
	evs := callOK(t, s, mcptest.ToolCall(callID, "whoami", map[string]any{}, nil))
	last := evs[len(evs)-1]
	var who whoami
	if err := json.Unmarshal([]byte(toolText(t, last.Message)), &who); err != nil {
		t.Fatal(err)
	}
	return who, cursorOf(t, last)
}

func cursorOf(t *testing.T, e mcptest.Event) replay.Cursor {
	t.Helper()
	c, err := replay.Parse(e.ID)
	if err != nil {
		t.Fatalf("event id %q is not a cursor: %v", e.ID, err)
	}
	return c
}

// spawnGrandchild makes the test server start a sleeping grandchild in its
// process group and returns the grandchild's pid.
func spawnGrandchild(t *testing.T, s *mcptest.Session, callID int64) int {
	t.Helper()
	evs := callOK(t, s, mcptest.ToolCall(callID, "spawn", map[string]any{}, nil))
	pid, err := strconv.Atoi(toolText(t, evs[len(evs)-1].Message))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitGroupGone waits up to 5 seconds for process group pgid to have no
// live member; SIGKILL takes effect asynchronously.
func waitGroupGone(t *testing.T, what string, pgid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := groupMembers(t, pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: process group %d still has %v", what, pgid, left)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGatewayConformance runs every server scenario of the official
// conformance suite, for 2025-11-25 (sessions, one subprocess each) and for
// 2026-07-28 (sessionless, served by the bridge's subprocess), against the
// gateway fronting the go-sdk's conformance everything-server in stdio
// mode; every check must pass.
func TestGatewayConformance(t *testing.T) {
	testenv.NeedNode(t)
	bin := t.TempDir()
	install := exec.Command("go", "install", everythingServer)
	install.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", everythingServer, err, out)
	}
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) { gatewayConformance(t, filepath.Join(bin, "everything-server"), version) })
	}
}

// gatewayConformance runs the suite at version against a gateway fronting
// server.
func gatewayConformance(t *testing.T, server, version string) {
	srv, u := startGateway(t, nil, server)

	run := testenv.RunConformance(t, u, version, runTimeout)
	out := run.Output
	if run.Err != nil {
		t.Errorf("conformance exited with %v, want status 0", run.Err)
	}
	announced := run.Scenarios
	passed := 0
	for _, name := range slices.Sorted(maps.Keys(run.Checks)) {
		ok := 0
		for _, c := range run.Checks[name] {
			switch c.Status {
			case "SUCCESS":
				ok++
			case "FAILURE", "WARNING":
				t.Errorf("scenario %s: check %s: %s: %s", name, c.ID, c.Status, c.ErrorMessage)
			}
		}
		if ok == 0 {
			t.Errorf("scenario %s: no check succeeded", name)
		}
		passed += ok
	}
	if want := fmt.Sprintf("Total: %d passed, 0 failed", passed); !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	started := strings.Count(srv.Output(), `msg="subprocess started"`)
	t.Logf("%d scenarios, %d checks passed; the gateway started %d subprocesses", announced, passed, started)
}

// sseData and sseID match an SSE event's data and id lines.
var (
	sseData = regexp.MustCompile(`(?m)^data: ?(.*)$`)
	sseID   = regexp.MustCompile(`(?m)^id: ?(\S+)$`)
)

// progressEvent returns a faultproxy.EventCutter match function that
// reports the SSE event of the progress notification with value after.
func progressEvent(after float64) func(ev []byte) bool {
	return func(ev []byte) bool {
		data := sseData.FindSubmatch(ev)
		if data == nil {
			return false
		}
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Progress float64 `json:"progress"`
			} `json:"params"`
		}
		return json.Unmarshal(data[1], &msg) == nil && msg.Method == "notifications/progress" && msg.Params.Progress == after
	}
}

// TestGatewayServerEverythingResume fronts the reference TypeScript server
// @modelcontextprotocol/server-everything (stdio) and runs the official
// TypeScript client through a proxy that cuts the long-running call's
// stream after progress 3 of 10: the client resumes and sees every
// progress notification exactly once, then the result.
func TestGatewayServerEverythingResume(t *testing.T) {
	testenv.NeedNode(t)
	const steps, seconds, cutAfter = 10, 2, 3
	node := testenv.Node(t)
	srv, u := startGateway(t, []string{"--retry", "100ms"}, node, testenv.NPMBin(t, "mcp-server-everything"), "stdio")
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	cut := faultproxy.NewEventCutter(progressEvent(cutAfter))
	proxy, err := faultproxy.New(pu.Host, cut.Filter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	pu.Host = proxy.Addr()

	script := testenv.NodeScript(t, "testdata/everything_resume.mjs")
	client := testenv.StartProcess(t, node, script, pu.String(), strconv.Itoa(steps), strconv.Itoa(seconds))
	select {
	case <-client.Done():
	case <-time.After(runTimeout):
		t.Fatalf("everything_resume.mjs still running after %v", runTimeout)
	}
	if err := client.Wait(); err != nil {
		t.Fatalf("everything_resume.mjs: %v", err)
	}
	var tools []string
	var progress, results []string
	for line := range strings.SplitSeq(client.Output(), "\n") {
		var r struct {
			Tools    []string `json:"tools"`
			Progress *float64 `json:"progress"`
			Total    float64  `json:"total"`
			Result   *string  `json:"result"`
			IsError  bool     `json:"isError"`
		}
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &r) != nil {
			continue
		}
		switch {
		case r.Tools != nil:
			tools = r.Tools
		case r.Progress != nil:
			progress = append(progress, fmt.Sprintf("%v/%v", *r.Progress, r.Total))
		case r.Result != nil:
			results = append(results, fmt.Sprintf("%s (isError %v)", *r.Result, r.IsError))
		}
	}
	// The tools of server-everything 2026.8.31 (pinned in scripts/deps.sh).
	wantTools := []string{"echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference",
		"get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource", "simulate-research-query",
		"toggle-simulated-logging", "toggle-subscriber-updates", "trigger-long-running-operation"}
	if !slices.Equal(tools, wantTools) {
		t.Errorf("tools/list gave\n%q, want\n%q", tools, wantTools)
	}
	var want []string
	for i := 1; i <= steps; i++ {
		want = append(want, fmt.Sprintf("%d/%d", i, steps))
	}
	if !slices.Equal(progress, want) {
		t.Errorf("progress notifications:\ngot  %q\nwant %q (each exactly once, in order)", progress, want)
	}
	wantResult := fmt.Sprintf("Long running operation completed. Duration: %d seconds, Steps: %d. (isError false)", seconds, steps)
	if len(results) != 1 || results[0] != wantResult {
		t.Errorf("results %q, want exactly [%q]", results, wantResult)
	}
	ev, cutOnce := cut.Cut()
	var cursor string
	if id := sseID.FindSubmatch(ev); id != nil {
		cursor = string(id[1])
	}
	if !cutOnce || cursor == "" {
		t.Fatalf("the proxy cut %v (cursor %q), want once after progress %d", cutOnce, cursor, cutAfter)
	}
	srv.WaitFor(t, `msg="stream resumed".* cursor="?`+regexp.QuoteMeta(cursor), 5*time.Second)
	t.Logf("cut after cursor %s; client output:\n%s", cursor, client.Output())
}

// TestGatewayKilledSubprocess kills a session's subprocess with SIGKILL
// during a call: the call fails with a JSON-RPC error on its stream,
// resuming that stream answers 409, and the next call on the same session
// token works at generation 2, in a new subprocess.
func TestGatewayKilledSubprocess(t *testing.T) {
	srv, u := testServerGateway(t)
	c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
	s := initSession(t, c)
	who1, cur := callWhoami(t, s, 3)
	if cur.Generation != 1 {
		t.Fatalf("first call at generation %d, want 1", cur.Generation)
	}

	call := mcptest.ToolCall(4, "countdown", map[string]any{"n": 100, "delay_ms": 50, "label": "k"}, "tok")
	st, err := s.Call(t.Context(), call)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seen := 0
	var lastBeforeKill mcptest.Event
	for seen < 2 {
		ev, err := st.Next()
		if err != nil {
			t.Fatalf("countdown stream: %v", err)
		}
		if r, ok := ev.Request(); ok && r.Method == "notifications/progress" {
			seen++
		}
		lastBeforeKill = ev
	}
	if err := syscall.Kill(who1.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rest, err := st.Collect()
	if err != nil {
		t.Fatalf("countdown stream after the kill: %v, want a clean end", err)
	}
	if len(rest) == 0 || !rest[len(rest)-1].IsResponseTo(call.ID) {
		t.Fatalf("stream ended without the call's response: %v", rest)
	}
	resp, _ := rest[len(rest)-1].Response()
	var we *jsonrpc.Error
	if !errors.As(resp.Error, &we) || we.Code != jsonrpc.CodeInternalError ||
		string(we.Data) != `{"generation":1,"reason":"server_exited"}` {
		t.Fatalf("response %v, want a -32603 error with reason server_exited", resp.Error)
	}

	_, err = s.Resume(t.Context(), lastBeforeKill.ID)
	var se *mcptest.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusConflict || se.Reason() != "generation_mismatch" {
		t.Fatalf("resume of the killed call's stream: %v, want 409 generation_mismatch", err)
	}

	who2, cur := callWhoami(t, s, 5)
	if cur.Generation != 2 {
		t.Errorf("call after the kill at generation %d, want 2", cur.Generation)
	}
	if who2.Pid == who1.Pid {
		t.Errorf("generation 2 runs in pid %d, the killed process's", who2.Pid)
	}
	// The log level the client set is restored: the countdown's info log
	// lines still come.
	evs := callOK(t, s, mcptest.ToolCall(6, "countdown", map[string]any{"n": 1, "delay_ms": 1, "label": "after"}, nil))
	var logs []string
	for _, e := range evs {
		if r, ok := e.Request(); ok && r.Method == "notifications/message" {
			logs = append(logs, string(r.Params))
		}
	}
	if want := []string{`{"data":"after tick 1","level":"info"}`}; !slices.Equal(logs, want) {
		t.Errorf("log notifications at generation 2: %q, want %q", logs, want)
	}
	srv.WaitFor(t, `msg="subprocess exited; the next request re-creates the session".* reason=server_exited calls_failed=1`, 5*time.Second)
}

// TestGatewayDeleteLeavesNoOrphans: DELETE ends the session's process
// group, grandchildren included, before it answers.
func TestGatewayDeleteLeavesNoOrphans(t *testing.T) {
	_, u := testServerGateway(t)
	c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
	s := initSession(t, c)
	who, _ := callWhoami(t, s, 3)
	grandchild := spawnGrandchild(t, s, 4)
	if got := groupMembers(t, who.Pgid); !slices.Contains(got, grandchild) {
		t.Fatalf("group %d is %v, want it to include the grandchild %d", who.Pgid, got, grandchild)
	}
	if err := s.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitGroupGone(t, "after DELETE", who.Pgid)
}

// TestGatewayCapacityEvictionLeavesNoOrphans: with --max-sessions 1, a new
// session evicts the old one, whose process group ends.
func TestGatewayCapacityEvictionLeavesNoOrphans(t *testing.T) {
	_, u := testServerGateway(t, "--max-sessions", "1")
	c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
	s := initSession(t, c)
	who, _ := callWhoami(t, s, 3)
	spawnGrandchild(t, s, 4)
	initSession(t, c)
	waitGroupGone(t, "after eviction by capacity", who.Pgid)
	_, err := s.Call(t.Context(), mcptest.ToolCall(5, "whoami", map[string]any{}, nil))
	var se *mcptest.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound {
		t.Errorf("call on the evicted session: %v, want 404", err)
	}
}

// TestGatewaySIGTERMLeavesNoOrphans: SIGTERM to tidemark ends every
// session's process group before tidemark exits with status 0.
func TestGatewaySIGTERMLeavesNoOrphans(t *testing.T) {
	srv, u := testServerGateway(t)
	c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
	var groups []int
	for i := range 2 {
		s := initSession(t, c)
		who, _ := callWhoami(t, s, 3)
		spawnGrandchild(t, s, 4)
		groups = append(groups, who.Pgid)
		t.Logf("session %d: process group %d is %v", i, who.Pgid, groupMembers(t, who.Pgid))
	}
	c.HTTP.CloseIdleConnections()
	if err := srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("tidemark still running 30s after SIGTERM")
	}
	if err := srv.Wait(); err != nil {
		t.Errorf("tidemark exited with %v, want status 0", err)
	}
	for _, g := range groups {
		waitGroupGone(t, "after SIGTERM of tidemark", g)
	}
}

// TestGatewayMaxProcesses: with --max-processes 1, a second session gets
// 503 capacity until the first one ends.
func TestGatewayMaxProcesses(t *testing.T) {
	_, u := testServerGateway(t, "--max-processes", "1")
	c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
	s := initSession(t, c)
	_, err := c.Initialize(t.Context(), "")
	var se *mcptest.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || se.Reason() != replay.ReasonCapacity.String() {
		t.Fatalf("second initialize: %v, want 503 with reason capacity", err)
	}
	if err := s.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	initSession(t, c)
}

// TestGatewayIdleEviction serves the engine in process with a short idle
// TTL: an idle session is evicted and its process group ends.
func TestGatewayIdleEviction(t *testing.T) {
	e := testEngine(t, nil, Options{})
	h := tidemark.NewEngineHandler(e, &tidemark.Options{
		Sessions:      session.Options{IdleTTL: 300 * time.Millisecond},
		Transport:     transport.Options{Logger: slog.New(slog.DiscardHandler)},
		SweepInterval: 50 * time.Millisecond,
	})
	srv := httptest.NewServer(h)
	defer func() {
		srv.Close()
		h.Close()
	}()
	c := &mcptest.Client{URL: srv.URL, HTTP: httpClient(t)}
	s := initSession(t, c)
	who, _ := callWhoami(t, s, 3)
	grandchild := spawnGrandchild(t, s, 4)
	if got := groupMembers(t, who.Pgid); !slices.Contains(got, grandchild) {
		t.Fatalf("group %d is %v, want it to include the grandchild %d", who.Pgid, got, grandchild)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.Running() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := e.Running(); n != 0 {
		t.Fatalf("%d subprocesses still running 5s after the session went idle (TTL 300ms)", n)
	}
	waitGroupGone(t, "after idle eviction", who.Pgid)
	_, err := s.Call(t.Context(), mcptest.ToolCall(5, "whoami", map[string]any{}, nil))
	var se *mcptest.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound || se.Reason() != replay.ReasonSessionNotFound.String() {
		t.Errorf("call on the idle-evicted session: %v, want 404 session_not_found", err)
	}
}

// TestGatewayDeleteDuringSlowInitialize serves the engine in process with
// a server that answers initialize only once its stdin closed: the client
// DELETEs the session while initialize is in flight, and the answer comes
// while the engine session closes. The session ended, and nothing failed: the log holds no
// WARN or ERROR line, says the subprocess's answer was dropped because the
// session ended, and that the subprocess ended because it was closed.
func TestGatewayDeleteDuringSlowInitialize(t *testing.T) {
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	// The stop grace outlasts the server's life after its stdin ends.
	e := testEngine(t, logs, Options{Env: []string{lateInitEnv + "=1"}, StopGrace: wait})
	h := tidemark.NewEngineHandler(e, &tidemark.Options{
		Sessions:  session.Options{Logger: logger},
		Transport: transport.Options{Logger: logger},
	})
	srv := httptest.NewServer(h)
	defer func() {
		srv.Close()
		h.Close()
	}()
	c := &mcptest.Client{URL: srv.URL, HTTP: httpClient(t)}
	resp, token := postInitialize(t, t.Context(), c)
	defer resp.Body.Close()
	waitLog(t, logs, `msg="subprocess stderr"`, `line="initialize received"`)
	if err := c.SessionFor(token, "2025-11-25").Delete(t.Context()); err != nil {
		t.Fatalf("DELETE during initialize: %v", err)
	}
	// Both end lines come last, in either order: the subprocess's end is
	// logged once Done is closed, which lets the session's end proceed.
	waitLog(t, logs, `msg="session ended"`, `msg="subprocess ended"`)
	text := logs.String()
	for _, c := range []struct {
		pattern string
		n       int
	}{
		{`level=(WARN|ERROR) `, 0},
		{`level=INFO msg="the session ended: dropping the subprocess's message and ending the subprocess" session=\S+ generation=1 ` +
			`reason=session_not_found error=".*: session ended: deleted"\n`, 1},
		{`level=INFO msg="subprocess ended" session=\S+ generation=1 pid=\d+ status="[^"]+" reason=closed\n`, 1},
		{`level=INFO msg="session ended" session=\S+ generation=1 reason=deleted\n`, 1},
	} {
		if n := len(regexp.MustCompile(c.pattern).FindAllStringIndex(text, -1)); n != c.n {
			t.Errorf("log matches %q %d times, want %d:\n%s", c.pattern, n, c.n, text)
		}
	}
}

// waitLog waits up to wait for logs to hold every one of substrs.
func waitLog(t *testing.T, logs *testenv.LogBuffer, substrs ...string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		text := logs.String()
		missing := slices.IndexFunc(substrs, func(s string) bool { return !strings.Contains(text, s) })
		if missing < 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %s after %v:\n%s", substrs[missing], wait, text)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// postInitialize sends c's initialize (ID 1, 2025-11-25) bound to ctx and
// returns the response, its body unread, and its session token: for tests
// that read the answer as it comes, or leave before it. It fails the test
// unless the answer is 200 with a token.
func postInitialize(t *testing.T, ctx context.Context, c *mcptest.Client) (*http.Response, string) {
	t.Helper()
	body, err := mcptest.Encode(mcptest.MustCall(1, "initialize", map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "mcptest", "version": "1.0.0"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	req, err := c.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	token := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || token == "" {
		resp.Body.Close()
		t.Fatalf("initialize answered %d with Mcp-Session-Id %q, want 200 and a token", resp.StatusCode, token)
	}
	return resp, token
}

// TestGatewayInitializeTimeout fronts commands that never answer
// initialize with --stdio-init-timeout 500ms: one that is silent (the
// sleeper, as `sleep 100`) and `sh -c yes`, which writes lines that are
// not JSON-RPC without end. The initialize POST answers 200 with a stream
// that ends with a -32603 error whose reason is initialize_timeout, the
// session's token then answers 404 session_not_found as after any failed
// initialize, the process group is gone, and the log holds one timeout
// line and, for yes, exactly 5 dropped lines in full and one count.
func TestGatewayInitializeTimeout(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		flags   []string
		command []string
		invalid []string // the invalid_message log lines, described
	}{
		{"silent", []string{"--env", roleEnv + "=sleeper", "--env", noRaceExitSleep}, []string{exe}, nil},
		{"yes", nil, []string{"sh", "-c", "yes"}, []string{
			`full 1 "y"`, `full 2 "y"`, `full 3 "y"`, `full 4 "y"`, `full 5 "y"`, "exit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, u := startGateway(t, append([]string{"--stdio-init-timeout", "500ms"}, tc.flags...), tc.command...)
			c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
			start := time.Now()
			resp, token := postInitialize(t, t.Context(), c)
			msgs, err := mcptest.ReadAnswer(resp)
			elapsed := time.Since(start)
			if err != nil {
				t.Fatalf("initialize stream: %v", err)
			}
			var got []string
			for _, m := range msgs {
				r, ok := m.(*jsonrpc.Response)
				var we *jsonrpc.Error
				if !ok || !errors.As(r.Error, &we) {
					t.Fatalf("initialize stream holds %v, want only an error response", m)
				}
				got = append(got, fmt.Sprintf("%v: %d %s %s", r.ID.Raw(), we.Code, we.Data, we.Message))
			}
			want := []string{`1: -32603 {"generation":1,"reason":"initialize_timeout"} the MCP server process of this session ` +
				`did not answer initialize within 500ms and was stopped; the session did not begin: initialize a new one`}
			if !slices.Equal(got, want) {
				t.Fatalf("initialize stream:\ngot  %q\nwant %q", got, want)
			}
			if elapsed < 500*time.Millisecond || elapsed > 10*time.Second {
				t.Errorf("initialize answered after %v, want at the 500ms timeout", elapsed)
			}

			// As after any failed initialize, the session ends once the
			// answer is written: its token answers 404.
			s := c.SessionFor(token, "2025-11-25")
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, err := s.Call(t.Context(), mcptest.MustCall(2, "ping", nil))
				var se *mcptest.StatusError
				if errors.As(err, &se) && se.Status == http.StatusNotFound && se.Reason() == replay.ReasonSessionNotFound.String() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("ping on the failed session: %v, want 404 session_not_found", err)
				}
				time.Sleep(10 * time.Millisecond)
			}

			m := srv.WaitFor(t, `msg="subprocess started" .*pid=(\d+)`, 5*time.Second)
			pgid, _ := strconv.Atoi(m[1])
			waitGroupGone(t, "after the initialize timeout", pgid)
			srv.WaitFor(t, `msg="session ended" .*reason=initialize_failed`, 5*time.Second)
			logs := srv.Output()
			for _, c := range []struct {
				pattern string
				n       int
			}{
				{`level=ERROR msg="subprocess did not answer initialize in time; .* reason=initialize_timeout timeout=500ms `, 1},
				{`msg="subprocess ended; the calls it left in flight, its initialize among them, fail" .* reason=initialize_timeout calls_failed=1\n`, 1},
				{`msg="subprocess started"`, 1},
				{`reason=server_exited`, 0},
			} {
				if n := len(regexp.MustCompile(c.pattern).FindAllStringIndex(logs, -1)); n != c.n {
					t.Errorf("log matches %q %d times, want %d:\n%s", c.pattern, n, c.n, logs)
				}
			}
			var invalid []string
			for _, l := range invalidLogs(t, logs) {
				if l.kind == "exit" {
					invalid = append(invalid, "exit") // its count depends on the speed of yes
					continue
				}
				invalid = append(invalid, l.String())
			}
			if !slices.Equal(invalid, tc.invalid) {
				t.Errorf("invalid_message log lines:\ngot  %q\nwant %q", invalid, tc.invalid)
			}
		})
	}
}

// TestInitializeFailingAfterClientLeft: the client reads the initialize
// POST's headers (its session token) and leaves before the answer; the
// initialize then fails (the silent server's 500ms timeout). The session
// still ends as after any failed initialize: its token answers 404, and no
// later request re-creates it at generation 2.
func TestInitializeFailingAfterClientLeft(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv, u := startGateway(t, []string{"--stdio-init-timeout", "500ms", "--env", roleEnv + "=sleeper", "--env", noRaceExitSleep}, exe)
	c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
	ctx, leave := context.WithCancel(t.Context())
	resp, token := postInitialize(t, ctx, c)
	leave() // the client goes away before the answer
	resp.Body.Close()

	srv.WaitFor(t, `msg="session ended" .*reason=initialize_failed`, 5*time.Second)
	s := c.SessionFor(token, "2025-11-25")
	_, err = s.Call(t.Context(), mcptest.MustCall(2, "ping", nil))
	var se *mcptest.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound || se.Reason() != replay.ReasonSessionNotFound.String() {
		t.Fatalf("ping on the session whose initialize failed: %v, want 404 session_not_found", err)
	}
	if n := strings.Count(srv.Output(), `msg="subprocess started"`); n != 1 {
		t.Fatalf("%d subprocesses started, want 1 (none for a re-created generation)", n)
	}
}

// TestGatewayUsageErrors: the gateway flags' misuses exit with status 2
// and say what is wrong.
func TestGatewayUsageErrors(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stdio"}, "tidemark serve: --stdio needs the server command after --"},
		{[]string{"--stdio", "--"}, "tidemark serve: --stdio needs the server command after --"},
		{[]string{"--", "cat"}, `tidemark serve: unexpected argument "cat"`},
		{[]string{"--env", "A=1"}, "tidemark serve: --env applies with --stdio only, and without it does nothing: want --stdio, the gateway to a stdio MCP server, too, or leave --env out"},
		{[]string{"--env", "NOVALUE", "--stdio", "--", "cat"}, `tidemark serve: --env "NOVALUE": want KEY=VALUE, not "NOVALUE"`},
		{[]string{"--stdio-init-timeout", "0s", "--stdio", "--", "cat"}, "tidemark serve: --stdio-init-timeout 0: want a positive duration, or a negative one for no limit"},
		{[]string{"--stdio", "--", "tidemark-no-such-command"}, `tidemark serve: stdio: command "tidemark-no-such-command": exec: "tidemark-no-such-command": executable file not found in $PATH`},
	} {
		cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		cmd.Env = append(os.Environ(), noRaceExitSleep)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("serve %q: %v, want exit status 2; output:\n%s", tc.args, err, out)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("serve %q: output\n%s\nwant it to contain %q", tc.args, out, tc.want)
		}
	}
}

// TestGatewayDataDirRestart composes gateway mode with --data-dir: after
// tidemark restarts, the session's next call runs in a new subprocess at
// generation 2 that was told the stored initialize and log level.
func TestGatewayDataDirRestart(t *testing.T) {
	dir := t.TempDir()
	srv, u := testServerGateway(t, "--data-dir", dir)
	c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
	s := initSession(t, c)
	who1, cur := callWhoami(t, s, 3)
	if cur.Generation != 1 {
		t.Fatalf("first call at generation %d, want 1", cur.Generation)
	}
	c.HTTP.CloseIdleConnections()
	if err := srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("tidemark exited with %v, want status 0", err)
	}
	waitGroupGone(t, "after SIGTERM", who1.Pgid)

	_, c.URL = testServerGateway(t, "--data-dir", dir)
	who2, cur := callWhoami(t, s, 4)
	if cur.Generation != 2 || who2.Pid == who1.Pid {
		t.Errorf("after the restart: generation %d in pid %d, want generation 2 in a new process (not %d)", cur.Generation, who2.Pid, who1.Pid)
	}
	evs := callOK(t, s, mcptest.ToolCall(5, "state", map[string]any{}, nil))
	want := `{"clientName":"mcptest","initialized":true,"level":"info","subscriptions":null}`
	if got := toolText(t, evs[len(evs)-1].Message); got != want {
		t.Errorf("the new subprocess saw %s, want %s", got, want)
	}
}

// TestGatewayCancelledCall: behind `tidemark serve --stdio
// --stdio-cancel-grace 1500ms`, a call the client cancels and the
// subprocess never answers (the hang tool) ends its open stream with a
// -32603 error whose reason is cancelled, at the end of the grace; the
// call's ID then takes a new call (the session no longer counts the
// cancelled one in flight: no 400 duplicate_request_id).
func TestGatewayCancelledCall(t *testing.T) {
	_, u := testServerGateway(t, "--stdio-cancel-grace", "1500ms")
	c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
	s := initSession(t, c)
	ctx, stop := context.WithTimeout(t.Context(), 20*time.Second) // the stream must end well before
	defer stop()
	st, err := s.Call(ctx, mcptest.ToolCall(3, "hang", map[string]any{}, "started"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Until(func(e mcptest.Event) bool { r, ok := e.Request(); return ok && r.Method == "notifications/progress" }); err != nil {
		t.Fatalf("hang: no progress: %v", err)
	}
	resp, err := s.Post(t.Context(), mcptest.MustNotify("notifications/cancelled", map[string]any{"requestId": 3, "reason": "user"}))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/cancelled answered %d, want 202", resp.StatusCode)
	}
	start := time.Now()
	evs, err := st.Collect()
	if err != nil {
		t.Fatalf("hang stream: %v", err)
	}
	elapsed := time.Since(start)
	r, ok := evs[len(evs)-1].Response()
	var we *jsonrpc.Error
	if !ok || r.ID != mcptest.ID(3) || !errors.As(r.Error, &we) {
		t.Fatalf("hang stream ended with %v, want an error response to call 3", evs)
	}
	got := fmt.Sprintf("%d %s %s", we.Code, we.Data, we.Message)
	want := `-32603 {"generation":1,"reason":"cancelled"} the call was cancelled, and the MCP server process of this session did not answer it within 1.5s`
	if got != want {
		t.Errorf("hang's answer:\ngot  %s\nwant %s", got, want)
	}
	if elapsed < time.Second {
		t.Errorf("answered %v after the cancellation, want at the end of the 1.5s grace", elapsed)
	}
	who, _ := callWhoami(t, s, 3)
	if who.Pid == 0 {
		t.Errorf("call 3 again: whoami %+v, want the subprocess's pid", who)
	}
}

// TestGatewayCommandExitsAtOnce fronts `true`, which exits before it
// reads its initialize, and sends 20 initializes: each answers 200 with
// an Mcp-Session-Id and a stream that ends with a -32603 error whose
// reason is server_exited (never 503: a retry meets the same command),
// and the session it names has ended: a request with it answers 404
// session_not_found.
func TestGatewayCommandExitsAtOnce(t *testing.T) {
	_, u := startGateway(t, nil, "true")
	c := &mcptest.Client{URL: u, HTTP: httpClient(t)}
	want := []string{`1: -32603 {"generation":1,"reason":"server_exited"} the MCP server process of this session exited ` +
		`(exit status 0) before answering initialize; the session did not begin: initialize a new one`}
	for i := range 20 {
		resp, token := postInitialize(t, t.Context(), c)
		msgs, err := mcptest.ReadAnswer(resp)
		if err != nil {
			t.Fatalf("initialize %d: stream: %v", i, err)
		}
		var got []string
		for _, m := range msgs {
			r, ok := m.(*jsonrpc.Response)
			var we *jsonrpc.Error
			if !ok || !errors.As(r.Error, &we) {
				t.Fatalf("initialize %d: stream holds %v, want only an error response", i, m)
			}
			got = append(got, fmt.Sprintf("%v: %d %s %s", r.ID.Raw(), we.Code, we.Data, we.Message))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("initialize %d:\ngot  %q\nwant %q", i, got, want)
		}
		s := c.SessionFor(token, "2025-11-25")
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := s.Call(t.Context(), mcptest.MustCall(2, "ping", nil))
			var se *mcptest.StatusError
			if errors.As(err, &se) && se.Status == http.StatusNotFound && se.Reason() == replay.ReasonSessionNotFound.String() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("initialize %d: ping on its session: %v, want 404 session_not_found", i, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
