package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/store/storetest"
)

// TestMain checks for leaked goroutines, except go-redis's redial of a
// node that a failover test killed: it sleeps a second between attempts
// and ends by itself once its pool is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// open returns a Store on srv, closed at the end of the test.
func open(t testing.TB, srv *redistest.Server, opts redis.Options) *redis.Store {
	t.Helper()
	opts.URL = srv.URL()
	s, err := redis.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New(%s): %v", srv.URL(), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// client returns a plain go-redis client on srv, for looking at keys.
func client(t testing.TB, srv *redistest.Server) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

var epoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func create(t testing.TB, s store.Store, token string) {
	t.Helper()
	if err := s.Create(context.Background(), store.Record{Token: token, Generation: 1, Owner: "p1", Created: epoch, LastSeen: epoch}); err != nil {
		t.Fatalf("Create(%s): %v", token, err)
	}
}

func msgs(datas ...string) []store.Event {
	evs := make([]store.Event, len(datas))
	for i, d := range datas {
		evs[i] = store.Event{Stream: 1, Kind: store.KindMessage, Data: []byte(d), Time: epoch.Add(time.Duration(i) * time.Second)}
	}
	return evs
}

// TestContract runs the store contract; each subtest gets its own key
// prefix on one redis-server, which is a fresh, empty store.
func TestContract(t *testing.T) {
	testenv.NeedRedis(t)
	runContract(t, redistest.Start(t, redistest.Options{}).URL())
}

// runContract runs the store contract on the Redis at url, each subtest
// with its own key prefix.
func runContract(t *testing.T, url string) {
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := redis.New(context.Background(), redis.Options{URL: url, Prefix: fmt.Sprintf("contract%d:", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestPrefix: two Stores with different prefixes on one Redis database do
// not see each other's sessions, and every key a Store writes starts with
// its prefix.
func TestPrefix(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	a := open(t, srv, redis.Options{Prefix: "fleet-a:"})
	b := open(t, srv, redis.Options{})
	create(t, a, "tok")
	if _, err := a.Append(ctx, "tok", 1, msgs("x", "y")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Claim(ctx, "tok", "p2", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "tok"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get on the other prefix = %v, want ErrNotFound", err)
	}
	create(t, b, "tok")
	if bb, err := b.Bounds(ctx, "tok"); err != nil || bb.Generation != 1 || bb.HWM != 0 {
		t.Fatalf("Bounds on the default prefix = %+v, %v; want gen 1 HWM 0", bb, err)
	}
	if err := a.End(ctx, "tok2-never", store.EndDeleted, time.Now().Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("End(unknown) = %v", err)
	}
	if err := a.End(ctx, "tok", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	keys, err := client(t, srv).Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	want := []string{"fleet-a:{tok}:end", "fleet-a:{tok}:wake", "tidemark:{tok}:rec"}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("keys in Redis: %q, want %q", keys, want)
	}
}

// TestTombstoneTTL: the tombstone is a key with a TTL, so it expires in
// Redis without a sweep, after which the token is unknown.
func TestTombstoneTTL(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := open(t, srv, redis.Options{})
	create(t, s, "tok")
	if err := s.End(ctx, "tok", store.EndIdle, time.Now().Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var ended *store.EndedError
	if _, err := s.Get(ctx, "tok"); !errors.As(err, &ended) || ended.Reason != store.EndIdle {
		t.Fatalf("Get right after End = %v, want EndedError(idle)", err)
	}
	ttl, err := client(t, srv).PTTL(ctx, "tidemark:{tok}:end").Result()
	if err != nil || ttl <= 0 || ttl > 300*time.Millisecond {
		t.Fatalf("tombstone TTL = %v, %v; want in (0, 300ms]", ttl, err)
	}
	time.Sleep(ttl + 50*time.Millisecond)
	if _, err := s.Get(ctx, "tok"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after the tombstone's TTL = %v, want ErrNotFound", err)
	}
}

// TestFencingTwoClients: two Stores (two connection pools, as two
// replicas) write one session. The old owner keeps appending while the
// other claims; the old owner's appends end fenced, nothing of the old
// owner is in the new generation, and sequences are unique.
func TestFencingTwoClients(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	a := open(t, srv, redis.Options{})
	b := open(t, srv, redis.Options{})
	create(t, a, "tok")

	const writers = 4
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		okSeqs  []uint64
		fenced  int
		claimed = make(chan struct{})
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				evs := msgs(fmt.Sprintf("old-%d-%d", w, i))
				_, err := a.Append(ctx, "tok", 1, evs)
				mu.Lock()
				switch {
				case err == nil:
					okSeqs = append(okSeqs, evs[0].Seq)
				case errors.Is(err, store.ErrFenced):
					fenced++
				default:
					t.Errorf("Append: %v", err)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	rec, err := b.Claim(ctx, "tok", "p2", 1, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	close(claimed)
	wg.Wait()
	if fenced != writers {
		t.Fatalf("%d writers ended with %d fenced appends, want %d", writers, fenced, writers)
	}
	bb, err := b.Bounds(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(okSeqs, func(i, j int) bool { return okSeqs[i] < okSeqs[j] })
	for i, s := range okSeqs {
		if s != uint64(i+1) {
			t.Fatalf("gen 1 appends got seqs %v…, want 1..%d without gaps or duplicates", okSeqs[:i+1], len(okSeqs))
		}
	}
	// Appends are pipelined: those accepted after the claim are never
	// stored (their generation is lost, fenced), so Redis holds a prefix.
	if rec.Generation != 2 || bb.HWM > uint64(len(okSeqs)) || bb.Floor != bb.HWM+1 || bb.Events != 0 {
		t.Fatalf("after claim: rec gen %d, bounds %+v; want gen 2, HWM at most %d, floor HWM+1, no events", rec.Generation, bb, len(okSeqs))
	}
	// The old owner's late append, its renew and its trim are all refused.
	var fe *store.FencedError
	if _, err := a.Append(ctx, "tok", 1, msgs("late")); !errors.As(err, &fe) || fe.Have != 1 || fe.Want != 2 || fe.Op != "append" {
		t.Fatalf("late append = %v, want FencedError append have 1 want 2", err)
	}
	if err := a.Renew(ctx, "tok", "p1", 1, time.Now()); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("late renew = %v, want ErrFenced", err)
	}
	evs := msgs("new")
	if _, err := b.Append(ctx, "tok", 2, evs); err != nil || evs[0].Seq != bb.HWM+1 {
		t.Fatalf("new owner's append: seq %d, %v; want %d", evs[0].Seq, err, bb.HWM+1)
	}
	got, _, err := a.Read(ctx, "tok", 0, 100)
	if err != nil || len(got) != 1 || string(got[0].Data) != "new" || got[0].Generation != 2 {
		t.Fatalf("log read through the old owner's store: %+v, %v; want only the new owner's event", got, err)
	}

	// Two stores racing to claim generation 2: exactly one wins.
	results := make(chan error, 2)
	for i, s := range []*redis.Store{a, b} {
		go func() {
			_, err := s.Claim(ctx, "tok", fmt.Sprintf("r%d", i), 2, time.Time{})
			results <- err
		}()
	}
	var wins, lost int
	for range 2 {
		switch err := <-results; {
		case err == nil:
			wins++
		case errors.Is(err, store.ErrFenced):
			lost++
		default:
			t.Fatalf("Claim: %v", err)
		}
	}
	if wins != 1 || lost != 1 {
		t.Fatalf("two claimants: %d won, %d fenced; want 1 and 1", wins, lost)
	}
}

// TestLeaseFields: owner, lease and times round-trip exactly.
func TestLeaseFields(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := open(t, srv, redis.Options{})
	lease := time.Date(2026, 12, 1, 8, 30, 15, 123456789, time.UTC)
	rec := store.Record{Token: "tok", Generation: 1, Owner: "replica-a", LeaseUntil: lease, UserID: "alice", State: []byte(`{"v":1}`), Created: epoch}
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "replica-a" || !got.LeaseUntil.Equal(lease) || got.UserID != "alice" || !got.Created.Equal(epoch) || !got.LastSeen.IsZero() {
		t.Fatalf("Get = %+v, want %+v", got, rec)
	}
	if err := s.Renew(ctx, "tok", "replica-a", 1, lease.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch(ctx, "tok", epoch); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Get(ctx, "tok")
	if !got.LeaseUntil.Equal(lease.Add(time.Second)) || !got.LastSeen.Equal(epoch) {
		t.Fatalf("after Renew and Touch: lease %v seen %v, want %v and %v", got.LeaseUntil, got.LastSeen, lease.Add(time.Second), epoch)
	}
	claimed, err := s.Claim(ctx, "tok", "replica-b", 1, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if claimed.Owner != "replica-b" || !claimed.LeaseUntil.IsZero() || claimed.UserID != "alice" || string(claimed.State) != `{"v":1}` {
		t.Fatalf("Claim = %+v, want owner replica-b, no lease, user and state kept", claimed)
	}
}

// TestPersistence reads the server's persistence settings.
func TestPersistence(t *testing.T) {
	testenv.NeedRedis(t)
	ctx := context.Background()
	for _, tc := range []struct {
		aof  bool
		want redis.Persistence
	}{
		{false, redis.Persistence{AppendOnly: false, Fsync: "everysec", Snapshots: ""}},
		{true, redis.Persistence{AppendOnly: true, Fsync: "always", Snapshots: ""}},
	} {
		s := open(t, redistest.Start(t, redistest.Options{AppendOnly: tc.aof}), redis.Options{})
		got, err := s.Persistence(ctx)
		if err != nil || got != tc.want || !got.Safe() {
			t.Fatalf("Persistence (AppendOnly %v) = %+v (safe %v), %v; want %+v, safe", tc.aof, got, got.Safe(), err, tc.want)
		}
	}
	for _, p := range []redis.Persistence{{AppendOnly: true, Fsync: "everysec"}, {Snapshots: "3600 1"}, {Fsync: "everysec", Snapshot: true}} {
		if p.Safe() {
			t.Fatalf("%v reported safe", p)
		}
	}

	// A snapshot taken by hand under "no persistence" is loaded at Redis's
	// next start: unsafe (regression: reported safe, and a restart brought
	// back an older state with no warning). Append-only persistence ignores
	// snapshots at load.
	for _, aof := range []bool{false, true} {
		srv := redistest.Start(t, redistest.Options{AppendOnly: aof})
		s := open(t, srv, redis.Options{})
		if err := client(t, srv).Save(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := s.Persistence(ctx)
		want := redis.Persistence{AppendOnly: aof, Fsync: "everysec", Snapshot: true}
		wantText := `appendonly no, appendfsync everysec, save "", an RDB snapshot written or loaded since Redis started`
		if aof {
			want.Fsync = "always"
			wantText = `appendonly yes, appendfsync always, save ""`
		}
		if err != nil || got != want || got.Safe() != aof || got.String() != wantText {
			t.Fatalf("after SAVE (AppendOnly %v): Persistence = %+v (safe %v, %q), %v; want %+v, safe %v, %q", aof, got, got.Safe(), got.String(), err, want, aof, wantText)
		}
	}
}

// TestTombstoneForm: a tombstone is the string REASON, followed by a
// space and the user when the session had one; a tombstone holding a
// reason alone (as every tombstone written before users were kept) reads
// as that reason with no user.
func TestTombstoneForm(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := open(t, srv, redis.Options{})
	c := client(t, srv)
	if err := s.Create(ctx, store.Record{Token: "tok-a", Generation: 1, UserID: "alice", Created: epoch, LastSeen: epoch}); err != nil {
		t.Fatal(err)
	}
	create(t, s, "tok-n")
	for _, tok := range []string{"tok-a", "tok-n"} {
		if err := s.End(ctx, tok, store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for key, want := range map[string]string{"tidemark:{tok-a}:end": "deleted alice", "tidemark:{tok-n}:end": "deleted"} {
		if got, err := c.Get(ctx, key).Result(); err != nil || got != want {
			t.Fatalf("GET %s = %q, %v; want %q", key, got, err, want)
		}
	}
	if err := c.Set(ctx, "tidemark:{tok-old}:end", "idle", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	var ended *store.EndedError
	want := store.EndedError{Token: "tok-old", Reason: store.EndIdle}
	if _, err := s.Get(ctx, "tok-old"); !errors.As(err, &ended) || *ended != want {
		t.Fatalf("Get of a reason-only tombstone = %v, want %+v", err, want)
	}
	if _, err := s.Claim(ctx, "tok-old", "p1", 1, time.Time{}); !errors.As(err, &ended) || *ended != want {
		t.Fatalf("Claim of a reason-only tombstone = %v, want %+v", err, want)
	}
}
