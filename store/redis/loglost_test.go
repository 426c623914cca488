package redis_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// TestReadLogLost: when a session's log key is gone from Redis while its
// record says events 1 to 3 are retained, Read of any of them fails with
// store.ErrLogLost, also once new events are appended after the loss;
// Bounds still answers, and a Read with nothing retained after it does
// not fail.
func TestReadLogLost(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{})
	create(t, s, "tok")
	if _, err := s.Append(ctx, "tok", 1, msgs("a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	if err := client(t, srv).Del(ctx, "tidemark:{tok}:log").Err(); err != nil {
		t.Fatal(err)
	}
	for _, after := range []uint64{0, 1, 2} {
		if evs, _, err := s.Read(ctx, "tok", after, 10); !errors.Is(err, store.ErrLogLost) {
			t.Errorf("Read after %d: %d events, %v; want store.ErrLogLost", after, len(evs), err)
		}
	}
	const want = "redis store: read session tok: event log lost: the record says sequences 1 to 3 are retained, the log holds none at 2 " +
		"(its key was deleted, or evicted by Redis: set maxmemory-policy noeviction)"
	if _, _, err := s.Read(ctx, "tok", 1, 10); err == nil || err.Error() != want {
		t.Errorf("Read after 1: %v\nwant %s", err, want)
	}
	if b, err := s.Bounds(ctx, "tok"); err != nil || b.Floor != 1 || b.HWM != 3 {
		t.Errorf("Bounds: %+v, %v; want floor 1, HWM 3", b, err)
	}
	if evs, b, err := s.Read(ctx, "tok", 3, 10); err != nil || len(evs) != 0 || b.HWM != 3 {
		t.Errorf("Read after 3 (the HWM): %d events, %+v, %v; want none, no error", len(evs), b, err)
	}
	if _, err := s.Append(ctx, "tok", 1, msgs("d")); err != nil {
		t.Fatal(err)
	}
	// A pipelined append is readable once it is stored.
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Read(ctx, "tok", 2, 10); !errors.Is(err, store.ErrLogLost) {
		t.Errorf("Read after 2, once d is appended: %v, want store.ErrLogLost", err)
	}
	if evs, _, err := s.Read(ctx, "tok", 3, 10); err != nil || len(evs) != 1 || string(evs[0].Data) != "d" {
		t.Errorf("Read after 3, once d is appended: %v, %v; want d", evs, err)
	}
}
