package upstream_test

// The gateway with the stores that outlive a Tidemark process: --data-dir
// (a restart after SIGKILL) and --redis (a fleet whose replica dies). Each
// new generation opens a new upstream session, restored from the record.

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// initializes returns the client names of the initialize requests an
// interop/go-sdk-memstore process logged.
func initializes(p *testenv.Process) []string {
	var out []string
	for _, m := range regexp.MustCompile(`msg="initialize received" client=(\S+)`).FindAllStringSubmatch(p.Output(), -1) {
		out = append(out, m[1])
	}
	return out
}

// echoAt calls echo on s and checks its answer and generation.
func echoAt(t *testing.T, s *mcptest.Session, id int64, gen uint64) mcptest.Event {
	t.Helper()
	evs := call(t, testContext(t), s, mcptest.ToolCall(id, "echo", map[string]string{"text": "hi"}, nil))
	if got := toolText(t, response(t, evs)); got != "hi" {
		t.Errorf("echo returned %q", got)
	}
	last := evs[len(evs)-1]
	if c := cursor(t, last); c.Generation != gen {
		t.Errorf("echo %d ran at generation %d, want %d", id, c.Generation, gen)
	}
	return last
}

// TestDataDirRestart: `tidemark serve --upstream --data-dir` killed with
// SIGKILL and started again on the same directory and address: the
// session goes on at generation 2 without a new initialize from the
// client, in a new upstream session opened with the client's stored
// initialize; the old cursor answers 409.
func TestDataDirRestart(t *testing.T) {
	up, upURL := startPeer(t, "127.0.0.1:0", "none")
	dir := t.TempDir()
	gw, gwURL := startTidemarkGateway(t, upURL, "--data-dir", dir)
	c := &mcptest.Client{URL: gwURL, HTTP: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(c.HTTP.CloseIdleConnections)
	s, err := c.Initialize(testContext(t), "")
	if err != nil {
		t.Fatal(err)
	}
	old := echoAt(t, s, 2, 1)

	gw.Kill()
	gw.Wait()
	p := testenv.StartProcess(t, testenv.BuildTidemark(t), "serve", "--addr", hostPort(t, gwURL), "--upstream", upURL, "--data-dir", dir)
	testenv.ServeURL(t, p)

	_, err = s.Resume(testContext(t), old.ID)
	checkStatus(t, "resume from generation 1", err, http.StatusConflict, replay.ReasonGenerationMismatch)
	echoAt(t, s, 3, 2)
	if got := initializes(up); len(got) != 2 || got[0] != "mcptest" || got[1] != "mcptest" {
		t.Errorf("the upstream received initialize from %v, want the client's and the restored one, both mcptest", got)
	}
}

// TestFleetTakeover: two replicas of a fleet (--redis) in front of one
// upstream; the replica that owns the session is killed with SIGKILL.
// Once its lease has lapsed, the other replica takes the session over at
// generation 2 with a new upstream session, restored from the record in
// Redis; the old cursor answers 409 there.
func TestFleetTakeover(t *testing.T) {
	up, upURL := startPeer(t, "127.0.0.1:0", "none")
	redis := redistest.Start(t, redistest.Options{})
	fleet := []string{"--redis", redis.URL(), "--lease-ttl", "2s", "--lease-renew", "500ms"}
	a, aURL := startTidemarkGateway(t, upURL, append(fleet, "--replica-id", "a")...)
	_, bURL := startTidemarkGateway(t, upURL, append(fleet, "--replica-id", "b")...)

	ca := &mcptest.Client{URL: aURL, HTTP: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(ca.HTTP.CloseIdleConnections)
	s, err := ca.Initialize(testContext(t), "")
	if err != nil {
		t.Fatal(err)
	}
	old := echoAt(t, s, 2, 1)
	a.Kill()
	a.Wait()

	cb := &mcptest.Client{URL: bURL, HTTP: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(cb.HTTP.CloseIdleConnections)
	sb := cb.SessionFor(s.Token, s.ProtocolVersion)
	// Replica b waits for a's lease to lapse (503 meanwhile), then takes
	// the session over.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = sb.Resume(testContext(t), old.ID)
		if se, ok := mcptest.AsStatusError(err); !ok || se.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkStatus(t, "resume from generation 1 at replica b", err, http.StatusConflict, replay.ReasonGenerationMismatch)
	echoAt(t, sb, 3, 2)
	if got := initializes(up); len(got) != 2 || got[0] != "mcptest" || got[1] != "mcptest" {
		t.Errorf("the upstream received initialize from %v, want the client's and the restored one, both mcptest", got)
	}
}
