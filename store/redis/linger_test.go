package redis_test

// This file tests the pipeline's hold on lingering events
// (store.Event.Linger): a POST stream's opening event goes to Redis in one
// script call with the event that follows it, not in one of its own.

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// scriptCalls returns how many EVALSHA commands the Redis server ran.
func scriptCalls(t *testing.T, c *goredis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestLingerSharesTheNextCall: an opening event waits, invisible, for the
// session's next append, and both are stored by one script call.
func TestLingerSharesTheNextCall(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{Linger: time.Hour})
	c := client(t, srv)
	ctx := context.Background()
	create(t, s, "tok")
	// A generation's first append is stored before it returns; the
	// second is pipelined, and loads the pipeline's script into Redis.
	for range 2 {
		if _, err := s.Append(ctx, "tok", 1, msgs(`{"i":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, c)
	opening := []store.Event{{Stream: store.NewStream, Kind: store.KindPriming, Data: []byte(`[2]`), Time: epoch, Linger: true}}
	if _, err := s.Append(ctx, "tok", 1, opening); err != nil || opening[0].Seq != 3 {
		t.Fatalf("Append of the opening event = %v, seq %d; want 3", err, opening[0].Seq)
	}
	time.Sleep(50 * time.Millisecond)
	if b, err := s.Bounds(ctx, "tok"); err != nil || b.HWM != 2 || scriptCalls(t, c) != before {
		t.Fatalf("50 ms after the opening event alone: HWM %d, %d script calls, %v; want 2 and none (held back)", b.HWM, scriptCalls(t, c)-before, err)
	}
	answer := msgs(`{"i":4}`)
	answer[0].Stream = 3
	if _, err := s.Append(ctx, "tok", 1, answer); err != nil || answer[0].Seq != 4 {
		t.Fatalf("Append of the answer = %v, seq %d; want 4", err, answer[0].Seq)
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	calls := scriptCalls(t, c) - before
	got, b, err := s.Read(ctx, "tok", 2, 10)
	if err != nil || len(got) != 2 || got[0].Seq != 3 || got[0].Kind != store.KindPriming || got[1].Seq != 4 || b.HWM != 4 {
		t.Fatalf("Read = %v, HWM %d, %v; want the opening event and the answer, HWM 4", got, b.HWM, err)
	}
	if calls != 1 {
		t.Fatalf("%d script calls stored the opening event and its answer, want 1", calls)
	}
}

// TestLingerEndsAtItsBound: an opening event with nothing after it is
// sent once Options.Linger has passed, and a Sync waits for it.
func TestLingerEndsAtItsBound(t *testing.T) {
	const linger = 40 * time.Millisecond
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{Linger: linger})
	ctx := context.Background()
	create(t, s, "tok")
	if _, err := s.Append(ctx, "tok", 1, msgs(`{"i":1}`)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	opening := []store.Event{{Stream: store.NewStream, Kind: store.KindPriming, Time: epoch, Linger: true}}
	if _, err := s.Append(ctx, "tok", 1, opening); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < linger {
		t.Fatalf("the opening event alone was stored after %v, want at least the linger, %v", waited, linger)
	}
	if b, err := s.Bounds(ctx, "tok"); err != nil || b.HWM != 2 {
		t.Fatalf("after Sync: HWM %d, %v; want 2", b.HWM, err)
	}
}
