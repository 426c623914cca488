package fleettest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// TestSentinelFleet: three replicas on a Sentinel URL (a primary, one
// Redis replica, three redis-sentinel processes). The Redis primary is
// killed (SIGKILL) in the middle of countdowns on two sessions, while a
// third session's countdown finished before. Requests answer 503
// unavailable until Sentinel has promoted the replica; then the replicas
// serve again without a restart: the finished session replays exactly,
// at generation 1, on every replica; everything the running countdowns'
// clients received is on the promoted replica, exactly as received
// (nothing acknowledged lost); their generation ended (an event could
// not be stored), so their cursors answer 409 on every replica and the
// sessions go on at generation 2; no event is delivered twice.
func TestSentinelFleet(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary.Addr()})
	replica.WaitInSync()
	ss := redistest.StartSentinels(t, primary)
	ss.WaitReady(1)
	// A lease longer than the failover: the takeover tests cover lapsed leases.
	f := newFleetOn(t, ss.URL(), 3, "--lease-ttl", "10s", "--lease-renew", "1s")
	failover(t, f, func(string) bool { return true }, func(a, busy, at4 string) {
		primary.Kill()
		unavailable(t, testCtx(t, 10*time.Second), f, 0, busy, a, at4)
		ss.WaitPrimary(replica.Addr())
	})
}

// TestClusterFleet: three replicas on a Redis Cluster URL (three
// primaries with a replica each). The fleet scenarios of a single Redis
// pass on it (round robin, owner killed, zombie fenced), and the failover
// scenario of TestSentinelFleet passes with two busy sessions on one
// primary replaced twice: by CLUSTER FAILOVER FORCE on its replica, then
// by killing (SIGKILL) that new primary, so the old one is promoted back.
func TestClusterFleet(t *testing.T) {
	c := redistest.StartCluster(t)
	t.Run("round_robin", func(t *testing.T) { roundRobinScenario(t, newFleetOn(t, c.URL(), 3)) })
	t.Run("owner_killed", func(t *testing.T) { ownerKilled(t, newFleetOn(t, c.URL(), 3)) })
	t.Run("zombie_fenced", func(t *testing.T) { zombieFenced(t, newFleetOn(t, c.URL(), 2)) })
	t.Run("failover", func(t *testing.T) {
		f := newFleetOn(t, c.URL(), 3, "--lease-ttl", "10s", "--lease-renew", "1s")
		var first *redistest.Server
		on := func(tok string) bool {
			p := c.PrimaryFor(redis.DefaultPrefix + "{" + tok + "}:rec")
			if first == nil {
				first = p
			}
			return p == first
		}
		failover(t, f, on, func(string, string, string) { c.FailoverAndBack(first) })
	})
}

// failover runs the failover scenario of TestSentinelFleet on f: two
// sessions for which on reports true run countdowns while disrupt
// replaces the Redis primary that holds them.
// disrupt gets the token of a third session, idle, the token of one of
// the two busy sessions, and a cursor of the idle one.
func failover(t *testing.T, f *fleet, on func(token string) bool, disrupt func(idle, busy, cursor string)) {
	ctx := testCtx(t, 90*time.Second)
	l := newLedger(t)

	a := f.initialize(ctx, 0, 1)
	evs, err := call(t, ctx, l, f.on(2, a), mcptest.ToolCall(2, "countdown", map[string]any{"n": 10}, "a"))
	if err != nil || !isResult(evs, 2, "countdown of 10 finished") {
		t.Fatalf("countdown on a: %v, %d events", err, len(evs))
	}
	at4 := idOfProgress(t, f, a, 4)

	var running []string
	for len(running) < 2 {
		if tok := f.initialize(ctx, len(running)+1, (len(running)+2)%3); on(tok) {
			running = append(running, tok)
		}
	}
	var readers []*streamReader
	for i, tok := range running {
		st, err := f.on(i, tok).Call(ctx, mcptest.ToolCall(3, "countdown", map[string]any{"n": 400, "delay_ms": 25}, tok[:8]))
		if err != nil {
			t.Fatal(err)
		}
		sr := readAsync(l, st)
		sr.waitSteps(t, 5, 10*time.Second)
		readers = append(readers, sr)
	}

	disrupted := time.Now()
	disrupt(a, running[0], at4)
	t.Logf("a replica was promoted %v after the disruption began", time.Since(disrupted).Round(time.Millisecond))
	var got [][]mcptest.Event
	for i, sr := range readers {
		evs, steps, _ := sr.end(t, 20*time.Second)
		checkSteps(t, "progress of "+running[i][:8]+" until the failover", steps, 1, len(steps))
		got = append(got, evs)
	}

	// Nothing a client received is missing from the promoted replica.
	for i, tok := range running {
		held(t, ctx, f, tok, got[i])
	}

	// Every replica serves again by itself.
	for i := range f.r {
		recovered(t, ctx, f, i, a)
	}
	echo(t, ctx, l, f.on(1, a), 5, "still generation 1", 1)
	for i := range f.r {
		replayFrom4(t, ctx, f, i, a, at4)
	}
	for k, tok := range running {
		last := lastID(got[k])
		for i := range f.r {
			wantRefusal(t, resumeAfterFailover(t, ctx, f, i, tok, last), http.StatusConflict, string(replay.ReasonGenerationMismatch))
		}
		echo(t, ctx, l, f.on(k, tok), int64(6+k), "again", 2)
	}
}

// held waits until the promoted replica shows every event of evs, which
// token's client received, with the data received, and fails the test
// if it does not within 10 s. Until then it may lack the last events'
// publication, which the readers saw on the old primary before the
// replicas acknowledged it: their owner's failover guard publishes them
// again once it sees the new primary (store/redis, failover.go), and the
// store behind f.st finds the new primary after a failed read.
func held(t *testing.T, ctx context.Context, f *fleet, token string, evs []mcptest.Event) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		missing, err := notHeld(t, ctx, f, token, evs)
		if err == nil && missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client of %s received %s, which the promoted replica does not show after 10s (%v)", token[:8], missing, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// notHeld reads token's log and returns the first event of evs that it
// does not hold in generation 1 with the data received ("" if none): a
// priming event is the stream's stored opening event, sent with no data
// (SEP-1699), so only its sequence must be held.
func notHeld(t *testing.T, ctx context.Context, f *fleet, token string, evs []mcptest.Event) (string, error) {
	log, _, err := f.st.Read(ctx, token, 0, 100000)
	if err != nil {
		return "", err
	}
	stored := map[uint64][]byte{}
	for _, e := range log {
		stored[e.Seq] = e.Data
	}
	for _, ev := range evs {
		c := cursor(t, ev.ID)
		data, ok := stored[c.Sequence]
		if !ok || c.Generation != 1 || !ev.IsPriming() && !bytes.Equal(data, ev.Data) {
			return fmt.Sprintf("%s (%s; it holds %q, present %v)", ev.ID, ev.Data, data, ok), nil
		}
	}
	return "", nil
}

// recovered waits until replica i answers a POST for token (echo) with
// 200; until then it must answer 503 unavailable. t.Fatal after 10 s.
func recovered(t *testing.T, ctx context.Context, f *fleet, i int, token string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := f.on(i, token).Post(ctx, mcptest.ToolCall(4, "echo", map[string]any{"text": "back"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			if msgs, err := mcptest.ReadAnswer(resp); err != nil || len(msgs) != 1 {
				t.Fatalf("echo on %s after the failover: %v %v", f.r[i].id, msgs, err)
			}
			return
		}
		se := mcptest.ReadStatusError(resp)
		if se.Reason() != string(replay.ReasonUnavailable) || time.Now().After(deadline) {
			t.Fatalf("echo on %s after the failover: %v", f.r[i].id, se)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// resumeAfterFailover resumes token's stream at cursor on replica i and
// returns the error, retrying while it is 503 unavailable: a replica's
// connection for tailing may still name the old primary, and finds the
// new one when that fails (t.Fatal after 5 s).
func resumeAfterFailover(t *testing.T, ctx context.Context, f *fleet, i int, token, cursor string) error {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := f.on(i, token).Resume(ctx, cursor)
		if err == nil {
			st.Close()
			return nil
		}
		var se *mcptest.StatusError
		if !errors.As(err, &se) || se.Reason() != string(replay.ReasonUnavailable) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("resume on %s after the failover: still %v after 5s", f.r[i].id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
