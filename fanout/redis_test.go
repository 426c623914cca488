package fanout_test

// Tests of the Bus across replicas: three buses, each attached to its own
// server, on one real redis-server.

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/fanout"
	"github.com/tidemark-mcp/tidemark/internal/listentest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// client returns a go-redis client of srv, closed with the test.
func client(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// fleet returns three replicas whose buses share srv.
func fleet(t *testing.T, srv *redistest.Server, logs *testenv.LogBuffer) []*replica {
	t.Helper()
	var rs []*replica
	for range 3 {
		opts := fanout.Options{Redis: client(t, srv), Block: 200 * time.Millisecond}
		if logs != nil {
			opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
		}
		rs = append(rs, newReplica(t, newBus(t, opts)))
	}
	return rs
}

// TestFleet: a resource update raised on A and a tools list change raised
// on C reach listeners on A and B exactly once each: the raising replica
// does not deliver its own entry again, and no entry is appended twice.
func TestFleet(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rs := fleet(t, srv, nil)
	onA, onB := listen(t, rs[0]), listen(t, rs[1])
	ctx := t.Context()
	if err := rs[0].bus.Raise(ctx, fanout.Notification{Method: fanout.ResourceUpdated, URI: watched}); err != nil {
		t.Fatal(err)
	}
	if err := rs[2].bus.Raise(ctx, fanout.Notification{Method: fanout.ToolsListChanged}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		listentest.Key(listentest.ResourceUpdated, watched): 1,
		listentest.ToolsChanged:                             1,
	}
	onA.Exactly(t, want, wait)
	onB.Exactly(t, want, wait)
	if n, err := client(t, srv).XLen(ctx, fanout.DefaultKey).Result(); err != nil || n != 2 {
		t.Errorf("stream %s holds %d entries (%v), want 2", fanout.DefaultKey, n, err)
	}
}

// TestRedisRestart: while Redis is down a raise reaches the raising
// replica's listeners only and says so; once Redis is back, a raise reaches
// every replica again, once.
func TestRedisRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	var logs testenv.LogBuffer
	rs := fleet(t, srv, &logs)
	onA, onB := listen(t, rs[0]), listen(t, rs[1])
	srv.Kill()
	err := rs[0].bus.Raise(t.Context(), fanout.Notification{Method: fanout.ResourceUpdated, URI: watched})
	if err == nil || !strings.Contains(err.Error(), "reached this replica's listeners only") {
		t.Errorf("raise with Redis down: %v, want an error saying it reached this replica only", err)
	}
	onA.WaitFor(t, listentest.Key(listentest.ResourceUpdated, watched), 1, wait)
	srv.Restart()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	for {
		// The first raises after the restart may find the pool's dead
		// connections; a raise that failed reached A alone.
		err = rs[2].bus.Raise(ctx, fanout.Notification{Method: fanout.ToolsListChanged})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("raise after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	onB.Exactly(t, map[string]int{listentest.ToolsChanged: 1}, wait)
	onA.Exactly(t, map[string]int{listentest.ToolsChanged: 1, listentest.Key(listentest.ResourceUpdated, watched): 1}, wait)
	if !strings.Contains(logs.String(), `msg="cannot read the fleet's notification stream; retrying" key=tidemark:notifications reason=unavailable`) {
		t.Errorf("no log line saying the stream could not be read; log:\n%s", logs.String())
	}
}
