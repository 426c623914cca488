package interop

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// The MCP Inspector's command-line mode (@modelcontextprotocol/inspector
// 2.12.0, `mcp-inspector --cli`), one tools/call per run, as a script or
// CI job runs it. It sends no progress token of its own; these tests give
// the call one (--tool-metadata progressToken=…) so the relay can cut or
// the server be killed at a known point. docs/clients.md ("What MCP
// clients do with Tidemark's answers") cites these tests.

// startInspector runs `mcp-inspector --cli` with args, in a home
// directory of its own (it keeps a catalog and settings there) and with
// secrets kept in memory (there is no keychain here).
func startInspector(t *testing.T, args ...string) *testenv.Process {
	t.Helper()
	cmd := exec.Command(testenv.Node(t), append([]string{testenv.NPMBin(t, "mcp-inspector"), "--cli"}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "MCP_INSPECTOR_SECRET_STORE=memory")
	return testenv.StartCmd(t, cmd)
}

// inspectorCountdown is the CLI's arguments for a countdown of n steps,
// after the target (a URL, or --config FILE --server NAME).
func inspectorCountdown(n int) []string {
	return []string{"--method", "tools/call", "--tool-name", "countdown",
		"--tool-arg", "n=" + strconv.Itoa(n), "delay_ms=20",
		"--tool-metadata", "progressToken=inspector", "--format", "json"}
}

// inspectorConfig writes an mcp.json naming url as server "tidemark" with
// requestTimeout ms, and returns the CLI's target arguments for it.
func inspectorConfig(t *testing.T, url string, requestTimeout int) []string {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"tidemark": map[string]any{"type": "http", "url": url, "requestTimeout": requestTimeout},
	}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--config", path, "--server", "tidemark"}
}

// inspectorResult returns the text of the tool result the CLI printed
// (--format json), "" when it printed none.
func inspectorResult(out string) string {
	for line := range strings.SplitSeq(out, "\n") {
		var r struct {
			Result *struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.Result != nil {
			var b strings.Builder
			for _, c := range r.Result.Content {
				b.WriteString(c.Text)
			}
			return b.String()
		}
	}
	return ""
}

// TestInspectorCLIResumesCut: the relay cuts the call's stream after
// progress 10; the CLI resumes it once with Last-Event-ID, exits 0 and
// prints the result. By default (--protocol-era legacy) it initializes at
// 2025-11-25, the resumable era.
func TestInspectorCLIResumesCut(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	p := startInspector(t, append([]string{b.URL()}, inspectorCountdown(steps)...)...)
	waitExit(t, p, clientBound)
	if err := p.Wait(); err != nil {
		t.Fatalf("mcp-inspector --cli: %v; output:\n%s", err, p.Output())
	}
	if got := inspectorResult(p.Output()); got != countdownResult(steps) {
		t.Errorf("printed result %q, want %q; output:\n%s", got, countdownResult(steps), p.Output())
	}
	checkResumedOnce(t, b.relay)
	checkAsked(t, b.relay, "2025-11-25")
}

// TestInspectorCLIOn409: `tidemark serve --data-dir` is killed during the
// call and started again. The CLI resumes the call's stream and its
// standalone stream, twice each, all refused with 409
// generation_mismatch, then waits: the requestTimeout of its --config
// entry (1 s here) is not applied in --cli mode, which waits the SDK's
// fixed 60 s (it then exits 1, "Request timed out after 1m00s"). The test
// watches it still waiting 3 s after the last refusal.
func TestInspectorCLIOn409(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	checkInspectorRestart(t, durableStore, http409Refusal)
}

// TestInspectorCLIOn404: as TestInspectorCLIOn409 with the memory store:
// the resumes are refused with 404 session_not_found, twice per stream,
// and the CLI waits as well. A later run is a new session (each run
// initializes), so nothing carries over.
func TestInspectorCLIOn404(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	checkInspectorRestart(t, memoryStore, http404Refusal)
}

// inspectorRequestTimeout is the requestTimeout (ms) of the restart
// tests' --config entry, which --cli does not apply.
const inspectorRequestTimeout = 1000

func checkInspectorRestart(t *testing.T, st store, want refusal) {
	b := startBackend(t, st)
	target := inspectorConfig(t, b.URL(), inspectorRequestTimeout)
	p := startInspector(t, append(target, inspectorCountdown(longCountdown)...)...)
	b.relay.waitProgress(t, killAfter, clientBound)
	b.restart(t, syscall.SIGKILL)
	b.relay.waitFor(t, "four refused resumes", clientBound, func(xs []exchange) bool {
		return len(where(xs, func(e exchange) bool { return isResume(e) && e.Status != 0 })) >= 4
	})
	select {
	case <-p.Done():
		t.Fatalf("the CLI exited %v within %v of the refusals; output:\n%s", p.Wait(), stillWaiting, p.Output())
	case <-time.After(stillWaiting):
	}
	xs := b.relay.recorded()
	checkRefusedResumes(t, xs, callSession(t, xs), want, 2)
}

// TestInspectorCLIProtocolEra: with --protocol-era auto the CLI asks
// server/discover, gets 2026-07-28 and the Tasks extension from Tidemark,
// and calls sessionless, declaring the extension: countdown runs as a
// task, whose CreateTaskResult the CLI polls with tasks/get until it
// completes, then prints the result and exits 0. The call's answer is no
// longer a stream a cut could lose.
func TestInspectorCLIProtocolEra(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	b := startBackend(t, memoryStore)
	p := startInspector(t, append([]string{b.URL(), "--protocol-era", "auto"}, inspectorCountdown(steps)...)...)
	waitExit(t, p, clientBound)
	if err := p.Wait(); err != nil {
		t.Fatalf("mcp-inspector --cli: %v; output:\n%s", err, p.Output())
	}
	if got := inspectorResult(p.Output()); got != countdownResult(steps) {
		t.Errorf("printed result %q, want %q; output:\n%s", got, countdownResult(steps), p.Output())
	}
	xs := b.relay.recorded()
	posts := where(xs, func(e exchange) bool { return e.Method == "POST" })
	if len(posts) == 0 || posts[0].RPC != "server/discover" {
		t.Errorf("POSTs %v, want server/discover first", posts)
	}
	for _, e := range xs {
		if e.Session != "" || e.LastEventID != "" || e.RPC == "initialize" || e.Method == "POST" && e.Protocol != modernEra {
			t.Errorf("%s: want sessionless requests at %s", e, modernEra)
		}
	}
	calls := where(xs, func(e exchange) bool { return e.RPC == "tools/call" })
	polls := where(xs, func(e exchange) bool { return e.RPC == "tasks/get" })
	if len(calls) != 1 || len(polls) == 0 {
		t.Errorf("%d tools/call and %d tasks/get, want 1 and at least 1 (the call ran as a task)", len(calls), len(polls))
	}
}

// checkSessionless asserts that the client discovered the server at
// 2026-07-28 and spoke sessionless from then on: every POST at 2026-07-28
// (the first server/discover, none initialize), no request with
// Mcp-Session-Id or Last-Event-ID; and that the relay cut the call.
func checkSessionless(t *testing.T, r *relay) {
	t.Helper()
	posts := where(r.recorded(), func(e exchange) bool { return e.Method == "POST" })
	if len(posts) == 0 || posts[0].RPC != "server/discover" {
		t.Errorf("POSTs %v, want server/discover first", posts)
	}
	for _, e := range r.recorded() {
		if e.Session != "" || e.LastEventID != "" || e.RPC == "initialize" || e.Method == "POST" && e.Protocol != modernEra {
			t.Errorf("%s: want sessionless requests at %s", e, modernEra)
		}
	}
	if !r.didCut() {
		t.Errorf("the relay cut no stream")
	}
}
