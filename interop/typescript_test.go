package interop

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// The TypeScript SDK client (@modelcontextprotocol/sdk 1.32.2, Client with
// StreamableHTTPClientTransport, default options unless a test says
// otherwise), driven by ts/steps.mjs. docs/clients.md ("What MCP clients
// do with Tidemark's answers") cites these tests.

// tsStep is one step of ts/steps.mjs.
type tsStep struct {
	Connect  bool           `json:"connect,omitempty"`
	Call     string         `json:"call,omitempty"`
	Args     map[string]any `json:"args,omitempty"`
	Progress bool           `json:"progress,omitempty"`
	Timeout  int            `json:"timeout,omitempty"` // ms
	Await    bool           `json:"await,omitempty"`   // wait for tsRun.proceed
}

// tsLine is one line ts/steps.mjs printed.
type tsLine struct {
	Step            *int     `json:"step"`
	Connected       bool     `json:"connected"`
	SessionID       string   `json:"sessionId"`
	ProtocolVersion string   `json:"protocolVersion"`
	Progress        *float64 `json:"progress"`
	Result          *string  `json:"result"`
	IsError         bool     `json:"isError"`
	Error           string   `json:"error"`
	Code            *int     `json:"code"`
	Name            string   `json:"name"`
	MS              int      `json:"ms"`
	SinceProgressMS *int     `json:"sinceProgressMs"`
	TransportError  string   `json:"transportError"`
}

// tsOutcome is what the client reported for one step.
type tsOutcome struct {
	progress []float64
	end      *tsLine // the step's connected, result or error line
}

// tsRun is a running ts/steps.mjs.
type tsRun struct {
	*testenv.Process
	in io.WriteCloser
}

// proceed lets the script past its next await step.
func (r *tsRun) proceed(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(r.in, "go\n"); err != nil {
		t.Fatalf("steps.mjs stdin: %v", err)
	}
}

// startTS runs ts/steps.mjs against url.
func startTS(t *testing.T, url string, steps ...tsStep) *tsRun {
	t.Helper()
	spec, err := json.Marshal(map[string]any{"steps": steps})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Node(t), testenv.NodeScript(t, "ts/steps.mjs"), url, string(spec))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return &tsRun{Process: testenv.StartCmd(t, cmd), in: in}
}

// waitTS waits for steps.mjs to exit 0 and returns each step's outcome.
func waitTS(t *testing.T, p *tsRun, bound time.Duration) []tsOutcome {
	t.Helper()
	waitExit(t, p.Process, bound)
	if err := p.Wait(); err != nil {
		t.Fatalf("steps.mjs: %v; output:\n%s", err, p.Output())
	}
	var out []tsOutcome
	for line := range strings.SplitSeq(p.Output(), "\n") {
		var l tsLine
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &l) != nil || l.Step == nil {
			continue // a transport error, or Node.js diagnostics
		}
		for len(out) <= *l.Step {
			out = append(out, tsOutcome{})
		}
		if l.Progress != nil {
			out[*l.Step].progress = append(out[*l.Step].progress, *l.Progress)
		} else {
			out[*l.Step].end = &l
		}
	}
	return out
}

// TestTypeScriptSDKResumesCut: the relay cuts the countdown's POST stream
// after progress 10; the SDK resumes it once, with GET and the cut event's
// id as Last-Event-ID, and reports every progress notification once, in
// order, then the result. It asks for protocol 2025-11-25 (its newest; it
// cannot speak 2026-07-28), so Tidemark serves it the resumable era.
func TestTypeScriptSDKResumesCut(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	p := startTS(t, b.URL(),
		tsStep{Connect: true},
		tsStep{Call: "countdown", Args: countdownArgs(steps), Progress: true, Timeout: 10_000})
	got := waitTS(t, p, clientBound)
	if c := got[0].end; c == nil || !c.Connected || c.ProtocolVersion != "2025-11-25" || c.SessionID == "" {
		t.Fatalf("connect: got %+v, want connected at 2025-11-25 with a session ID", c)
	}
	call := got[1]
	checkProgress(t, call.progress, steps)
	if call.end == nil || call.end.Result == nil || *call.end.Result != countdownResult(steps) || call.end.IsError {
		t.Errorf("call: got %+v, want result %q", call.end, countdownResult(steps))
	}
	checkResumedOnce(t, b.relay)
	checkAsked(t, b.relay, "2025-11-25")
}

// TestTypeScriptSDKResumesAfterPrimingCut: as TestTypeScriptSDKResumesCut,
// and the relay also cuts the resumed stream right after its first event,
// the priming event. The SDK keeps the last event id per connection and
// resumes again with that event's id: it still reports every progress
// notification once, in order, then the result, and no event id reaches it
// twice.
func TestTypeScriptSDKResumesAfterPrimingCut(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	b := startBackend(t, memoryStore)
	b.relay.cutAt(cutAfter)
	b.relay.cutResumedPriming()
	p := startTS(t, b.URL(),
		tsStep{Connect: true},
		tsStep{Call: "countdown", Args: countdownArgs(steps), Progress: true, Timeout: 10_000})
	got := waitTS(t, p, clientBound)
	call := got[1]
	checkProgress(t, call.progress, steps)
	if call.end == nil || call.end.Result == nil || *call.end.Result != countdownResult(steps) || call.end.IsError {
		t.Errorf("call: got %+v, want result %q", call.end, countdownResult(steps))
	}
	checkResumedAfterPrimingCut(t, b.relay)
}

// TestTypeScriptSDKOn409: `tidemark serve --data-dir` is killed with
// SIGKILL during a countdown and started again; the session continues at
// generation 2. The SDK resumes the call's stream and its standalone GET
// stream; each resume is refused with 409 generation_mismatch and retried
// once (reconnectionOptions.maxRetries, default 2, counts attempts), then
// given up: no GET stream is open afterwards. The lost call fails only
// when its request timeout ends, counted from its last progress
// notification (timeout 2 s here; the SDK's default is 60 s). The next call
// on the same client succeeds on the same session, without initialize.
func TestTypeScriptSDKOn409(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	checkTSRestart(t, durableStore, http409Refusal)
}

// TestTypeScriptSDKOn404: as TestTypeScriptSDKOn409 with the memory store,
// whose restart forgets the session: the resumes are refused with 404
// session_not_found (twice per stream), the lost call fails at its request
// timeout, and the next call is rejected at once with a StreamableHTTPError
// whose code is 404; the SDK does not initialize again by itself. A new
// Client and transport connect (initialize), work, and open their own
// standalone stream.
func TestTypeScriptSDKOn404(t *testing.T) {
	testenv.NeedNode(t)
	t.Parallel()
	checkTSRestart(t, memoryStore, http404Refusal)
}

// tsCallTimeout is the request timeout (ms) the restart tests give the
// lost call.
const tsCallTimeout = 2000

func checkTSRestart(t *testing.T, st store, want refusal) {
	b := startBackend(t, st)
	steps := []tsStep{
		{Connect: true},
		{Call: "countdown", Args: countdownArgs(longCountdown), Progress: true, Timeout: tsCallTimeout},
		{Await: true},
		{Call: "echo", Args: map[string]any{"text": "after"}},
	}
	if st == memoryStore {
		steps = append(steps, tsStep{Connect: true}, tsStep{Call: "echo", Args: map[string]any{"text": "again"}})
	}
	p := startTS(t, b.URL(), steps...)
	b.relay.waitProgress(t, killAfter, clientBound)
	b.restart(t, syscall.SIGKILL)
	// The next call waits until the client has given up its streams: two
	// refusals each, and time for a third attempt (100 ms retry) to show.
	b.relay.waitFor(t, "four refused resumes", clientBound, func(xs []exchange) bool {
		return len(where(xs, func(e exchange) bool { return isResume(e) && e.Done })) >= 4
	})
	time.Sleep(time.Second)
	p.proceed(t)
	got := waitTS(t, p, clientBound)
	xs := b.relay.recorded()
	if c := got[0].end; c == nil || !c.Connected {
		t.Fatalf("connect: got %+v", c)
	}

	session := got[0].end.SessionID
	checkRefusedResumes(t, xs, session, want, 2)
	// Given up: the session's standalone stream is not opened again either.
	if gets := where(xs, func(e exchange) bool { return e.Method == "GET" && e.LastEventID == "" && e.Session == session }); len(gets) != 1 {
		t.Errorf("%d GETs without Last-Event-ID on session %s, want 1 (the standalone stream opened after initialize, never again)", len(gets), session)
	}

	lost := got[1].end
	if lost == nil || lost.Name != "McpError" || lost.Code == nil || *lost.Code != -32001 || lost.SinceProgressMS == nil {
		t.Fatalf("lost call: got %+v, want McpError -32001 (request timed out) after progress", lost)
	}
	if ms := *lost.SinceProgressMS; ms < tsCallTimeout-50 || ms > tsCallTimeout+timerSlack {
		t.Errorf("lost call failed %d ms after its last progress, want its timeout, %d ms (+%d ms slack)", ms, tsCallTimeout, timerSlack)
	}

	next := got[3].end
	inits := where(xs, func(e exchange) bool { return e.RPC == "initialize" })
	switch st {
	case durableStore:
		if next == nil || next.Result == nil || *next.Result != "after" {
			t.Errorf("call after the restart: got %+v, want result %q on the same session", next, "after")
		}
		if len(inits) != 1 {
			t.Errorf("%d initialize requests, want 1 (the session continues)", len(inits))
		}
		if calls := where(xs, func(e exchange) bool { return e.RPC == "tools/call" }); len(calls) != 2 || calls[1].Session != session || calls[1].Status != 200 {
			t.Errorf("tools/call requests %v, want the second on session %s, answered 200", calls, session)
		}
	case memoryStore:
		if next == nil || next.Name != "StreamableHTTPError" || next.Code == nil || *next.Code != 404 || next.MS > fastFail {
			t.Errorf("call after the restart: got %+v, want StreamableHTTPError code 404 within %d ms", next, fastFail)
		}
		if len(inits) != 2 || inits[1].Session != "" {
			t.Errorf("initialize requests: %v, want 2: the first connect's and the new Client's (the SDK does not initialize again on 404)", inits)
		}
		if again := got[5].end; again == nil || again.Result == nil || *again.Result != "again" {
			t.Errorf("call on a new Client: got %+v, want result %q", again, "again")
		}
		if c := got[4].end; c == nil || !c.Connected {
			t.Fatalf("connect again: got %+v", c)
		}
		fresh := got[4].end.SessionID
		if gets := where(xs, func(e exchange) bool { return e.Method == "GET" && e.LastEventID == "" && e.Session == fresh }); fresh == session || len(gets) != 1 || gets[0].Status != 200 {
			t.Errorf("new Client's session %s: standalone GETs %v, want one answered 200", fresh, gets)
		}
	}
}
