package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// outOfMemory sets srv's maxmemory below what it uses, under noeviction:
// from then on Redis refuses every write that can grow its memory (OOM).
func outOfMemory(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if err := srv.Do("CONFIG", "SET", "maxmemory-policy", redis.NoEviction); err != nil {
		t.Fatal(err)
	}
	if err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
}

// TestCreateOutOfMemoryWritesNothing: while Redis is out of memory, a
// Create fails with store.ErrUnavailable naming the cause and writes no
// key, and the End that follows a refused initialize's Create answers
// store.ErrNotFound and writes none either: after three of each, Redis
// holds exactly the keys it held before (regression: Redis checks memory
// only at a script's first write, and the create script's was a DEL, so
// each Create wrote its record past maxmemory and each End a tombstone
// and a wake stream).
func TestCreateOutOfMemoryWritesNothing(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := open(t, srv, redis.Options{})
	c := client(t, srv)
	create(t, s, "live")
	if _, err := s.Append(ctx, "live", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	outOfMemory(t, srv)
	before, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		tok := fmt.Sprintf("tok%d", i)
		err := s.Create(ctx, store.Record{Token: tok, Generation: 1, Owner: "p1", Created: epoch, LastSeen: epoch})
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "OOM command not allowed") {
			t.Errorf("Create %s out of memory = %v; want ErrUnavailable, OOM command not allowed", tok, err)
		}
		if err := s.End(ctx, tok, store.EndInitializeFailed, time.Now().Add(24*time.Hour)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("End %s after its refused Create = %v; want ErrNotFound", tok, err)
		}
	}
	after, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("Redis holds %d keys after 3 refused Creates and their Ends, want the %d it held before: %q", len(after), len(before), after)
	}
}
