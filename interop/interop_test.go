package interop

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// What every client test shares: the calls they make, and the checks of
// what the relay saw.

const (
	// steps and cutAfter: the cut tests' countdown sends steps progress
	// notifications, 20 ms apart; the relay cuts its stream right after
	// the cutAfter-th.
	steps    = 50
	cutAfter = 10
	// longCountdown and killAfter: the restart tests' countdown would run
	// for 20 s; the server is killed after its killAfter-th progress
	// notification.
	longCountdown = 1000
	killAfter     = 5

	// clientBound bounds a client run, or a wait for what it does.
	clientBound = 60 * time.Second
	// fastFail is how soon (ms) a call that a client fails "at once" must
	// fail: far below any request timeout, with room for a loaded machine.
	fastFail = 5000
	// timerSlack is how late (ms) a client's timer may fire on a loaded
	// machine.
	timerSlack = 3000
	// stillWaiting is how long a test watches a client that neither
	// answers nor fails a lost call, to show it keeps waiting.
	stillWaiting = 3 * time.Second
)

// countdownArgs are the demo countdown's arguments for n steps, 20 ms
// apart.
func countdownArgs(n int) map[string]any { return map[string]any{"n": n, "delay_ms": 20} }

// countdownResult is the demo countdown's text for n steps.
func countdownResult(n int) string { return fmt.Sprintf("countdown of %d finished", n) }

// checkProgress asserts that got is 1, 2, …, n.
func checkProgress(t *testing.T, got []float64, n int) {
	t.Helper()
	if len(got) != n {
		t.Errorf("got %d progress notifications, want %d: %v", len(got), n, got)
		return
	}
	for i, p := range got {
		if p != float64(i+1) {
			t.Errorf("progress notification %d is %v, want %d (later ones not compared)", i+1, p, i+1)
			return
		}
	}
}

// checkResumedOnce asserts that the relay cut one stream and that the
// client resumed it exactly once, with GET and Last-Event-ID set to the id
// of the last event it received, and got 200.
func checkResumedOnce(t *testing.T, r *relay) {
	t.Helper()
	cursor := r.cut()
	if !r.didCut() || cursor == "" {
		t.Fatalf("the relay cut no stream (it cuts after progress %d)", cutAfter)
	}
	// The relay records a stream's status when the stream ends, which
	// can come after the client has its answer and closed the session.
	r.waitFor(t, "end of every resumed stream", 5*time.Second, func(xs []exchange) bool {
		for _, e := range where(xs, isResume) {
			if !e.Done {
				return false
			}
		}
		return true
	})
	resumes := where(r.recorded(), isResume)
	if len(resumes) != 1 || resumes[0].LastEventID != cursor || resumes[0].Status != 200 {
		t.Errorf("resumes %v, want one GET with Last-Event-ID %s (the event cut after) answered 200", resumes, cursor)
	}
}

// checkResumedAfterPrimingCut asserts that the relay cut the stream twice,
// after progress cutAfter and after the first event of its resume, and
// that the client resumed it twice, each time with GET and the id of the
// last event it received as Last-Event-ID, answered 200: the second time
// with the resumed stream's priming event, whose id is new. No event id
// reached the client twice (MCP 2025-11-25: an event id is unique across
// all streams of a session).
func checkResumedAfterPrimingCut(t *testing.T, r *relay) {
	t.Helper()
	cursor, priming := r.cut(), r.primingCutAfter()
	if !r.didCut() || cursor == "" || priming == "" {
		t.Fatalf("the relay cut after %q and after %q, want a progress event and a resumed stream's first event", cursor, priming)
	}
	if priming == cursor {
		t.Errorf("the resumed stream's priming event repeats the cursor %s", cursor)
	}
	resumes := where(r.recorded(), isResume)
	if len(resumes) != 2 || resumes[0].LastEventID != cursor || resumes[1].LastEventID != priming ||
		resumes[0].Status != 200 || resumes[1].Status != 200 {
		t.Errorf("resumes %v, want GET with Last-Event-ID %s, then %s, both answered 200", resumes, cursor, priming)
	}
	if rep := r.repeatedIDs(); len(rep) > 0 {
		t.Errorf("event ids that reached the client more than once: %v", rep)
	}
}

// checkAsked asserts that every initialize asked for protocol version,
// and that no request used the sessionless era (MCP-Protocol-Version
// 2026-07-28).
func checkAsked(t *testing.T, r *relay, version string) {
	t.Helper()
	xs := r.recorded()
	inits := where(xs, func(e exchange) bool { return e.RPC == "initialize" })
	if len(inits) == 0 {
		t.Errorf("no initialize")
	}
	for _, e := range inits {
		if e.Version != version {
			t.Errorf("initialize asked for %q, want %q", e.Version, version)
		}
	}
	for _, e := range xs {
		if e.Protocol >= modernEra {
			t.Errorf("%s used protocol %s; want the session era", e, e.Protocol)
		}
	}
}

// refusal is the answer a restart makes a resume get.
type refusal struct {
	status int
	reason replay.Reason
}

var (
	http409Refusal = refusal{409, replay.ReasonGenerationMismatch}
	http404Refusal = refusal{404, replay.ReasonSessionNotFound}
)

// waitExit waits for p to exit; it calls t.Fatal after bound.
func waitExit(t *testing.T, p *testenv.Process, bound time.Duration) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(bound):
		t.Fatalf("client still running after %v; output:\n%s", bound, p.Output())
	}
}

// checkRefusedResumes asserts that after the restart both streams the
// client had open on session (the call's and the standalone GET stream,
// stream 0) were resumed exactly perStream times, each refused as want
// says.
func checkRefusedResumes(t *testing.T, xs []exchange, session string, want refusal, perStream int) {
	t.Helper()
	byCursor := map[string][]exchange{}
	streams := map[uint64]bool{}
	for _, e := range where(xs, func(e exchange) bool { return isResume(e) && e.Session == session }) {
		byCursor[e.LastEventID] = append(byCursor[e.LastEventID], e)
		if c, err := replay.Parse(e.LastEventID); err == nil {
			streams[c.Stream] = true
		}
	}
	if len(byCursor) != 2 || !streams[0] {
		t.Errorf("resumed cursors %v, want two: the call's stream and the standalone stream (0)", slices.Collect(maps.Keys(byCursor)))
	}
	for cursor, es := range byCursor {
		if len(es) != perStream {
			t.Errorf("cursor %s resumed %d times, want %d", cursor, len(es), perStream)
		}
		for _, e := range es {
			if e.Status != want.status || e.Reason != string(want.reason) {
				t.Errorf("resume of %s answered %d %s, want %d %s", cursor, e.Status, e.Reason, want.status, want.reason)
			}
		}
	}
}

// callSession returns the session of the first tools/call.
func callSession(t *testing.T, xs []exchange) string {
	t.Helper()
	calls := where(xs, func(e exchange) bool { return e.RPC == "tools/call" })
	if len(calls) == 0 {
		t.Fatalf("no tools/call")
	}
	return calls[0].Session
}

// modernEra is the first sessionless protocol version (SEP-2575).
const modernEra = "2026-07-28"

// boundedContext returns a context that ends after clientBound, or with
// the test.
func boundedContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), clientBound)
	t.Cleanup(cancel)
	return ctx
}

// TestMain runs up to 8 tests of this package at once unless -parallel is
// given: each spends its time waiting (on a client's start-up, a restart,
// a 3 s watch), with a few seconds of CPU at most, so the default of one
// test per CPU would make the package's run the sum of those waits.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}
