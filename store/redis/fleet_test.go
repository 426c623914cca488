package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// The Redis store is a fleet's replica directory, and renews many leases
// in one round trip.
var (
	_ fleet.Directory = (*redis.Store)(nil)
	_ fleet.Renewer   = (*redis.Store)(nil)
)

// TestDirectory: a replica's announcement is visible to another Store on
// the same Redis, disappears after its TTL or when withdrawn, and a Redis
// that is down yields ErrUnavailable, not ErrNoReplica.
func TestDirectory(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	a := open(t, srv, redis.Options{})
	b := open(t, srv, redis.Options{})
	ctx := context.Background()

	if _, err := b.Lookup(ctx, "r1"); !errors.Is(err, redis.ErrNoReplica) {
		t.Fatalf("Lookup before Announce: %v, want ErrNoReplica", err)
	}
	if err := a.Announce(ctx, "r1", "http://127.0.0.1:1001/mcp", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := a.Announce(ctx, "r2", "http://127.0.0.1:1002/mcp", time.Minute); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"r1": "http://127.0.0.1:1001/mcp", "r2": "http://127.0.0.1:1002/mcp"} {
		if got, err := b.Lookup(ctx, id); err != nil || got != want {
			t.Fatalf("Lookup(%s) = %q, %v; want %q", id, got, err, want)
		}
	}
	// The TTL in Redis is the one asked for.
	if ttl := client(t, srv).PTTL(ctx, "tidemark:replica:r1").Val(); ttl <= 0 || ttl > 300*time.Millisecond {
		t.Fatalf("PTTL of r1's entry = %v, want (0, 300ms]", ttl)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := b.Lookup(ctx, "r1"); !errors.Is(err, redis.ErrNoReplica) {
		t.Fatalf("Lookup after the TTL: %v, want ErrNoReplica", err)
	}
	if err := a.Withdraw(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lookup(ctx, "r2"); !errors.Is(err, redis.ErrNoReplica) {
		t.Fatalf("Lookup after Withdraw: %v, want ErrNoReplica", err)
	}

	srv.Kill()
	if _, err := b.Lookup(ctx, "r2"); !errors.Is(err, store.ErrUnavailable) || errors.Is(err, redis.ErrNoReplica) {
		t.Fatalf("Lookup with Redis down: %v, want ErrUnavailable only", err)
	}
	if err := a.Announce(ctx, "r1", "x", time.Second); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Announce with Redis down: %v, want ErrUnavailable", err)
	}
}

// TestRenewMany: one call renews many leases, each with Renew's outcome;
// after a Redis restart emptied the script cache it still works; with
// Redis down every renewal reports ErrUnavailable.
func TestRenewMany(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	s := open(t, srv, redis.Options{})
	ctx := context.Background()

	// 2500 sessions: more than two pipeline batches.
	const n = 2500
	tokens := make([]string, n)
	gens := make([]uint64, n)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("renew-%04d", i)
		gens[i] = 1
		create(t, s, tokens[i])
	}
	// Session 1 was taken over (gen 2, another owner), session 2 ended,
	// session 3 never existed, session 4 is renewed by a non-owner.
	if _, err := s.Claim(ctx, tokens[1], "p2", 1, epoch.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.End(ctx, tokens[2], store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	tokens[3] = "renew-missing"
	until := epoch.Add(10 * time.Second)
	errs := s.RenewMany(ctx, "p1", until, tokens, gens)
	if len(errs) != n {
		t.Fatalf("RenewMany returned %d errors for %d sessions", len(errs), n)
	}
	var fenced *store.FencedError
	if !errors.As(errs[1], &fenced) || fenced.Have != 1 || fenced.Want != 2 || fenced.Op != "renew" {
		t.Fatalf("errs[1] = %v, want renew fenced gen 1 by gen 2", errs[1])
	}
	var ended *store.EndedError
	if !errors.As(errs[2], &ended) || ended.Reason != store.EndDeleted {
		t.Fatalf("errs[2] = %v, want ended (deleted)", errs[2])
	}
	if !errors.Is(errs[3], store.ErrNotFound) {
		t.Fatalf("errs[3] = %v, want ErrNotFound", errs[3])
	}
	for i, err := range errs {
		if i >= 1 && i <= 3 {
			continue
		}
		if err != nil {
			t.Fatalf("errs[%d] = %v, want nil", i, err)
		}
	}
	for _, i := range []int{0, 4, n - 1} {
		rec, err := s.Get(ctx, tokens[i])
		if err != nil || !rec.LeaseUntil.Equal(until) || rec.Owner != "p1" {
			t.Fatalf("record %d after RenewMany: lease %v owner %q, %v; want lease %v owner p1", i, rec.LeaseUntil, rec.Owner, err, until)
		}
	}
	if errs := s.RenewMany(ctx, "p2", until, tokens[4:5], gens[4:5]); !errors.As(errs[0], &fenced) {
		t.Fatalf("renewal by a non-owner: %v, want fenced", errs[0])
	}

	// A restarted Redis has no scripts cached: RenewMany loads it again.
	srv.Restart()
	until2 := until.Add(time.Second)
	errs = s.RenewMany(ctx, "p1", until2, tokens[:1], gens[:1])
	if errs[0] != nil {
		t.Fatalf("RenewMany after a Redis restart: %v", errs[0])
	}
	if rec, err := s.Get(ctx, tokens[0]); err != nil || !rec.LeaseUntil.Equal(until2) {
		t.Fatalf("record after restart and renewal: lease %v, %v; want %v", rec.LeaseUntil, err, until2)
	}

	srv.Kill()
	for i, err := range s.RenewMany(ctx, "p1", until2, tokens[:3], gens[:3]) {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Redis down: errs[%d] = %v, want ErrUnavailable", i, err)
		}
	}
}

// TestAnnounceFirst: a starting replica takes its directory entry only when
// it is absent or holds its own URL; another process's entry is reported
// with its URL (ErrReplicaTaken) and left unchanged until it is withdrawn
// or expires.
func TestAnnounceFirst(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	a := open(t, srv, redis.Options{})
	b := open(t, srv, redis.Options{})
	ctx := context.Background()
	const urlA, urlB = "http://127.0.0.1:1001/mcp", "http://127.0.0.1:1002/mcp"

	if holder, err := a.AnnounceFirst(ctx, "r1", urlA, time.Minute); err != nil || holder != "" {
		t.Fatalf("AnnounceFirst on an absent entry = %q, %v; want it taken", holder, err)
	}
	if holder, err := a.AnnounceFirst(ctx, "r1", urlA, time.Minute); err != nil || holder != "" {
		t.Fatalf("AnnounceFirst with the entry's own URL = %q, %v; want it taken again", holder, err)
	}
	holder, err := b.AnnounceFirst(ctx, "r1", urlB, time.Minute)
	if !errors.Is(err, redis.ErrReplicaTaken) || holder != urlA {
		t.Fatalf("AnnounceFirst over another URL = %q, %v; want %q and ErrReplicaTaken", holder, err, urlA)
	}
	if got, _ := b.Lookup(ctx, "r1"); got != urlA {
		t.Fatalf("Lookup after the refused AnnounceFirst = %q, want %q unchanged", got, urlA)
	}
	if err := a.Withdraw(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if holder, err := b.AnnounceFirst(ctx, "r1", urlB, 200*time.Millisecond); err != nil || holder != "" {
		t.Fatalf("AnnounceFirst after Withdraw = %q, %v; want it taken", holder, err)
	}
	time.Sleep(300 * time.Millisecond) // the entry expires
	if holder, err := a.AnnounceFirst(ctx, "r1", urlA, time.Minute); err != nil || holder != "" {
		t.Fatalf("AnnounceFirst after the TTL = %q, %v; want it taken", holder, err)
	}
	srv.Kill()
	if _, err := a.AnnounceFirst(ctx, "r1", urlA, time.Minute); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("AnnounceFirst with Redis down: %v, want ErrUnavailable", err)
	}
}
