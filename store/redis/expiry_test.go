package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// TestAbandonedSessionExpires: a session whose owner went away after
// its last write (no sweep of any replica indexes it) leaves Redis by
// itself: every key of it has an expiry, none goes before the idle TTL,
// the record goes first (a read then finds no record, never a record
// without its log), and afterwards the token is unknown to another
// Store, with no key of it left.
func TestAbandonedSessionExpires(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	const idle, margin = 2 * time.Second, 100 * time.Millisecond
	keep := idle + idle/4 + margin // expiry.go
	owner := open(t, srv, redis.Options{IdleTTL: idle, IdleMargin: margin})
	create(t, owner, "tok")
	// A claim makes the wake stream; an opening event the open set.
	if _, err := owner.Claim(ctx, "tok", "p1", 1, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	opening := store.Event{Stream: store.NewStream, Kind: store.KindPriming, Data: []byte(`[7]`), Time: epoch}
	if _, err := owner.Append(ctx, "tok", 2, []store.Event{opening, msgs("a")[0]}); err != nil {
		t.Fatal(err)
	}
	if err := owner.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	if err := owner.Touch(ctx, "tok", time.Now()); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	owner.Close() // the owner is gone: nothing writes the session again

	c := client(t, srv)
	keys := []string{"tidemark:{tok}:rec", "tidemark:{tok}:log", "tidemark:{tok}:wake", "tidemark:{tok}:open"}
	for i, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		upper := keep + keep/8
		if i > 0 {
			upper += time.Second
		}
		if err != nil || ttl < keep-time.Since(last) || ttl > upper {
			t.Fatalf("PTTL %s = %v, %v; want in [%v, %v]", k, ttl, err, keep-time.Since(last), upper)
		}
	}
	if n := c.Exists(ctx, "tidemark:{tok}:end").Val(); n != 0 {
		t.Fatalf("tombstone of a live session exists (%d)", n)
	}

	time.Sleep(time.Until(last.Add(idle)))
	if n := c.Exists(ctx, keys...).Val(); n != int64(len(keys)) {
		t.Fatalf("%d of the session's %d keys exist at its idle TTL, want all", n, len(keys))
	}
	other := open(t, srv, redis.Options{IdleTTL: idle, IdleMargin: margin})
	for c.Exists(ctx, keys[0]).Val() == 1 {
		if time.Since(last) > keep+keep/8+time.Second {
			t.Fatalf("record still in Redis %v after the last write, want gone after %v", time.Since(last), keep+keep/8)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, err := other.Read(ctx, "tok", 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Read as the record expires = %v, want ErrNotFound", err)
	}
	if n := c.Exists(ctx, keys[1]).Val(); n != 1 {
		t.Fatalf("log gone with the record (%d); want it to outlive the record by its tail", n)
	}
	for c.Exists(ctx, keys...).Val() > 0 {
		if time.Since(last) > keep+keep/8+3*time.Second {
			t.Fatalf("keys %v still in Redis %v after the last write", keys, time.Since(last))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := c.Keys(ctx, "*").Result(); err != nil || len(got) != 0 {
		t.Fatalf("keys left in Redis: %q, %v; want none", got, err)
	}
	if _, err := other.Get(ctx, "tok"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after expiry = %v, want ErrNotFound", err)
	}
}

// TestHibernatedSessionKeepsItsIdleTTL: a session hibernated (no owner,
// nothing writes it) keeps every key for at least its idle TTL after the
// hibernation, which counts as a write.
func TestHibernatedSessionKeepsItsIdleTTL(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	const idle = time.Hour
	s := open(t, srv, redis.Options{IdleTTL: idle})
	create(t, s, "tok")
	if _, err := s.Append(ctx, "tok", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	c := client(t, srv)
	// As a session hibernated after most of its keep: the record's
	// expiry is short when Hibernate runs.
	c.PExpire(ctx, "tidemark:{tok}:rec", time.Minute)
	if err := s.Hibernate(ctx, "tok", "p1", 1, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tidemark:{tok}:rec", "tidemark:{tok}:log"} {
		if ttl := c.PTTL(ctx, k).Val(); ttl < idle+idle/4+redis.DefaultIdleMargin-time.Minute {
			t.Fatalf("PTTL %s after Hibernate = %v, want at least the idle TTL and its margins", k, ttl)
		}
	}
}

// TestNoExpiry: a negative IdleTTL leaves a session's keys without one.
func TestNoExpiry(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := open(t, srv, redis.Options{IdleTTL: -1})
	create(t, s, "tok")
	if _, err := s.Append(ctx, "tok", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	c := client(t, srv)
	for _, k := range []string{"tidemark:{tok}:rec", "tidemark:{tok}:log"} {
		if ttl, err := c.PTTL(ctx, k).Result(); err != nil || ttl != -1 {
			t.Fatalf("PTTL %s = %v, %v; want -1 (no expiry)", k, ttl, err)
		}
	}
}
