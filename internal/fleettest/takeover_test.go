package fleettest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/listentest"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
)

// kill9 sends SIGKILL to a replica and waits until it is gone.
func kill9(t *testing.T, r *replica) {
	t.Helper()
	r.proc.Kill()
	select {
	case <-r.proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die within 10s of SIGKILL", r.id)
	}
}

// streamReader reads a stream in the background, recording what arrives.
type streamReader struct {
	mu    sync.Mutex
	evs   []mcptest.Event
	steps []int
	done  chan struct{}
	err   error
}

func readAsync(l *ledger, st *mcptest.Stream) *streamReader {
	sr := &streamReader{done: make(chan struct{})}
	go func() {
		defer close(sr.done)
		defer st.Close()
		for {
			ev, err := st.Next()
			if err != nil {
				sr.err = err
				return
			}
			n := l.note(ev)
			sr.mu.Lock()
			sr.evs = append(sr.evs, ev)
			if n > 0 {
				sr.steps = append(sr.steps, n)
			}
			sr.mu.Unlock()
		}
	}()
	return sr
}

// waitSteps waits until the reader has seen at least n progress steps.
func (sr *streamReader) waitSteps(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		sr.mu.Lock()
		got := len(sr.steps)
		sr.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-sr.done:
			t.Fatalf("the stream ended (%v) after %d progress steps, want %d", sr.err, got, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("fewer than %d progress steps within %v", n, within)
}

// end waits for the stream to end and returns everything it got.
func (sr *streamReader) end(t *testing.T, within time.Duration) ([]mcptest.Event, []int, error) {
	t.Helper()
	select {
	case <-sr.done:
	case <-time.After(within):
		t.Fatalf("the stream did not end within %v", within)
	}
	return sr.evs, sr.steps, sr.err
}

// lastID returns the ID of the last event with one.
func lastID(evs []mcptest.Event) string {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].HasID && evs[i].ID != "" {
			return evs[i].ID
		}
	}
	return ""
}

// TestOwnerKilled: kill -9 of the replica that owns a session in the
// middle of a countdown. Within the lease TTL + 1 s a POST for the session
// on another replica succeeds at generation 2; every surviving replica
// answers 409 generation_mismatch to the old cursors; no event is
// delivered twice.
func TestOwnerKilled(t *testing.T) {
	testenv.NeedRedis(t)
	ownerKilled(t, newFleet(t, 3, redistest.Options{}))
}

// ownerKilled is the scenario of TestOwnerKilled on the fleet f.
func ownerKilled(t *testing.T, f *fleet) {
	ctx := testCtx(t, 60*time.Second)
	l := newLedger(t)

	token := f.initialize(ctx, 0, 1) // owned by r0
	st, err := f.on(1, token).Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 200, "delay_ms": 50}, "k"))
	if err != nil {
		t.Fatal(err)
	}
	sr := readAsync(l, st)
	sr.waitSteps(t, 5, 10*time.Second)

	kill9(t, f.r[0])
	killed := time.Now()
	evs, steps, err := sr.end(t, 10*time.Second)
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("the stream forwarded from r1 to the killed owner ended cleanly (%v), want a cut", err)
	}
	checkSteps(t, "progress before the kill", steps, 1, len(steps))
	old := lastID(evs)
	if g := cursor(t, old).Generation; g != 1 {
		t.Fatalf("cursor %s before the kill has generation %d, want 1", old, g)
	}

	// A POST on r2: it waits for r0's lease to lapse, takes the session over
	// and answers at generation 2.
	echo(t, ctx, l, f.on(2, token), 3, "after the kill", 2)
	took := time.Since(killed)
	if took > leaseTTL+time.Second {
		t.Fatalf("the POST after the kill succeeded %v after it, want within the lease TTL + 1s (%v)", took, leaseTTL+time.Second)
	}
	t.Logf("takeover: first successful POST %v after kill -9", took.Round(time.Millisecond))
	if rec := f.record(token); rec.Owner != "r2" || rec.Generation != 2 {
		t.Fatalf("record after the takeover: owner %q gen %d, want r2 gen 2", rec.Owner, rec.Generation)
	}
	if !regexp.MustCompile(`msg="session re-created" session=` + regexp.QuoteMeta(store.Prefix(token)) +
		` generation=2 previous_generation=1 previous_owner=r0 reason=lease_expired`).MatchString(f.r[2].proc.Output()) {
		t.Fatalf("r2 did not log the takeover with reason=lease_expired")
	}

	// The old cursors answer 409 on every surviving replica.
	for _, i := range []int{1, 2} {
		for _, id := range []string{old, evs[0].ID} {
			_, err := f.on(i, token).Resume(ctx, id)
			se := wantRefusal(t, err, http.StatusConflict, "generation_mismatch")
			if g, cg := se.Body.Data["generation"], se.Body.Data["cursorGeneration"]; g != json.Number("2") || cg != json.Number("1") {
				t.Fatalf("409 on %s names generation %v and cursor generation %v, want 2 and 1", f.r[i].id, g, cg)
			}
		}
	}
	// r1 forwards to the new owner; the session works there too.
	echo(t, ctx, l, f.on(1, token), 4, "through r1", 2)
}

// TestRestartedInPlace: a replica killed with kill -9 mid-call and
// started again on the same address under another replica ID (the
// default ID is random) finds the session owned by its earlier process,
// which the directory places at its own URL. The resume waits for that
// lease to lapse and answers 409 generation_mismatch at generation 2 with
// the lost call's id, as from any other replica (regression: it forwarded
// the request to itself and answered 503 owner_moved until the lease
// lapsed).
func TestRestartedInPlace(t *testing.T) {
	testenv.NeedRedis(t)
	ctx := testCtx(t, 60*time.Second)
	f := newFleet(t, 0, redistest.Options{}, "--lease-ttl", "6s", "--lease-renew", "1s")
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	f.r = append(f.r, f.startAt("before", addr))
	l := newLedger(t)

	token := f.initialize(ctx, 0, 0)
	st, err := f.on(0, token).Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 400, "delay_ms": 50}, "k"))
	if err != nil {
		t.Fatal(err)
	}
	sr := readAsync(l, st)
	sr.waitSteps(t, 3, 10*time.Second)
	kill9(t, f.r[0])
	evs, _, _ := sr.end(t, 10*time.Second)
	old := lastID(evs)

	f.r = append(f.r, f.startAt("after", addr))
	if rec := f.record(token); rec.Owner != "before" || !rec.LeaseUntil.After(time.Now()) {
		t.Fatalf("record before the resume: owner %q, lease until %v; want the killed replica's lease, not lapsed", rec.Owner, rec.LeaseUntil)
	}
	_, err = f.on(1, token).Resume(ctx, old)
	se := wantRefusal(t, err, http.StatusConflict, "generation_mismatch")
	if g, cg := se.Body.Data["generation"], se.Body.Data["cursorGeneration"]; g != json.Number("2") || cg != json.Number("1") {
		t.Fatalf("409 names generation %v and cursor generation %v, want 2 and 1", g, cg)
	}
	if lost := fmt.Sprint(se.Body.Data["lostRequests"]); lost != "[2]" {
		t.Fatalf("409 lostRequests %s, want [2]: %s", lost, se.RawBody)
	}
	if rec := f.record(token); rec.Owner != "after" || rec.Generation != 2 {
		t.Fatalf("record after the resume: owner %q generation %d, want after at 2", rec.Owner, rec.Generation)
	}
}

// TestZombieFenced: the owner is paused (SIGSTOP) past its lease while its
// countdown runs; another replica takes the session over; the old owner is
// resumed (SIGCONT) with its tool still producing progress. None of its
// late events is stored or delivered, and its attempts are logged as
// fenced.
func TestZombieFenced(t *testing.T) {
	testenv.NeedRedis(t)
	zombieFenced(t, newFleet(t, 2, redistest.Options{}))
}

// zombieFenced is the scenario of TestZombieFenced on the fleet f.
func zombieFenced(t *testing.T, f *fleet) {
	ctx := testCtx(t, 60*time.Second)
	l := newLedger(t)

	token := f.initialize(ctx, 0, 0) // owned by r0
	st, err := f.on(0, token).Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 400, "delay_ms": 25}, "z"))
	if err != nil {
		t.Fatal(err)
	}
	sr := readAsync(l, st)
	sr.waitSteps(t, 3, 10*time.Second)

	if err := f.r[0].proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			f.r[0].proc.Signal(syscall.SIGCONT)
		}
	}()
	time.Sleep(50 * time.Millisecond) // an append in flight lands or not
	before, err := f.st.Bounds(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(leaseTTL + 300*time.Millisecond)

	// r1 finds the lease lapsed and takes the session over.
	echo(t, ctx, l, f.on(1, token), 3, "taken over", 2)
	if rec := f.record(token); rec.Owner != "r1" || rec.Generation != 2 {
		t.Fatalf("record after the takeover: owner %q gen %d, want r1 gen 2", rec.Owner, rec.Generation)
	}

	f.r[0].proc.Signal(syscall.SIGCONT)
	stopped = false
	// The zombie's countdown goes on until its next append (every 25 ms) or
	// its next renewal is refused.
	f.r[0].proc.WaitFor(t, `session=`+regexp.QuoteMeta(store.Prefix(token))+` generation=1 reason=fenced`, 5*time.Second)
	time.Sleep(500 * time.Millisecond) // 20 more steps, were it not stopped

	// Nothing of generation 1 is in the log: the claim dropped it, and
	// nothing the zombie tried after it was stored.
	evs, b, err := f.st.Read(ctx, token, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	if b.Generation != 2 || b.Floor != before.HWM+1 {
		t.Fatalf("bounds after the takeover: %+v, want generation 2, floor %d (HWM at the pause + 1)", b, before.HWM+1)
	}
	for _, e := range evs {
		if e.Generation != 2 || bytes.Contains(e.Data, []byte(`"progressToken":"z"`)) {
			t.Fatalf("the log holds event %d of generation %d: %s", e.Seq, e.Generation, e.Data)
		}
	}
	if len(evs) != 2 { // the echo's priming event and response
		t.Fatalf("the log holds %d events after the takeover, want 2 (the echo's)", len(evs))
	}

	// The client's stream from the zombie ends without any late event.
	got, steps, err := sr.end(t, 10*time.Second)
	checkSteps(t, "progress from the zombie's stream", steps, 1, len(steps))
	for _, ev := range got {
		if c := cursor(t, ev.ID); c.Generation != 1 || c.Sequence > before.HWM {
			t.Fatalf("the zombie's stream delivered %s, beyond the HWM %d stored before the pause", ev.ID, before.HWM)
		}
	}
	t.Logf("zombie's stream: %d progress steps, then %v", len(steps), err)

	// The old owner, awake, now forwards the session's requests to r1.
	echo(t, ctx, l, f.on(0, token), 4, "via the old owner", 2)
	_, err = f.on(0, token).Resume(ctx, lastID(got))
	wantRefusal(t, err, http.StatusConflict, "generation_mismatch")
}

// TestDuplicateReplicaIDRefused: a second process started with the replica
// ID of a live one waits for that ID's directory entry, which the live
// replica keeps renewing, and exits 1 after twice the lease TTL, naming the
// other process; the live replica keeps serving. A replica restarted after
// kill -9 under its old ID waits only until the dead one's entry expires.
// (Regression, found by a tester: both processes served, each re-creating
// the other's sessions at generation+1 on every request and failing their
// calls in flight.)
func TestDuplicateReplicaIDRefused(t *testing.T) {
	testenv.NeedRedis(t)
	ctx := testCtx(t, 60*time.Second)
	f := newFleet(t, 1, redistest.Options{})
	token := f.initialize(ctx, 0, 0)

	start := time.Now()
	dup := testenv.StartProcess(t, f.bin, "serve", "--addr", "127.0.0.1:0", "--redis", f.redis.URL(), "--replica-id", "r0",
		"--lease-ttl", leaseTTL.String(), "--lease-renew", leaseRenew.String())
	select {
	case <-dup.Done():
	case <-time.After(2*leaseTTL + 5*time.Second):
		t.Fatalf("the duplicate still runs %v after its start; output:\n%s", time.Since(start), dup.Output())
	}
	took := time.Since(start)
	var ee *exec.ExitError
	if err := dup.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("duplicate exit: %v, want exit status 1", err)
	}
	want := "tidemark serve: --replica-id r0 is announced by another live process at " + f.r[0].url +
		" (it kept its entry for 4s): give each replica a unique --replica-id"
	if out := dup.Output(); !strings.Contains(out, want) || !strings.Contains(out, "reason=replica_id_in_use") {
		t.Fatalf("duplicate output lacks %q or its waiting line:\n%s", want, out)
	}
	if took < 2*leaseTTL {
		t.Fatalf("the duplicate gave up after %v, want after waiting 2 × the lease TTL (%v)", took, 2*leaseTTL)
	}
	// The live replica and its session are untouched: generation 1.
	if rec := f.record(token); rec.Generation != 1 || rec.Owner != "r0" {
		t.Fatalf("record after the duplicate = generation %d owner %q, want 1 and r0", rec.Generation, rec.Owner)
	}
	l := newLedger(t)
	echo(t, ctx, l, f.on(0, token), 2, "still here", 1)

	// kill -9 and a restart under the same ID on a new address: it waits
	// for the dead entry's TTL, then serves.
	f.r[0].proc.Kill()
	restart := time.Now()
	r := f.start("r0")
	if d := time.Since(restart); d > leaseTTL+3*time.Second {
		t.Fatalf("the restarted replica served after %v, want within the lease TTL (%v) and some", d, leaseTTL)
	}
	if got, err := f.st.Lookup(ctx, "r0"); err != nil || got != r.url {
		t.Fatalf("directory entry of r0 = %q, %v; want the restarted replica's %s", got, err, r.url)
	}
}

// TestFrozenOwner: on a Redis Cluster fleet, the replica that owns a
// session is stopped (SIGSTOP), and a call of the demo's notify tool for
// that session is sent at once to another replica, which forwards it to
// the stopped owner: the request waits in the owner's socket, unanswered.
// For --lease-ttl 300ms, 3s and 10s, the call is answered within the
// lease TTL + 1 s of the stop, 200 with the tool's result, at generation
// 2 on the replica that received it: it gave the forwarded request up when
// the owner's lease lapsed, and took the session over. The owner, once
// resumed (SIGCONT), reads the request from its socket and refuses it:
// the notification the call raises through Redis reaches a listener on
// another replica exactly once.
func TestFrozenOwner(t *testing.T) {
	c := redistest.StartCluster(t)
	for _, ttl := range []time.Duration{300 * time.Millisecond, 3 * time.Second, 10 * time.Second} {
		t.Run("lease="+ttl.String(), func(t *testing.T) {
			f := newFleetOn(t, c.URL(), 2, "--lease-ttl", ttl.String(), "--lease-renew", (ttl / 4).String())
			frozenOwner(t, f, ttl)
		})
	}
}

// waitStopped waits until every thread of process pid is stopped (state
// T in /proc/PID/task/TID/stat): SIGSTOP takes effect as each thread is
// next scheduled, and the scenario needs an owner that answers nothing
// from the moment the call is sent.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("threads of process %d: %v", pid, err)
		}
		running := 0
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			// The state follows the command, which is in parentheses.
			if i := bytes.LastIndexByte(b, ')'); err == nil && (i < 0 || i+2 >= len(b) || b[i+2] != 'T') {
				running++
			}
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d threads of process %d still not stopped 5s after SIGSTOP", running, pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// frozenOwner is the scenario of TestFrozenOwner on the fleet f of two
// replicas with leases of ttl.
func frozenOwner(t *testing.T, f *fleet, ttl time.Duration) {
	ctx := testCtx(t, 60*time.Second)
	uri := "demo://frozen-" + ttl.String()
	rec := listentest.New()
	lc := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1.0.0"}, rec.Options())
	rec.Watch(lc)
	cs := sessionless(t, f.r[1].url, lc)
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("listen on r1: %v", err)
	}
	rec.WaitFor(t, listentest.Acknowledged, 2, 30*time.Second)

	token := f.initialize(ctx, 0, 0) // owned by r0
	if err := f.r[0].proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, f.r[0].proc.Pid())
	stopped := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			f.r[0].proc.Signal(syscall.SIGCONT)
		}
	}()

	l := newLedger(t)
	evs, err := call(t, ctx, l, f.on(1, token), mcptest.ToolCall(2, "notify", demo.NotifyArgs{Method: listentest.ResourceUpdated, URI: uri}, nil))
	took := time.Since(stopped)
	if err != nil {
		t.Fatalf("the call for the stopped owner's session, %v after the stop: %v", took.Round(time.Millisecond), err)
	}
	if !isResult(evs, 2, "notified "+listentest.ResourceUpdated+" "+uri) {
		t.Fatalf("the call answered %v, want the notify tool's result", evs)
	}
	if g := cursor(t, evs[0].ID).Generation; g != 2 {
		t.Fatalf("the call was answered at generation %d, want 2", g)
	}
	if took > ttl+time.Second {
		t.Fatalf("the call was answered %v after the stop, want within the lease TTL + 1s (%v)", took, ttl+time.Second)
	}
	t.Logf("lease %v: answered at generation 2, %v after SIGSTOP", ttl, took.Round(time.Millisecond))
	if r := f.record(token); r.Owner != "r1" || r.Generation != 2 {
		t.Fatalf("record after the takeover: owner %q gen %d, want r1 gen 2", r.Owner, r.Generation)
	}
	prefix := regexp.QuoteMeta(store.Prefix(token))
	f.r[1].proc.WaitFor(t, `msg="session re-created" session=`+prefix+` generation=2 previous_generation=1 previous_owner=r0 reason=lease_expired`, time.Second)

	// The owner wakes: its generation is fenced, and the request that sat
	// in its socket is refused, not run.
	f.r[0].proc.Signal(syscall.SIGCONT)
	resumed = true
	f.r[0].proc.WaitFor(t, `session=`+prefix+` generation=1 reason=fenced`, 10*time.Second)
	refused := f.r[0].proc.WaitFor(t, `msg="request refused" status=503 reason=(owner_moved|unavailable) detail=.*`, 10*time.Second)
	t.Logf("the owner, resumed: %s", refused[0])
	rec.Exactly(t, map[string]int{listentest.Key(listentest.ResourceUpdated, uri): 1}, 10*time.Second)
}
