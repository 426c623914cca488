package redis_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
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

// TestCheckStoppedReplica: a primary with one replica, which every write
// waits for up to 1 s (ReplicationTimeout's default), whether
// Options.Replicas is 0 (every replica connected) or 1. See
// checkStoppedReplica.
func TestCheckStoppedReplica(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary.Addr()})
	replica.WaitInSync()
	primary.WaitReplicaListed(replica)
	checkStoppedReplica(t, primary, replica, []namedStore{
		{"Replicas 0", open(t, primary, redis.Options{})},
		{"Replicas 1", open(t, primary, redis.Options{Replicas: 1})},
	})
}

// TestCheckStoppedReplicaSentinel: checkStoppedReplica through a Sentinel
// URL, with Options.Replicas 0: a primary, one replica, three sentinels.
func TestCheckStoppedReplicaSentinel(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary.Addr()})
	replica.WaitInSync()
	primary.WaitReplicaListed(replica)
	ss := redistest.StartSentinels(t, primary)
	ss.WaitReady(1)
	checkStoppedReplica(t, primary, replica, []namedStore{{"Sentinel, Replicas 0", openURL(t, ss.URL(), redis.Options{})}})
}

type namedStore struct {
	name string
	s    *redis.Store
}

// checkStoppedReplica: with the replica of primary running, Check passes
// on each of stores at each of 40 calls 50 ms apart (over two of the
// replica's ack periods: no flapping). While the replica is stopped
// (SIGSTOP: it stays connected, and online to the primary) a Create of
// session stopped-replica (whose keys primary holds) through the first
// of stores fails (ErrUnavailable, 0 of 1 replicas), and Check fails
// within 5 s with ErrUnavailable naming the replica and its lag, over
// the bound of 2 s; once it runs again (SIGCONT) Check passes within 5 s,
// then at each of 40 calls again (regression: Check passed throughout
// while every write failed).
func checkStoppedReplica(t *testing.T, primary, replica *redistest.Server, stores []namedStore) {
	t.Helper()
	ctx := context.Background()
	everyCall := func(when string) {
		t.Helper()
		for i := range 40 {
			for _, st := range stores {
				if err := st.s.Check(ctx); err != nil {
					t.Fatalf("%s: Check %d %s: %v", st.name, i, when, err)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	everyCall("with the replica running")

	replica.Pause()
	t.Cleanup(replica.Resume)
	stopped := time.Now()
	want := regexp.MustCompile(`^redis store: 0 of the 1 replicas writes must reach are connected to the primary ` +
		regexp.QuoteMeta(primary.Addr()) + ` with a lag of at most 2s \(` + regexp.QuoteMeta(replica.Addr()) +
		`: lag (\d+)s\); writes fail until they are: store unavailable$`)
	for _, st := range stores {
		var err error
		for err == nil && time.Since(stopped) < 5*time.Second {
			time.Sleep(100 * time.Millisecond)
			err = st.s.Check(ctx)
		}
		m := want.FindStringSubmatch(fmt.Sprint(err))
		if !errors.Is(err, store.ErrUnavailable) || m == nil {
			t.Fatalf("%s: Check %v after the replica stopped: %v; want ErrUnavailable matching %s",
				st.name, time.Since(stopped).Round(time.Millisecond), err, want)
		}
		lag, _ := strconv.Atoi(m[1])
		if lag < 3 {
			t.Errorf("%s: Check's error names a lag of %ds, want over the bound of 2s", st.name, lag)
		}
		t.Logf("%s: Check failed %v after the replica stopped, at a lag of %ds", st.name, time.Since(stopped).Round(time.Millisecond), lag)
	}
	err := stores[0].s.Create(ctx, store.Record{Token: "stopped-replica", Generation: 1, Owner: "p1", Created: epoch, LastSeen: epoch})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "replicated to 0 of 1 replicas within 1s") {
		t.Errorf("Create with the replica stopped: %v; want ErrUnavailable, replicated to 0 of 1 replicas within 1s", err)
	}

	replica.Resume()
	resumed := time.Now()
	for _, st := range stores {
		for err := st.s.Check(ctx); err != nil; err = st.s.Check(ctx) {
			if time.Since(resumed) > 5*time.Second {
				t.Fatalf("%s: Check 5s after the replica resumed: %v", st.name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	everyCall("after the replica resumed")
}
