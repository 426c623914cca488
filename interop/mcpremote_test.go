package interop

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// mcp-remote 0.15.1, the stdio bridge that desktop hosts start as a local
// MCP server (`npx mcp-remote URL`) to reach a remote one. The test plays
// the host: it writes JSON-RPC lines to the bridge's stdin and reads its
// stdout. docs/clients.md ("What MCP clients do with Tidemark's answers")
// cites these tests.

// host is the test's end of an mcp-remote process.
type host struct {
	p  *testenv.Process
	in io.WriteCloser
}

// startMCPRemote runs mcp-remote for url with extra flags, in a home
// directory of its own (it keeps OAuth state in ~/.mcp-auth).
func startMCPRemote(t *testing.T, url string, extra ...string) *host {
	t.Helper()
	cmd := exec.Command(testenv.Node(t), append([]string{testenv.NPMBin(t, "mcp-remote"), url}, extra...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	h := &host{p: testenv.StartCmd(t, cmd), in: in}
	t.Cleanup(func() { in.Close() })
	return h
}

// send writes one JSON-RPC message.
func (h *host) send(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(h.in, msg+"\n"); err != nil {
		t.Fatalf("write to mcp-remote: %v", err)
	}
}

// hostMessage is a JSON-RPC message mcp-remote wrote to the host.
type hostMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Progress *float64 `json:"progress"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// messages returns what mcp-remote wrote to its stdout so far. Its own log
// goes to stderr, in lines that are not JSON-RPC messages.
func (h *host) messages() []hostMessage {
	var out []hostMessage
	for line := range strings.SplitSeq(h.p.Output(), "\n") {
		var m hostMessage
		if strings.HasPrefix(line, `{"jsonrpc":"2.0"`) && json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// answer returns the response to request id, if one came.
func (h *host) answer(id int) (hostMessage, bool) {
	for _, m := range h.messages() {
		if string(m.ID) == fmt.Sprint(id) && m.Method == "" {
			return m, true
		}
	}
	return hostMessage{}, false
}

// waitAnswer waits for the response to request id.
func (h *host) waitAnswer(t *testing.T, id int, bound time.Duration) hostMessage {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		if m, ok := h.answer(id); ok {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer to request %d within %v; mcp-remote output:\n%s", id, bound, h.p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// progress returns the progress values mcp-remote delivered.
func (h *host) progress() []float64 {
	var out []float64
	for _, m := range h.messages() {
		if m.Method == "notifications/progress" && m.Params.Progress != nil {
			out = append(out, *m.Params.Progress)
		}
	}
	return out
}

// resultText returns the text content of a tools/call response.
func resultText(m hostMessage) string {
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	json.Unmarshal(m.Result, &r)
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// open initializes through the bridge, as a host does, and starts a
// countdown of n steps as request 2.
func (h *host) open(t *testing.T, n int) {
	t.Helper()
	h.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"tidemark-interop-host","version":"1.0.0"}}}`)
	h.waitAnswer(t, 1, clientBound)
	h.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	h.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"countdown","arguments":{"n":%d,"delay_ms":20},"_meta":{"progressToken":"host"}}}`, n))
}

// echo sends request id, an echo of text, and waits for its answer.
func (h *host) echo(t *testing.T, id int, text string) string {
	t.Helper()
	h.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":%q}}}`, id, text))
	return resultText(h.waitAnswer(t, id, clientBound))
}

// TestMCPRemoteResumesCut: the relay cuts the countdown's stream after
// progress 10; mcp-remote resumes it once with Last-Event-ID and hands the
// host every progress notification once, then the result. It forwards the
// host's initialize (2025-11-25 here) unchanged: the resumable era.
func TestMCPRemoteResumesCut(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	h := startMCPRemote(t, b.URL())
	h.open(t, steps)
	if got := resultText(h.waitAnswer(t, 2, clientBound)); got != countdownResult(steps) {
		t.Errorf("result %q, want %q", got, countdownResult(steps))
	}
	checkProgress(t, h.progress(), steps)
	checkResumedOnce(t, b.relay)
	checkAsked(t, b.relay, "2025-11-25")
}

// TestMCPRemoteOn409: `tidemark serve --data-dir` is killed during the
// countdown and started again. mcp-remote resumes the call's stream and
// the standalone stream twice each (the SDK it bundles retries once), all
// refused with 409 generation_mismatch, and then never answers the lost
// call: it gives forwarded requests no timeout of its own, so the host's
// decides (still unanswered 3 s later). The host's next call works on the
// same session, without initialize.
func TestMCPRemoteOn409(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	b := startBackend(t, durableStore)
	h, session := restartUnderMCPRemote(t, b, http409Refusal)
	if got := h.echo(t, 3, "after"); got != "after" {
		t.Errorf("call after the restart answered %q, want %q", got, "after")
	}
	calls := where(b.relay.recorded(), func(e exchange) bool { return e.RPC == "tools/call" })
	if len(calls) != 2 || calls[1].Session != session || calls[1].Status != 200 {
		t.Errorf("tools/call requests %v, want the second on session %s, answered 200", calls, session)
	}
	checkStillUnanswered(t, h, 2)
}

// TestMCPRemoteOn404: as TestMCPRemoteOn409 with the memory store. The
// resumes are refused with 404 session_not_found; the lost call is never
// answered. The host's next call gets 404 from Tidemark, upon which
// mcp-remote initializes again by itself (replaying the host's
// initialize), sends the call again on the new session, and hands the
// host its result.
func TestMCPRemoteOn404(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	b := startBackend(t, memoryStore)
	h, session := restartUnderMCPRemote(t, b, http404Refusal)
	if got := h.echo(t, 3, "after"); got != "after" {
		t.Errorf("call after the restart answered %q, want %q", got, "after")
	}
	xs := b.relay.recorded()
	calls := where(xs, func(e exchange) bool { return e.RPC == "tools/call" })
	if len(calls) != 3 || calls[1].Session != session || calls[1].Status != 404 || calls[2].Session == session || calls[2].Status != 200 {
		t.Errorf("tools/call requests %v, want the countdown, the echo refused 404 on session %s, the echo again on a new session answered 200", calls, session)
	}
	reinit := where(xs, func(e exchange) bool { return e.RPC == "initialize" && e.At > calls[1].At })
	if len(reinit) != 1 || reinit[0].Status != 200 || reinit[0].At > calls[2].At {
		t.Errorf("initialize after the 404: %v, want one, answered 200, before the echo was sent again", reinit)
	}
	checkStillUnanswered(t, h, 2)
}

// restartUnderMCPRemote starts a long countdown through mcp-remote,
// restarts the server with SIGKILL during it, and waits until both of the
// call's session's streams were refused twice each, as want says. It
// returns the host and the call's session.
func restartUnderMCPRemote(t *testing.T, b *backend, want refusal) (*host, string) {
	t.Helper()
	h := startMCPRemote(t, b.URL())
	h.open(t, longCountdown)
	b.relay.waitProgress(t, killAfter, clientBound)
	b.restart(t, syscall.SIGKILL)
	session := callSession(t, b.relay.recorded())
	b.relay.waitFor(t, "four refused resumes on the call's session", clientBound, func(xs []exchange) bool {
		return len(where(xs, func(e exchange) bool { return isResume(e) && e.Session == session && e.Status != 0 })) >= 4
	})
	// The SDK retries a refused resume after the server's retry field
	// (100 ms); a third attempt would come by now.
	time.Sleep(time.Second)
	checkRefusedResumes(t, b.relay.recorded(), session, want, 2)
	return h, session
}

// checkStillUnanswered asserts that request id has no answer, and still
// none stillWaiting later.
func checkStillUnanswered(t *testing.T, h *host, id int) {
	t.Helper()
	time.Sleep(stillWaiting)
	if m, ok := h.answer(id); ok {
		t.Errorf("request %d was answered: %s %s", id, m.Result, m.Error)
	}
}

// TestMCPRemoteProtocolEra: with --protocol auto, mcp-remote asks
// server/discover, gets 2026-07-28 from Tidemark, answers the host's
// initialize itself and calls sessionless; a cut stream there has nothing
// to resume with, and the host's call is never answered (still
// unanswered 3 s after the cut), while the next call works.
func TestMCPRemoteProtocolEra(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	h := startMCPRemote(t, b.URL(), "--protocol", "auto")
	h.open(t, steps)
	b.relay.waitProgress(t, cutAfter, clientBound)
	if got := h.echo(t, 3, "after"); got != "after" {
		t.Errorf("call after the cut answered %q, want %q", got, "after")
	}
	checkStillUnanswered(t, h, 2)
	checkSessionless(t, b.relay)
}
