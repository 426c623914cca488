package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// TestCheckWrites: Check writes one key, tidemark:readiness with a TTL of
// a minute, and fails with store.ErrUnavailable while Redis answers reads
// but holds writes back (CLIENT PAUSE WRITE: the write is not
// acknowledged within 500 ms) or refuses them (out of memory: its error
// then says so, as a Get's does, rather than only Redis's EXECABORT), and
// passes again once Redis takes writes (regression: nil while every
// session's write waited or failed).
func TestCheckWrites(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{})
	c := client(t, srv)
	ctx := context.Background()
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check with Redis taking writes: %v", err)
	}
	if ttl := c.PTTL(ctx, "tidemark:readiness").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("tidemark:readiness PTTL %v, want (0, 1m]", ttl)
	}
	if n := c.DBSize(ctx).Val(); n != 1 {
		t.Errorf("%d keys after Check, want 1 (the probe's)", n)
	}

	if err := srv.Do("CLIENT", "PAUSE", "3000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	err := s.Check(ctx)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "a write was not acknowledged within 500ms") {
		t.Errorf("Check while Redis pauses writes: %v; want ErrUnavailable, a write not acknowledged within 500ms", err)
	}
	if err := srv.Do("CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}

	if err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	err = s.Check(ctx)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "write probe: Redis refuses writes (out of memory: used memory over maxmemory): store unavailable: OOM ") {
		t.Errorf("Check with Redis out of memory: %v; want ErrUnavailable saying Redis refuses writes (out of memory)", err)
	}
	// Redis refuses the transaction of a Get too (EXECABORT), for the
	// same cause, which its error names.
	_, err = s.Get(ctx, "tok")
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "get session tok: Redis refuses writes (out of memory: used memory over maxmemory): store unavailable: OOM ") ||
		!strings.Contains(err.Error(), "EXECABORT") {
		t.Errorf("Get with Redis out of memory: %v; want ErrUnavailable saying Redis refuses writes (out of memory), and EXECABORT", err)
	}
	if err := srv.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check once Redis takes writes again: %v", err)
	}
}
