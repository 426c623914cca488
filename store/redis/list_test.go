package redis_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// listed returns every record EachSession gives, by token.
func listed(t *testing.T, s *redis.Store) map[string]store.Record {
	t.Helper()
	got := map[string]store.Record{}
	if err := s.EachSession(context.Background(), func(r store.Record) error {
		got[r.Token] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestListFleet: Replicas lists the announced replicas with their URL and
// TTL, by ID; EachSession gives every live session record with its owner,
// generation, lease, creation and last request, whichever replica wrote
// it, and not the ended ones.
func TestListFleet(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	a, b := open(t, srv, redis.Options{}), open(t, srv, redis.Options{})
	if err := a.Announce(ctx, "r1", "http://10.0.0.1:8080/mcp", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Announce(ctx, "r0", "http://10.0.0.2:8080/mcp", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	lease := time.Date(2026, 12, 6, 12, 0, 10, 0, time.UTC)
	for i, s := range []*redis.Store{a, b, a} {
		rec := store.Record{Token: fmt.Sprintf("TOKEN%d", i), Generation: 1, Owner: fmt.Sprintf("r%d", i%2),
			LeaseUntil: lease, Created: epoch, LastSeen: epoch.Add(time.Duration(i) * time.Second)}
		if err := s.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Claim(ctx, "TOKEN0", "r9", 1, lease.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	create(t, a, "ENDED")
	if err := a.End(ctx, "ENDED", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	reps, err := b.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 || reps[0].ID != "r0" || reps[0].URL != "http://10.0.0.2:8080/mcp" || reps[1].ID != "r1" ||
		reps[1].URL != "http://10.0.0.1:8080/mcp" || reps[0].TTL <= 0 || reps[0].TTL > 5*time.Second || reps[1].TTL > 10*time.Second {
		t.Errorf("Replicas = %+v, want r0 (TTL at most 5s) and r1 (at most 10s) with their URLs", reps)
	}
	got := listed(t, b)
	want := map[string]store.Record{
		"TOKEN0": {Token: "TOKEN0", Generation: 2, Owner: "r9", LeaseUntil: lease.Add(time.Second), Created: epoch, LastSeen: epoch},
		"TOKEN1": {Token: "TOKEN1", Generation: 1, Owner: "r1", LeaseUntil: lease, Created: epoch, LastSeen: epoch.Add(time.Second)},
		"TOKEN2": {Token: "TOKEN2", Generation: 1, Owner: "r0", LeaseUntil: lease, Created: epoch, LastSeen: epoch.Add(2 * time.Second)},
	}
	if len(got) != len(want) {
		t.Fatalf("EachSession gave %d records (%v), want %d", len(got), slices.Sorted(maps.Keys(got)), len(want))
	}
	for tok, w := range want {
		g := got[tok]
		if g.Token != w.Token || g.Generation != w.Generation || g.Owner != w.Owner || !g.LeaseUntil.Equal(w.LeaseUntil) ||
			!g.Created.Equal(w.Created) || !g.LastSeen.Equal(w.LastSeen) {
			t.Errorf("EachSession %s = %+v, want %+v", tok, g, w)
		}
	}
}

// TestListFleetCluster: on a Redis Cluster, EachSession and Replicas see
// the keys of every primary.
func TestListFleetCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	s, err := redis.New(ctx, redis.Options{URL: c.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 60 // tokens spread over the three primaries' slots
	for i := range n {
		create(t, s, fmt.Sprintf("TOK%02d", i))
	}
	for i := range 3 {
		if err := s.Announce(ctx, fmt.Sprintf("replica-%d", i), "http://h/mcp", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if got := listed(t, s); len(got) != n {
		t.Errorf("EachSession on a Cluster gave %d records, want %d", len(got), n)
	}
	if reps, err := s.Replicas(ctx); err != nil || len(reps) != 3 {
		t.Errorf("Replicas on a Cluster = %+v, %v; want 3", reps, err)
	}
}
