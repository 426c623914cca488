package fleettest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// unavailable checks that a POST for posted and a resuming GET for
// resumed, sent to replica i while Redis is down, are refused with 503
// unavailable. The POST goes to a session that is not idle: the store
// accepts an append before Redis acknowledges it, so a call on a replica
// that has not yet seen the outage ends its session's generation (its
// events could not be stored), as a running tool's does.
func unavailable(t *testing.T, ctx context.Context, f *fleet, i int, posted, resumed, cursor string) {
	t.Helper()
	resp, err := f.on(i, posted).Post(ctx, mcptest.ToolCall(90, "echo", map[string]any{"text": "outage"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, mcptest.ReadStatusError(resp), http.StatusServiceUnavailable, "unavailable")
	_, err = f.on(i, resumed).Resume(ctx, cursor)
	wantRefusal(t, err, http.StatusServiceUnavailable, "unavailable")
}

// TestRedisRestart: Redis with appendonly yes and appendfsync always is
// killed (SIGKILL) and restarted under two replicas. While it is down,
// requests answer 503 unavailable and nothing is acknowledged. Afterwards
// the replicas serve again without a restart of their own: an idle session
// keeps its generation, floor and HWM and replays exactly; a session whose
// tool was producing events during the outage lost its generation (an
// event could not be stored), so its old cursors answer 409 and it goes on
// at generation 2; everything a client received had been stored; no event
// was delivered twice.
func TestRedisRestart(t *testing.T) {
	testenv.NeedRedis(t)
	// A lease longer than the outage: the takeover tests cover lapsed leases.
	f := newFleet(t, 2, redistest.Options{AppendOnly: true}, "--lease-ttl", "10s", "--lease-renew", "1s")
	ctx := testCtx(t, 60*time.Second)
	l := newLedger(t)

	// Session a (owner r0): a countdown that finished before the outage.
	a := f.initialize(ctx, 0, 1)
	evs, err := call(t, ctx, l, f.on(1, a), mcptest.ToolCall(2, "countdown", map[string]any{"n": 10}, "a"))
	if err != nil || !isResult(evs, 2, "countdown of 10 finished") {
		t.Fatalf("countdown on a: %v, %d events", err, len(evs))
	}
	boundsA, err := f.st.Bounds(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	at4 := idOfProgress(t, f, a, 4)

	// Session b (owner r1): a countdown running through the outage.
	b := f.initialize(ctx, 1, 0)
	st, err := f.on(0, b).Call(ctx, mcptest.ToolCall(3, "countdown", map[string]any{"n": 400, "delay_ms": 25}, "b"))
	if err != nil {
		t.Fatal(err)
	}
	sr := readAsync(l, st)
	sr.waitSteps(t, 5, 10*time.Second)

	f.redis.Kill()
	// The outage lasts long enough for b's countdown (a step every 25 ms)
	// to try to store events: that generation cannot go on without a gap.
	time.Sleep(300 * time.Millisecond)
	for _, i := range []int{0, 1} {
		unavailable(t, ctx, f, i, b, a, at4)
		_, err := f.r[i].client.Initialize(ctx, "")
		wantRefusal(t, err, http.StatusServiceUnavailable, "unavailable")
	}
	gotB, stepsB, _ := sr.end(t, 10*time.Second)
	checkSteps(t, "b's progress until the outage", stepsB, 1, len(stepsB))

	f.redis.Restart()
	restarted := time.Now()

	// a is back as it was: same generation, floor and HWM.
	if got, err := f.st.Bounds(ctx, a); err != nil || got.Generation != boundsA.Generation || got.Floor != boundsA.Floor || got.HWM != boundsA.HWM {
		t.Fatalf("bounds of a after the restart: %+v, %v; before: %+v", got, err, boundsA)
	}
	// Everything b's client received had been stored, exactly as received.
	logB, _, err := f.st.Read(ctx, b, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[uint64][]byte{} // what a connection sends of each event
	for _, e := range logB {
		if e.Kind == store.KindMessage {
			stored[e.Seq] = e.Data
		} else {
			stored[e.Seq] = nil // priming and close events go out without data
		}
	}
	for _, ev := range gotB {
		c := cursor(t, ev.ID)
		if data, ok := stored[c.Sequence]; !ok || c.Generation != 1 || !bytes.Equal(data, ev.Data) {
			t.Fatalf("b's client received %s (%s), which the restarted Redis does not hold", ev.ID, ev.Data)
		}
	}

	// The replicas recover by themselves: the first POST after the restart
	// on either replica succeeds (one retry allowed for a pooled connection
	// that died with Redis).
	for attempt := 1; ; attempt++ {
		resp, err := f.on(1, a).Post(ctx, mcptest.ToolCall(4, "echo", map[string]any{"text": "back"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			msgs, err := mcptest.ReadAnswer(resp)
			if err != nil || len(msgs) != 1 {
				t.Fatalf("echo on a after the restart: %v %v", msgs, err)
			}
			t.Logf("recovered: echo answered on attempt %d, %v after Redis restarted", attempt, time.Since(restarted).Round(time.Millisecond))
			break
		}
		se := mcptest.ReadStatusError(resp)
		if attempt == 2 || se.Reason() != "unavailable" {
			t.Fatalf("echo on a after the restart, attempt %d: %v", attempt, se)
		}
	}
	echo(t, ctx, l, f.on(0, a), 5, "still generation 1", 1)

	// a's finished stream replays exactly from progress 4, on both.
	for _, i := range []int{0, 1} {
		evs := replayFrom4(t, ctx, f, i, a, at4)
		for k, ev := range evs[1:7] {
			if p, _ := progressOf(t, ev); p != 5+k {
				t.Fatalf("replay of a on %s: event %d is progress %d, want %d", f.r[i].id, k+1, p, 5+k)
			}
		}
	}

	// b's generation 1 is over: 409 on both replicas, then generation 2.
	lastB := lastID(gotB)
	for _, i := range []int{0, 1} {
		_, err := f.on(i, b).Resume(ctx, lastB)
		wantRefusal(t, err, http.StatusConflict, "generation_mismatch")
	}
	echo(t, ctx, l, f.on(0, b), 6, "b again", 2)
	if rec := f.record(b); rec.Owner != "r1" || rec.Generation != 2 {
		t.Fatalf("record of b: owner %q gen %d, want r1 gen 2", rec.Owner, rec.Generation)
	}
	f.r[1].proc.WaitFor(t, `session=`+regexp.QuoteMeta(store.Prefix(b))+` generation=1 reason=`+string(replay.ReasonGenerationLost), time.Second)
}

// TestRedisRestartWithoutPersistence: a Redis without persistence forgets
// every session when it restarts; every replica then answers 404
// session_not_found for them (never a replay of a state Redis lost), and
// new sessions work. A replica that learns of it only from the call it
// had handed to its live session already answers that call 200 with a
// JSON-RPC error, session_not_found, saying it may have run; the next
// request gets the 404.
func TestRedisRestartWithoutPersistence(t *testing.T) {
	testenv.NeedRedis(t)
	f := newFleet(t, 2, redistest.Options{})
	ctx := testCtx(t, 60*time.Second)
	l := newLedger(t)
	a := f.initialize(ctx, 0, 1)
	evs, err := call(t, ctx, l, f.on(1, a), mcptest.ToolCall(2, "countdown", map[string]any{"n": 5}, "a"))
	if err != nil || !isResult(evs, 2, "countdown of 5 finished") {
		t.Fatalf("countdown: %v", err)
	}
	f.redis.Restart()
	for _, i := range []int{0, 1} {
		var resp *http.Response
		for attempt := 1; ; attempt++ {
			resp, err = f.on(i, a).Post(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "x"}, nil))
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusServiceUnavailable || attempt == 2 {
				break
			}
			resp.Body.Close() // a pooled connection that died with Redis
		}
		if resp.StatusCode == http.StatusOK {
			wantRanLost(t, resp, 3, string(replay.ReasonSessionNotFound))
			if resp, err = f.on(i, a).Post(ctx, mcptest.ToolCall(4, "echo", map[string]any{"text": "x"}, nil)); err != nil {
				t.Fatal(err)
			}
		}
		wantRefusal(t, mcptest.ReadStatusError(resp), http.StatusNotFound, "session_not_found")
		_, err := f.on(i, a).Resume(ctx, evs[1].ID)
		wantRefusal(t, err, http.StatusNotFound, "session_not_found")
		if _, err := f.r[i].client.Initialize(ctx, ""); err != nil {
			t.Fatalf("initialize on %s after the restart: %v", f.r[i].id, err)
		}
	}
}

// wantRanLost checks that resp, a 200 SSE answer to call id, holds its
// JSON-RPC error with error.data.reason reason, saying it may have run.
func wantRanLost(t *testing.T, resp *http.Response, id int64, reason string) {
	t.Helper()
	st, err := mcptest.OpenStream(resp)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Collect()
	if err != nil {
		t.Fatal(err)
	}
	r, ok := evs[len(evs)-1].Response()
	var werr *jsonrpc.Error
	if len(evs) != 1 || !ok || r.ID != mcptest.ID(id) || !errors.As(r.Error, &werr) ||
		!strings.Contains(string(werr.Data), `"reason":"`+reason+`"`) || !strings.Contains(werr.Message, "it may have run") {
		t.Fatalf("answer %v; want one event, the error of call %d with reason %s, saying it may have run", evs, id, reason)
	}
}

// TestServeRedisRefused: `tidemark serve --redis` exits 1, before
// listening, with a message naming the URL and what to do, when Redis
// cannot be reached; --redis with --data-dir is a usage error (2); a Redis
// whose persistence can bring back an older state is served with a
// warning.
func TestServeRedisRefused(t *testing.T) {
	testenv.NeedRedis(t)
	bin := testenv.BuildTidemark(t)
	dead := "redis://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) + "/0"
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--redis", dead)
	var ee *exec.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit status %v with Redis unreachable, want 1; output:\n%s", err, p.Output())
	}
	want := "tidemark serve: --redis " + dead + ": cannot reach Redis ("
	if out := p.Output(); !strings.Contains(out, want) || !strings.Contains(out, "start redis-server there, or point --redis at a running one") || strings.Contains(out, "msg=serving") {
		t.Fatalf("output with Redis unreachable:\n%s\nwant %q and what to do, and no serving line", out, want)
	}

	p = testenv.StartProcess(t, bin, "serve", "--redis", dead, "--data-dir", t.TempDir())
	if err := p.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(p.Output(), "--redis and --data-dir exclude each other") {
		t.Fatalf("--redis with --data-dir: %v\n%s", err, p.Output())
	}
	p = testenv.StartProcess(t, bin, "serve", "--redis", dead, "--lease-ttl", "2s", "--lease-renew", "2s")
	if err := p.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(p.Output(), "--lease-renew (2s) must be positive and below --lease-ttl (2s)") {
		t.Fatalf("--lease-renew = --lease-ttl: %v\n%s", err, p.Output())
	}

	// A Redis with RDB snapshots on: served, with a warning.
	srv := redistest.Start(t, redistest.Options{})
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if err := rdb.ConfigSet(context.Background(), "save", "3600 1").Err(); err != nil {
		t.Fatal(err)
	}
	p = testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--redis", srv.URL())
	testenv.ServeURL(t, p)
	p.WaitFor(t, `level=WARN msg="Redis persistence is unsafe for a fleet: .*" reason=unsafe_persistence persistence="appendonly no, appendfsync everysec, save \\"3600 1\\""`, 5*time.Second)
}

// replayFrom4 resumes a's finished countdown of 10 on replica i from
// at4, the cursor of its progress 4, and returns the events, which must
// be the priming event resuming from at4, six more and the result.
func replayFrom4(t *testing.T, ctx context.Context, f *fleet, i int, a, at4 string) []mcptest.Event {
	t.Helper()
	st, err := f.on(i, a).Resume(ctx, at4)
	if err != nil {
		t.Fatalf("replay of a on %s: %v", f.r[i].id, err)
	}
	evs, err := st.Collect()
	st.Close()
	if err != nil || len(evs) != 1+6+1 || !evs[0].ResumesFrom(at4) || !isResult(evs, 2, "countdown of 10 finished") {
		t.Fatalf("replay of a on %s: %v, %d events, want priming + progress 5..10 + result", f.r[i].id, err, len(evs))
	}
	return evs
}

// TestRedisOutageLongerThanLease: Redis (appendonly yes, appendfsync
// always) stops answering (SIGSTOP) for longer than the lease TTL under
// three replicas, so every lease lapses in the record while nobody can
// renew it; one owner (r2) is killed with kill -9 during the outage. Once
// Redis answers again, a resume of an idle session whose owner r0 is alive,
// sent to r1, replays exactly at generation 1 (regression: r1 took the
// session over at generation 2 the moment it read the lapsed lease, and
// answered 409 generation_mismatch); the record still names r0 at
// generation 1. The dead owner's session is still taken over, one lease
// TTL after Redis answered r1 again: its resume on r1 answers 409
// generation_mismatch at generation 2 and r1 logs reason=lease_expired.
func TestRedisOutageLongerThanLease(t *testing.T) {
	testenv.NeedRedis(t)
	f := newFleet(t, 3, redistest.Options{AppendOnly: true})
	ctx := testCtx(t, 60*time.Second)
	l := newLedger(t)

	// a (owner r0, alive) and d (owner r2, killed): finished countdowns.
	a := f.initialize(ctx, 0, 0)
	d := f.initialize(ctx, 2, 2)
	for _, s := range []struct {
		token string
		owner int
		tag   string
	}{{a, 0, "a"}, {d, 2, "d"}} {
		evs, err := call(t, ctx, l, f.on(s.owner, s.token), mcptest.ToolCall(2, "countdown", map[string]any{"n": 10}, s.tag))
		if err != nil || !isResult(evs, 2, "countdown of 10 finished") {
			t.Fatalf("countdown on %s: %v, %d events", f.r[s.owner].id, err, len(evs))
		}
	}
	at4a, at4d := idOfProgress(t, f, a, 4), idOfProgress(t, f, d, 4)

	f.redis.Pause()
	paused := true
	defer func() {
		if paused {
			f.redis.Resume()
		}
	}()
	kill9(t, f.r[2])
	time.Sleep(leaseTTL + time.Second)
	f.redis.Resume()
	paused = false
	resumed := time.Now()

	// The live owner's session: served exactly, once Redis answers, on r1
	// (which forwards it to r0) and on r0. 503 unavailable until then.
	for _, i := range []int{1, 0} {
		for attempt := 1; ; attempt++ {
			st, err := f.on(i, a).Resume(ctx, at4a)
			if err == nil {
				st.Close()
				break
			}
			var se *mcptest.StatusError
			if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || se.Reason() != "unavailable" || attempt == 20 {
				t.Fatalf("resume of a on %s after the outage, attempt %d: %v, want 200 (or 503 unavailable while Redis comes back)", f.r[i].id, attempt, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
		evs := replayFrom4(t, ctx, f, i, a, at4a)
		for k, ev := range evs[1:7] {
			if p, _ := progressOf(t, ev); p != 5+k {
				t.Fatalf("replay of a on %s: event %d is progress %d, want %d", f.r[i].id, k+1, p, 5+k)
			}
		}
	}
	if rec := f.record(a); rec.Owner != "r0" || rec.Generation != 1 {
		t.Fatalf("record of a after the outage: owner %q gen %d, want r0 gen 1", rec.Owner, rec.Generation)
	}
	if strings.Contains(f.r[1].proc.Output(), `msg="session re-created" session=`+store.Prefix(a)) {
		t.Fatalf("r1 re-created a, whose owner is alive:\n%s", f.r[1].proc.Output())
	}

	// The dead owner's session: taken over at generation 2 by r1.
	for attempt := 1; ; attempt++ {
		_, err := f.on(1, d).Resume(ctx, at4d)
		var se *mcptest.StatusError
		if errors.As(err, &se) && se.Status == http.StatusServiceUnavailable && attempt < 20 {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		se = wantRefusal(t, err, http.StatusConflict, "generation_mismatch")
		if g, cg := se.Body.Data["generation"], se.Body.Data["cursorGeneration"]; g != json.Number("2") || cg != json.Number("1") {
			t.Fatalf("409 for d names generation %v and cursor generation %v, want 2 and 1", g, cg)
		}
		// Countdown 2 finished and its response was stored: not lost.
		if lost, _ := json.Marshal(se.Body.Data["lostRequests"]); string(lost) != "[]" {
			t.Fatalf("409 for d: lostRequests %s, want []: %s", lost, se.RawBody)
		}
		break
	}
	t.Logf("dead owner's session taken over %v after Redis answered again (lease TTL %v)", time.Since(resumed).Round(time.Millisecond), leaseTTL)
	if rec := f.record(d); rec.Owner != "r1" || rec.Generation != 2 {
		t.Fatalf("record of d: owner %q gen %d, want r1 gen 2", rec.Owner, rec.Generation)
	}
	f.r[1].proc.WaitFor(t, `msg="session re-created" session=`+regexp.QuoteMeta(store.Prefix(d))+
		` generation=2 previous_generation=1 previous_owner=r2 reason=lease_expired`, time.Second)
}
