package upstream_test

// Gateway tests with real processes on loopback: `tidemark serve
// --upstream` (built by testenv) in front of MCP servers it did not write,
// killed with SIGKILL, probed with `tidemark probe`.

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	tmprobe "github.com/tidemark-mcp/tidemark/internal/probe"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// startTidemarkGateway runs `tidemark serve --addr 127.0.0.1:0 --upstream
// upstreamURL flags...` and returns it with its endpoint URL.
func startTidemarkGateway(t *testing.T, upstreamURL string, flags ...string) (*testenv.Process, string) {
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--upstream", upstreamURL}, flags...)
	p := testenv.StartProcess(t, testenv.BuildTidemark(t), args...)
	return p, testenv.ServeURL(t, p)
}

// startPeer runs interop/go-sdk-memstore (the demo tools on the go-sdk's
// own handler) at addr with --event-store store, and returns it with its
// endpoint URL.
func startPeer(t *testing.T, addr, store string) (*testenv.Process, string) {
	t.Helper()
	p := testenv.StartProcess(t, testenv.Build(t, "./interop/go-sdk-memstore"), "--addr", addr, "--event-store", store)
	return p, testenv.ServeURL(t, p)
}

// TestUpstreamKilled: the upstream (a go-sdk server without event store)
// is killed with SIGKILL during a countdown and started again on the same
// address. The countdown's stream ends with the JSON-RPC error
// upstream_session_lost of generation 1; the client's last cursor before
// that answers 409 generation_mismatch; the same session token serves the
// next call, with no initialize from the client, at generation 2; the new
// upstream process received exactly one initialize, the restored one with
// the client's name; and no event reached the client twice.
func TestUpstreamKilled(t *testing.T) {
	up, upURL := startPeer(t, "127.0.0.1:0", "none")
	addr := hostPort(t, upURL)
	_, gwURL := startTidemarkGateway(t, upURL, "--upstream-resume-timeout", "60s")
	ctx := testContext(t) // from here: the builds are done
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	c := &mcptest.Client{URL: gwURL, HTTP: hc}
	s, err := c.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	long := countdown(2, 1000, 20, "tok")
	st, err := s.Call(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs := untilProgress(t, st, 3)
	last := evs[len(evs)-1].ID

	up.Kill()
	up.Wait()
	up2, _ := startPeer(t, addr, "none")

	rest, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(long.ID) })
	if err != nil {
		t.Fatalf("countdown stream after the kill: %v", err)
	}
	evs = append(evs, rest...)
	reason, gen := errorData(t, response(t, rest))
	if reason != string(replay.ReasonUpstreamSessionLost) || gen != 1 {
		t.Errorf("countdown answered reason %q generation %v, want %q generation 1", reason, gen, replay.ReasonUpstreamSessionLost)
	}
	if got := progressValues(t, evs); !slices.Equal(got, steps(len(got))) {
		t.Errorf("progress %v: want 1, 2, ... each once", got)
	}

	_, err = s.Resume(ctx, last)
	checkStatus(t, "resume from the cursor before the kill", err, http.StatusConflict, replay.ReasonGenerationMismatch)

	next := call(t, ctx, s, mcptest.ToolCall(3, "echo", map[string]string{"text": "after"}, nil))
	if got := toolText(t, response(t, next)); got != "after" {
		t.Errorf("echo after the restart returned %q", got)
	}
	if c := cursor(t, next[len(next)-1]); c.Generation != 2 {
		t.Errorf("the next call ran at generation %d, want 2", c.Generation)
	}
	evs = append(evs, next...)

	inits := regexp.MustCompile(`msg="initialize received" client=(\S+)`).FindAllStringSubmatch(up2.Output(), -1)
	if len(inits) != 1 || inits[0][1] != "mcptest" {
		t.Errorf("the restarted upstream logged initialize %v, want once, from client mcptest", inits)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.ID] {
			t.Errorf("event %s delivered twice", e.ID)
		}
		seen[e.ID] = true
	}
}

// hostPort returns the host:port of a URL.
func hostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestProbeThroughGateway: `tidemark probe` fails against the go-sdk's own
// handler (its memory event store clamps cursors and refuses a takeover;
// without an event store nothing resumes at all), and passes every check
// through the gateway in front of either.
func TestProbeThroughGateway(t *testing.T) {
	const retention = "60"
	for _, store := range []string{"memory", "none"} {
		t.Run("event-store="+store, func(t *testing.T) {
			_, upURL := startPeer(t, "127.0.0.1:0", store)
			direct := runProbe(t, upURL)
			if direct.Fail == 0 {
				t.Errorf("the probe of the upstream itself found no FAIL; this test needs an upstream whose own probe fails")
			}
			_, gwURL := startTidemarkGateway(t, upURL, "--retention-events", retention)
			rep := runProbe(t, "--retention-events", retention, gwURL)
			for _, r := range rep.Results {
				if r.Verdict != tmprobe.Pass {
					t.Errorf("through the gateway: %s = %s %v: %s", r.ID, r.Verdict, r.Statuses, r.Observed)
				}
			}
			if len(rep.Results) != len(tmprobe.CheckIDs()) || rep.Server != "tidemark-demo 1.0.0" {
				t.Errorf("through the gateway: %d checks of server %q, want %d of tidemark-demo 1.0.0",
					len(rep.Results), rep.Server, len(tmprobe.CheckIDs()))
			}
			t.Logf("upstream alone: %d PASS, %d FAIL, %d N/A; through the gateway: %d PASS, %d FAIL, %d N/A",
				direct.Pass, direct.Fail, direct.NA, rep.Pass, rep.Fail, rep.NA)
		})
	}
}

// runProbe runs `tidemark probe --json args...` and decodes its report.
func runProbe(t *testing.T, args ...string) tmprobe.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.BuildTidemark(t), append([]string{"probe", "--json"}, args...)...)
	out, err := cmd.Output()
	var rep tmprobe.Report
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		t.Fatalf("tidemark probe %v: %v; output is not a JSON report: %v\n%s", args, err, jerr, out)
	}
	return rep
}

// freeAddr returns a loopback address with a port free a moment ago, for
// servers that cannot be told to pick one and report it.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitListening waits until addr accepts connections.
func waitListening(t *testing.T, p *testenv.Process, addr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.Done():
			t.Fatalf("the server exited before listening on %s: %v\n%s", addr, p.Wait(), p.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after 60s: %v\n%s", addr, err, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
