package requeststate_test

// The Ledger a fleet shares, against a real redis-server.

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// TestRedisLedger: two Sealers of one ring, each with its own client of
// one Redis, as two replicas: a state opened on one is refused as
// replayed on the other; the key is gone once the state's expiry passed;
// with Redis unreachable the state is refused with reason unavailable.
func TestRedisLedger(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ring := requeststate.RandomRing()
	sealer := func() (*requeststate.Sealer, *redis.Client) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		return requeststate.New(ring, requeststate.Options{TTL: time.Second, Ledger: requeststate.NewRedisLedger(rdb, "")}), rdb
	}
	a, rdb := sealer()
	b, _ := sealer()
	req := requeststate.Request{Method: "tools/call", Target: "confirm"}
	state, err := a.Seal(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(t.Context(), req, state, nil); err != nil {
		t.Fatalf("first use on B: %v", err)
	}
	for name, s := range map[string]*requeststate.Sealer{"A": a, "B": b} {
		if err := s.Open(t.Context(), req, state, nil); requeststate.ReasonOf(err) != replay.ReasonStateReplayed {
			t.Errorf("replay on %s: %v, want reason %s", name, err, replay.ReasonStateReplayed)
		}
	}
	keys, err := rdb.Keys(t.Context(), requeststate.DefaultLedgerPrefix+"*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("ledger keys %v (%v), want 1", keys, err)
	}
	if ttl := rdb.PTTL(t.Context(), keys[0]).Val(); ttl <= 0 || ttl > time.Second {
		t.Errorf("the used state's key lives %v more, want (0, 1s]", ttl)
	}
	time.Sleep(1100 * time.Millisecond)
	if n := rdb.Exists(t.Context(), keys[0]).Val(); n != 0 {
		t.Errorf("the used state's key outlived the state's expiry")
	}

	fresh, err := a.Seal(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := b.Open(t.Context(), req, fresh, nil); requeststate.ReasonOf(err) != replay.ReasonUnavailable {
		t.Errorf("open with Redis down: %v, want reason %s", err, replay.ReasonUnavailable)
	}
}
