package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// waitCalls returns how many WAIT commands srv has run.
func waitCalls(t *testing.T, srv *redistest.Server) int {
	return cmdCalls(t, srv, "wait")
}

// cmdCalls returns how many times srv has run the command name (lower
// case), from INFO commandstats.
func cmdCalls(t *testing.T, srv *redistest.Server, name string) int {
	t.Helper()
	stat := srv.Info("commandstats")["cmdstat_"+name]
	calls, _, _ := strings.Cut(strings.TrimPrefix(stat, "calls="), ",")
	n, err := strconv.Atoi(calls)
	if stat != "" && err != nil {
		t.Fatalf("INFO commandstats: cmdstat_%s:%s", name, stat)
	}
	return n
}

// TestRoundTripWaitsOnce: pipelined appends of eight sessions, queued
// while the primary is stopped (SIGSTOP), reach Redis in at most two
// round trips (the one under way when the primary stopped, then
// everything queued meanwhile), and each round trip runs two WAITs (the
// events, then their publication) whatever the number of sessions in it:
// 2 or 4 WAITs for 80 events, where a WAIT per session's call would run
// at least 16. Once Sync returns, the replica holds every event, visible.
func TestRoundTripWaitsOnce(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary.Addr()})
	replica.WaitInSync()
	// The store counts the replicas the primary lists as online (ROLE),
	// which can lag the replica's own view of its link.
	primary.WaitReplicaListed(replica)
	w := open(t, primary, redis.Options{})
	const sessions, each = 8, 10
	for i := range sessions {
		tok := fmt.Sprintf("s%d", i)
		create(t, w, tok)
		// A session's first append is stored before it returns.
		if _, err := w.Append(ctx, tok, 1, msgs("first")); err != nil {
			t.Fatal(err)
		}
	}
	// A pipelined round trip loads its scripts into Redis the first time
	// (NOSCRIPT, then resent with a WAIT of its own): done here, before
	// the count.
	for i := range sessions {
		tok := fmt.Sprintf("s%d", i)
		if _, err := w.Append(ctx, tok, 1, msgs("second")); err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	before := waitCalls(t, primary)
	primary.Pause()
	for i := range sessions {
		for j := range each {
			if _, err := w.Append(ctx, fmt.Sprintf("s%d", i), 1, msgs(fmt.Sprintf("e%d", j))); err != nil {
				primary.Resume()
				t.Fatal(err)
			}
		}
	}
	primary.Resume()
	for i := range sessions {
		if err := w.Sync(ctx, fmt.Sprintf("s%d", i)); err != nil {
			t.Fatalf("Sync(s%d): %v", i, err)
		}
	}
	if got := waitCalls(t, primary) - before; got != 2 && got != 4 {
		t.Errorf("WAITs for %d sessions × %d events = %d, want 2 or 4 (two per round trip)", sessions, each, got)
	}
	r := open(t, replica, redis.Options{Replicas: -1})
	for i := range sessions {
		tok := fmt.Sprintf("s%d", i)
		evs, b, err := r.Read(ctx, tok, 0, 100)
		if err != nil || b.HWM != each+2 || len(evs) != each+2 || string(evs[each+1].Data) != fmt.Sprintf("e%d", each-1) {
			t.Errorf("Read(%s) on the replica = %d events, %+v, %v; want %d events, HWM %d, the last %q",
				tok, len(evs), b, err, each+2, each+2, fmt.Sprintf("e%d", each-1))
		}
	}
}
