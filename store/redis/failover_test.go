package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// book records what the storm's clients were given: every event any
// reader read and every event an append acknowledged, by cursor
// (session, generation, sequence). Two different events under one cursor
// is the failure the replication wait and the failover guard exist to
// prevent.
type book struct {
	t  *testing.T
	mu sync.Mutex
	m  map[string]string
}

func (b *book) note(token string, ev store.Event) {
	k := fmt.Sprintf("%s/%d/%d", token, ev.Generation, ev.Seq)
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.m[k]; ok && old != string(ev.Data) {
		b.t.Errorf("cursor %s names two events: %q and %q", k, old, ev.Data)
	}
	b.m[k] = string(ev.Data)
}

// stormOwner is the writer of one session, as a replica's registry is:
// it appends one event at a time, counting it acknowledged once Sync
// returns (as a connection waits for it), and, when that fails, ends its
// generation: it checks that every event it had acknowledged is still
// stored (nothing acknowledged lost), then claims generation+1.
type stormOwner struct {
	t       *testing.T
	st      *redis.Store
	book    *book
	token   string
	gen     uint64
	acked   []store.Event // acknowledged in gen
	n       int
	failed  atomic.Int64 // appends that failed
	lost    atomic.Int64 // generations that lost acknowledged events
	appends atomic.Int64 // acknowledged appends
}

func (o *stormOwner) run(ctx context.Context) {
	for ctx.Err() == nil {
		o.n++
		evs := []store.Event{{Stream: 1, Kind: store.KindMessage, Data: []byte(fmt.Sprintf("%s-%d", o.token, o.n)), Time: epoch}}
		_, err := o.st.Append(ctx, o.token, o.gen, evs)
		if err == nil {
			// Append only assigns the sequence (pipeline.go); the event
			// is acknowledged once Sync reports it stored and replicated.
			err = o.st.Sync(ctx, o.token)
		}
		if err == nil {
			o.book.note(o.token, evs[0])
			o.acked = append(o.acked, evs[0])
			o.appends.Add(1)
			time.Sleep(2 * time.Millisecond)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		o.failed.Add(1)
		if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrFenced) {
			o.t.Errorf("append %s gen %d: %v, want ErrUnavailable during a failover", store.Prefix(o.token), o.gen, err)
		}
		o.nextGeneration(ctx)
	}
}

// nextGeneration waits for Redis to answer, checks the acknowledged
// events of the ending generation, and claims the next one.
func (o *stormOwner) nextGeneration(ctx context.Context) {
	for ctx.Err() == nil {
		evs, b, err := o.st.Read(ctx, o.token, 0, 1<<20)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if b.Generation != o.gen {
			o.lost.Add(1) // the guard moved the session on
		} else {
			o.checkAcked(evs)
		}
		rec, err := o.st.Claim(ctx, o.token, "owner", b.Generation, time.Time{})
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		o.gen, o.acked = rec.Generation, nil
		return
	}
}

// checkAcked fails the test unless evs holds every acknowledged event.
func (o *stormOwner) checkAcked(evs []store.Event) {
	have := map[uint64]string{}
	for _, e := range evs {
		have[e.Seq] = string(e.Data)
	}
	for _, a := range o.acked {
		if got, ok := have[a.Seq]; !ok || got != string(a.Data) {
			o.t.Errorf("session %s gen %d: acknowledged event %d %q is stored as %q (present %v)",
				store.Prefix(o.token), o.gen, a.Seq, a.Data, got, ok)
		}
	}
}

// stormReader tails one session from another Store, as an SSE reader on
// another replica does, and checks that each generation's events arrive
// without a gap.
func stormReader(ctx context.Context, t *testing.T, st *redis.Store, bk *book, token string, read *atomic.Int64) {
	var gen, after uint64
	for ctx.Err() == nil {
		evs, b, err := st.Read(ctx, token, after, 100)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if b.Generation != gen {
			// A client would get 409 for its old cursors and start over.
			gen, after = b.Generation, b.Floor-1
			continue
		}
		for _, e := range evs {
			if e.Generation != gen || e.Seq != after+1 {
				t.Errorf("reader of %s: event gen %d seq %d after gen %d seq %d: a gap or a foreign event", store.Prefix(token), e.Generation, e.Seq, gen, after)
			}
			bk.note(token, e)
			after = e.Seq
			read.Add(1)
		}
		if len(evs) == 0 {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			st.Wait(wctx, token, after)
			cancel()
		}
	}
}

// storm runs an owner and a reader on each of sessions, calls disrupt
// once every owner has acknowledged 20 events, and stops once every owner
// has acknowledged 30 more after disrupt returned. It returns the owners.
func storm(t *testing.T, w, r *redis.Store, sessions int, disrupt func()) []*stormOwner {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bk := &book{t: t, m: map[string]string{}}
	var owners []*stormOwner
	var wg sync.WaitGroup
	var read atomic.Int64
	for i := range sessions {
		token := fmt.Sprintf("storm%d", i)
		create(t, w, token)
		o := &stormOwner{t: t, st: w, book: bk, token: token, gen: 1}
		owners = append(owners, o)
		wg.Add(2)
		go func() { defer wg.Done(); o.run(ctx) }()
		go func() { defer wg.Done(); stormReader(ctx, t, r, bk, token, &read) }()
	}
	waitAppends := func(n int64, within time.Duration) {
		deadline := time.Now().Add(within)
		for _, o := range owners {
			for o.appends.Load() < n {
				if time.Now().After(deadline) {
					t.Fatalf("session %s: %d acknowledged appends, want %d within %v", o.token, o.appends.Load(), n, within)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	waitAppends(20, 20*time.Second)
	disrupt()
	base := int64(0)
	for _, o := range owners {
		base = max(base, o.appends.Load())
	}
	waitAppends(base+30, 30*time.Second)
	cancel()
	wg.Wait()
	t.Logf("%d sessions: %d events read, failed appends per session %v", sessions, read.Load(), failures(owners))
	return owners
}

func failures(owners []*stormOwner) []int64 {
	var out []int64
	for _, o := range owners {
		out = append(out, o.failed.Load())
	}
	return out
}

// TestSentinelFailover: a primary, one replica and three redis-sentinel
// processes; the primary is killed (SIGKILL) while four sessions are
// written and tailed through the Sentinel URL. Appends fail with
// ErrUnavailable until the promoted replica answers, then go on; every
// acknowledged event is on the promoted replica (the replication wait),
// no cursor names two events, readers see no gap.
func TestSentinelFailover(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary.Addr()})
	replica.WaitInSync()
	ss := redistest.StartSentinels(t, primary)
	ss.WaitReady(1)
	w := openURL(t, ss.URL(), redis.Options{})
	r := openURL(t, ss.URL(), redis.Options{})
	owners := storm(t, w, r, 4, func() {
		primary.Kill()
		ss.WaitPrimary(replica.Addr())
	})
	for _, o := range owners {
		if o.lost.Load() != 0 {
			t.Errorf("session %s lost acknowledged events %d times, want 0 with the replication wait", o.token, o.lost.Load())
		}
	}
}

// openURL returns a Store on url, closed at the end of the test.
func openURL(t *testing.T, url string, opts redis.Options) *redis.Store {
	t.Helper()
	opts.URL = url
	s, err := redis.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New(%s): %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSentinelFailoverLoss: the failover guard, with the replication
// wait off (Options.Replicas < 0) and the replica's link held (its
// replication stream passes through a proxy that stops forwarding), so
// that the promoted replica lacks the last events the old primary
// acknowledged. Both sessions move to generation 2 with floor HWM+1 at
// the replica's HWM, so the old cursors answer 409 and no cursor is
// reused: the idle one by the replication-ID watch, the busy one by that
// or by its next append, whose batch fails as fenced.
func TestSentinelFailoverLoss(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica, hold := heldReplica(t, primary, 0)
	ss := redistest.StartSentinels(t, primary)
	ss.WaitReady(1)
	w := openURL(t, ss.URL(), redis.Options{Replicas: -1})
	for _, tok := range []string{"busy", "idle"} {
		create(t, w, tok)
		if _, err := w.Append(ctx, tok, 1, msgs("a", "b", "c")); err != nil {
			t.Fatal(err)
		}
	}
	replica.WaitCaughtUp(primary)
	hold.Store(true)
	for _, tok := range []string{"busy", "idle"} {
		if b, err := w.Append(ctx, tok, 1, msgs("d", "e")); err != nil || b.HWM != 5 {
			t.Fatalf("append before the failover: %+v, %v; want HWM 5", b, err)
		}
		if err := w.Sync(ctx, tok); err != nil {
			t.Fatalf("sync before the failover: %v", err)
		}
	}
	primary.Kill()
	ss.WaitPrimary(replica.Addr())

	want := store.Bounds{Generation: 2, Floor: 4, HWM: 3}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := w.Bounds(ctx, "idle")
		if err == nil && b == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle session after the failover: %+v, %v; want %+v (moved on by the watch)", b, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var fe *store.FencedError
	for {
		_, err := w.Append(ctx, "busy", 1, msgs("f"))
		if err == nil {
			// A pipelined append learns of the fencing when its batch
			// is sent; Sync reports it.
			err = w.Sync(ctx, "busy")
		}
		if errors.As(err, &fe) {
			break
		}
		if !errors.Is(err, store.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("append of the busy session after the failover = %v, want a FencedError", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fe.Have != 1 || fe.Want != 2 {
		t.Fatalf("append after the failover: %v; want fenced, have 1, want 2", fe)
	}
	if b, err := w.Bounds(ctx, "busy"); err != nil || b != want {
		t.Fatalf("busy session after the failover: %+v, %v; want %+v", b, err, want)
	}
}

// TestCluster: a Redis Cluster of three primaries with a replica each,
// created with redis-cli --cluster create. The store contract and that
// of task records hold on it (each task's keys in one slot), and Check
// sees a stopped replica (checkStoppedReplica); then, while
// four sessions are written and tailed, the primary of the first
// session's slot is replaced twice: by CLUSTER FAILOVER FORCE on its
// replica, then by killing (SIGKILL) that new primary so the old one is
// promoted back. Every acknowledged event survives, no cursor names
// two events, readers see no gap.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	t.Run("contract", func(t *testing.T) { runContract(t, c.URL()) })
	t.Run("tasks", func(t *testing.T) { clusterTasks(t, c) })
	t.Run("check_stopped_replica", func(t *testing.T) {
		// Before failover, which leaves a primary without its replica.
		// Options.Replicas 1: with 0, writes stop waiting for a replica
		// once the cluster marks it failed, a second or two into its stop.
		p := c.PrimaryFor(redis.DefaultPrefix + "{stopped-replica}:rec")
		replica := c.ReplicaOf(p)
		checkStoppedReplica(t, p, replica, []namedStore{{"Cluster, Replicas 1", openURL(t, c.URL(), redis.Options{Replicas: 1})}})
		p.WaitReplicaListed(replica)
	})
	t.Run("failover", func(t *testing.T) {
		w := openURL(t, c.URL(), redis.Options{})
		r := openURL(t, c.URL(), redis.Options{})
		owners := storm(t, w, r, 4, func() {
			c.FailoverAndBack(c.PrimaryFor(redis.DefaultPrefix + "{storm0}:rec"))
		})
		for _, o := range owners {
			if o.lost.Load() != 0 {
				t.Errorf("session %s lost acknowledged events %d times, want 0 with the replication wait", o.token, o.lost.Load())
			}
		}
	})
	// Last: it moves a primary to where c.Primaries does not look.
	t.Run("stale_slot_map", func(t *testing.T) { staleSlotMap(t, c) })
}

// staleSlotMap: a session's primary is replaced by a graceful CLUSTER
// FAILOVER between two pipelined appends, so the store's slot map still
// names the old primary, now a replica that answers MOVED (or a primary
// whose ROLE is replica). Redis never ran that batch: it goes again to
// the new primary and the session keeps its generation, with every event
// stored once and in order, instead of losing generation 1.
func staleSlotMap(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	w := openURL(t, c.URL(), redis.Options{})
	create(t, w, "stale")
	for _, data := range []string{"a", "b"} { // the first is stored at once, the second pipelined
		if _, err := w.Append(ctx, "stale", 1, msgs(data)); err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(ctx, "stale"); err != nil {
			t.Fatal(err)
		}
	}
	p := c.PrimaryFor(redis.DefaultPrefix + "{stale}:rec")
	second := c.ReplicaOf(p)
	if err := second.Do("CLUSTER", "FAILOVER"); err != nil {
		t.Fatalf("CLUSTER FAILOVER on %s: %v", second.Addr(), err)
	}
	second.WaitRole("master")
	if b, err := w.Append(ctx, "stale", 1, msgs("c")); err != nil || b.HWM != 3 {
		t.Fatalf("append after the failover: %+v, %v; want HWM 3", b, err)
	}
	if err := w.Sync(ctx, "stale"); err != nil {
		t.Fatalf("sync after the failover: %v; want the batch sent again to the new primary", err)
	}
	evs, b, err := w.Read(ctx, "stale", 0, 10)
	if err != nil || b.Generation != 1 || b.HWM != 3 {
		t.Fatalf("bounds after the failover: %+v, %v; want generation 1, HWM 3", b, err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Data))
	}
	if want := []string{"1:a", "2:b", "3:c"}; !slices.Equal(got, want) {
		t.Fatalf("events after the failover: %v, want %v", got, want)
	}
}

// TestPublishReplicated: an acknowledged append is readable on the
// replica a failover would promote, its publication included. The
// replica's link delays every chunk of the replication stream by 100 ms
// and drops everything once the append returned, so a publication the
// primary made after the replica acknowledged the events would never
// reach it; the replica, promoted, must serve the event.
func TestPublishReplicated(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica, hold := heldReplica(t, primary, 100*time.Millisecond)
	w := openURL(t, primary.URL(), redis.Options{Replicas: 1, ReplicationTimeout: 5 * time.Second})
	create(t, w, "tok")
	b, err := w.Append(ctx, "tok", 1, msgs("a"))
	hold.Store(true)
	if err != nil || b.HWM != 1 {
		t.Fatalf("Append = %+v, %v; want HWM 1", b, err)
	}
	primary.Kill()
	if err := replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	r := openURL(t, replica.URL(), redis.Options{Replicas: -1})
	evs, rb, err := r.Read(ctx, "tok", 0, 10)
	if err != nil || rb.HWM != 1 || len(evs) != 1 || string(evs[0].Data) != "a" {
		t.Fatalf("Read on the promoted replica = %v, %+v, %v; want the acknowledged event 1 %q", evs, rb, err, "a")
	}
}

// TestSentinelPublicationSeen: a reader sees an event on the primary
// between its publication and the replica's acknowledgement of that
// publication, then the primary is lost. The replica's link drops
// everything from the publication on, so the append's wait succeeds and
// the publication's fails: the promoted replica holds the event but not
// its publication. The writer's failover guard publishes it there again,
// so the reader's cursor names the same event after the failover.
func TestSentinelPublicationSeen(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	var armed, held atomic.Bool
	replica := replicaBehind(t, primary, func(_ int, chunk []byte) faultproxy.Decision {
		// publishLua's effect: HSET <rec> vis <hwm>.
		if held.Load() || armed.Load() && bytes.Contains(chunk, []byte("$3\r\nvis\r\n")) {
			held.Store(true)
			return faultproxy.Decision{}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	})
	ss := redistest.StartSentinels(t, primary)
	ss.WaitReady(1)
	w := openURL(t, ss.URL(), redis.Options{})
	r := openURL(t, ss.URL(), redis.Options{Replicas: -1})
	create(t, w, "tok")
	replica.WaitCaughtUp(primary)
	armed.Store(true)
	appended := make(chan error, 1)
	go func() {
		_, err := w.Append(ctx, "tok", 1, msgs("a"))
		appended <- err
	}()
	seen := func() bool {
		evs, _, err := r.Read(ctx, "tok", 0, 10)
		return err == nil && len(evs) == 1 && evs[0].Seq == 1 && string(evs[0].Data) == "a"
	}
	for deadline := time.Now().Add(5 * time.Second); !seen(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reader did not see event 1 on the primary within 5s")
		}
	}
	if err := <-appended; !errors.Is(err, store.ErrUnavailable) || !held.Load() {
		t.Fatalf("Append = %v (publication held %v), want ErrUnavailable: the replica never acknowledges the publication", err, held.Load())
	}
	primary.Kill()
	ss.WaitPrimary(replica.Addr())
	for deadline := time.Now().Add(10 * time.Second); !seen(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			evs, b, err := r.Read(ctx, "tok", 0, 10)
			t.Fatalf("Read on the promoted replica = %v, %+v, %v; want event 1 %q, which the reader saw before the failover", evs, b, err, "a")
		}
	}
}

// heldReplica starts a replica of primary whose replication stream passes
// through a proxy that delays each chunk by delay and drops every chunk
// once the returned flag is set (the link is held), and waits until it is
// in sync.
func heldReplica(t *testing.T, primary *redistest.Server, delay time.Duration) (*redistest.Server, *atomic.Bool) {
	t.Helper()
	hold := new(atomic.Bool)
	replica := replicaBehind(t, primary, func(_ int, chunk []byte) faultproxy.Decision {
		time.Sleep(delay)
		if hold.Load() {
			return faultproxy.Decision{}
		}
		return faultproxy.Decision{Forward: len(chunk)}
	})
	return replica, hold
}

// replicaBehind starts a replica of primary whose replication stream
// (primary to replica) passes through a proxy that applies filter, and
// waits until it is in sync.
func replicaBehind(t *testing.T, primary *redistest.Server, filter faultproxy.Filter) *redistest.Server {
	t.Helper()
	proxy, err := faultproxy.New(primary.Addr(), filter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	replica := redistest.Start(t, redistest.Options{ReplicaOf: proxy.Addr()})
	replica.WaitInSync()
	primary.WaitReplicaListed(replica) // what the store counts (ROLE)
	return replica
}
