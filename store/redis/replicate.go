package redis

// replicate.go holds the replication wait: a write that a client may come
// to rely on (a created or claimed generation, appended events, a raised
// floor, an end) is sent together with WAIT on the same connection, and
// counts as done only once the replicas a failover may promote hold it.
// Appended events become visible to readers after that (publishLua), so a
// primary lost before its replicas had an event cannot have shown it to
// anyone, and an append counts as done only once the replicas hold that
// publication as well, so a promoted replica shows every event that was
// acknowledged.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
)

// DefaultReplicationTimeout is the default Options.ReplicationTimeout.
const DefaultReplicationTimeout = time.Second

// replicaRecount is how long a primary's count of connected replicas is
// reused before ROLE is asked again.
const replicaRecount = time.Second

// replication is the state of the replication wait of one Store.
type replication struct {
	want    int           // Options.Replicas
	timeout time.Duration // Options.ReplicationTimeout
	// failover: the deployment promotes replicas (Sentinel, Cluster), so
	// a primary without replicas is a passing state (a replica is
	// resyncing after a failover): its count is read again at every write
	// instead of being reused.
	failover bool
	cluster  bool // count replicas from the cluster configuration

	mu     sync.Mutex
	counts map[*goredis.Client]replicaCount // per primary
}

// replicaCount is a primary's number of connected replicas, read at at.
type replicaCount struct {
	n  int
	at time.Time
}

func newReplication(want int, timeout time.Duration, kind topology) *replication {
	if timeout <= 0 {
		timeout = DefaultReplicationTimeout
	}
	return &replication{want: want, timeout: timeout, failover: kind != topoSingle, cluster: kind == topoCluster,
		counts: make(map[*goredis.Client]replicaCount)}
}

// need returns how many replicas a write on primary must reach before it
// counts: Options.Replicas when positive, none when negative, else the
// replicas a failover may promote (count; asked at most every second, or
// at every write while there are none on Sentinel or Cluster). A
// primary that answers ROLE as a replica (a failover in progress) is an
// error: writes must wait for the new primary.
func (r *replication) need(ctx context.Context, primary *goredis.Client) (int, error) {
	if r.want != 0 {
		return max(r.want, 0), nil
	}
	now := time.Now()
	r.mu.Lock()
	c, ok := r.counts[primary]
	r.mu.Unlock()
	if ok && now.Sub(c.at) < replicaRecount {
		return c.n, nil
	}
	n, err := r.count(ctx, primary)
	if err != nil {
		return 0, err
	}
	if n > 0 || !r.failover {
		r.mu.Lock()
		r.counts[primary] = replicaCount{n: n, at: now}
		r.mu.Unlock()
	}
	return n, nil
}

// connected returns the number of replicas connected to a primary, from
// its answer to ROLE: "master", the replication offset, then one entry
// per connected replica.
func connected(role []any) int {
	replicas, _ := role[2].([]any)
	return len(replicas)
}

// Check reports whether the store would take new data, for readiness
// probes. Redis must acknowledge one small write within 500 ms (writable,
// check.go): a Redis that refuses writes or holds them back still answers
// reads. Every primary (each of a Cluster's) must also answer as a
// primary and have as many replicas that writes can reach (lag.go:
// online, and a lag of at most lagBound of Options.ReplicationTimeout)
// as its writes wait for: Options.Replicas when positive; when zero,
// every replica the write path counts (need: those connected, or on a
// Cluster those its configuration gives the primary and has not marked
// failed). WAIT cannot confirm a write on fewer and every write then
// fails (runOn). Its error wraps store.ErrUnavailable and says which
// failed (with the count of replicas that writes reach, and the lag or
// state of the others); nil otherwise. Options.Replicas negative asks no
// count: writes wait for no replica.
func (s *Store) Check(ctx context.Context) error {
	if err := s.writable(ctx); err != nil {
		return err
	}
	if s.repl.want < 0 {
		return nil
	}
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, s.repl.check)
	}
	return s.repl.check(ctx, s.rdb.(*goredis.Client))
}

// check is Check's test of one primary: its INFO replication, and on a
// Cluster with Options.Replicas zero its count of replicas (count).
func (r *replication) check(ctx context.Context, primary *goredis.Client) error {
	addr := primary.Options().Addr
	info, err := primary.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("redis store: INFO replication of %s: %w: %w", addr, store.ErrUnavailable, err)
	}
	if role := infoField(info, "role"); role != "master" {
		return fmt.Errorf("redis store: %s answers role:%s, not as a primary (a failover is in progress): %w", r.name(ctx, primary), role, store.ErrUnavailable)
	}
	replicas := replicasOf(info)
	want := r.want
	switch {
	case want == 0 && r.cluster:
		if want, err = r.count(ctx, primary); err != nil {
			return fmt.Errorf("redis store: replicas of %s: %w: %w", addr, store.ErrUnavailable, err)
		}
	case want == 0:
		// The replicas ROLE lists: those online.
		for _, rp := range replicas {
			if rp.state == "online" {
				want++
			}
		}
	}
	bound := lagBound(r.timeout)
	reach := 0
	var others []string
	for _, rp := range replicas {
		if rp.reaches(bound) {
			reach++
		} else {
			others = append(others, rp.whyNot())
		}
	}
	if reach >= want {
		return nil
	}
	why := ""
	if len(others) > 0 {
		why = " (" + strings.Join(others, ", ") + ")"
	}
	return fmt.Errorf("redis store: %d of the %d replicas writes must reach are connected to the primary %s with a lag of at most %ds%s; writes fail until they are: %w",
		reach, want, r.name(ctx, primary), bound, why, store.ErrUnavailable)
}

// name returns primary's address, for an error: its Options' Addr,
// except on Sentinel, where the client's Options name no server
// ("FailoverClient") and the address is the one the server answers on
// (CLIENT INFO's laddr, Redis 6.2 and later), when it gives one.
func (r *replication) name(ctx context.Context, primary *goredis.Client) string {
	addr := primary.Options().Addr
	if !r.failover || r.cluster {
		return addr
	}
	info, err := primary.Do(ctx, "CLIENT", "INFO").Text()
	if err != nil {
		return addr
	}
	for _, f := range strings.Fields(info) {
		if v, ok := strings.CutPrefix(f, "laddr="); ok && v != "" {
			return v
		}
	}
	return addr
}

// count asks primary for its replicas: on a Cluster node, the replicas
// the cluster configuration gives it (CLUSTER REPLICAS), connected or
// not, except those the cluster marked failed, since any other may be
// promoted; elsewhere the replicas connected now (ROLE).
func (r *replication) count(ctx context.Context, primary *goredis.Client) (int, error) {
	role, err := primary.Do(ctx, "ROLE").Slice()
	if err != nil {
		return 0, err
	}
	if len(role) < 3 || str(role[0]) != "master" {
		return 0, fmt.Errorf("ROLE answers %v: not a primary (a failover is in progress)", at(role, 0))
	}
	if !r.cluster {
		return connected(role), nil
	}
	id, err := primary.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return 0, err
	}
	lines, err := primary.Do(ctx, "CLUSTER", "REPLICAS", id).StringSlice()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range lines {
		// <id> <ip:port@cport> <flags> …; flags such as "slave,fail".
		if f := strings.Fields(line); len(f) > 2 && !slices.Contains(strings.Split(f[2], ","), "fail") {
			n++
		}
	}
	return n, nil
}

// runReplicated runs a write script as run does and, on a primary with
// replicas to wait for (need), WAITs for them on the same connection, in
// the same round trip (runOn).
func (s *Store) runReplicated(ctx context.Context, sc *goredis.Script, op, token string, gen uint64, args ...any) ([]any, error) {
	primary, n, err := s.replicas(ctx, op, token)
	if err != nil {
		return nil, err
	}
	return s.runOn(ctx, primary, n, sc, op, token, gen, args...)
}

// replicas returns the primary that holds token's keys and how many
// replicas a write there must reach (need).
func (s *Store) replicas(ctx context.Context, op, token string) (*goredis.Client, int, error) {
	primary, err := primaryFor(ctx, s.rdb, s.keys(token).rec)
	if err != nil {
		return nil, 0, fail(ctx, op, token, err)
	}
	n, err := s.repl.need(ctx, primary)
	if err != nil {
		return nil, 0, fail(ctx, op, token, err)
	}
	return primary, n, nil
}

// runOn runs a write script on primary, followed by WAIT n unless n is 0,
// as a round trip of one call (roundTrip).
// When fewer than n replicas acknowledge within
// Options.ReplicationTimeout the call fails with an error wrapping
// store.ErrUnavailable: the write happened on the primary but is not
// acknowledged, and the caller treats it as any write whose reply was
// lost (an append ends its generation).
func (s *Store) runOn(ctx context.Context, primary *goredis.Client, n int, sc *goredis.Script, op, token string, gen uint64, args ...any) ([]any, error) {
	if n == 0 {
		return s.run(ctx, sc, op, token, gen, args...)
	}
	c := &call{keys: s.keys(token).all(), args: args}
	werr := s.roundTrip(ctx, primary, n, sc, []*call{c})
	if c.err != nil {
		s.reroute(ctx)
		return nil, fail(ctx, op, token, c.err)
	}
	rest, err := status(op, token, gen, c.reply)
	switch {
	case err != nil:
		return nil, err
	case errors.Is(werr, store.ErrUnavailable):
		return nil, fmt.Errorf("redis store: %s session %s: %w", op, store.Prefix(token), werr)
	case werr != nil:
		return nil, fail(ctx, op, token, werr)
	}
	return rest, nil
}

// reroute makes a Cluster client read the slot map again after a command
// failed: the slot may have moved to another primary (a failover or a
// resharding), and go-redis, with retries off, would otherwise keep
// sending to the node that held it. It also forgets the primaries'
// replica counts.
func (s *Store) reroute(ctx context.Context) {
	for _, c := range []goredis.UniversalClient{s.rdb, s.wdb} {
		if cc, ok := c.(*goredis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
	}
	s.repl.mu.Lock()
	clear(s.repl.counts)
	s.repl.mu.Unlock()
}

// publish makes the events of generation gen up to hwm visible to readers
// (after runOn stored them on primary and n replicas) and waits until the
// same n replicas hold the publication too. It returns the bounds after
// it. Without the second wait, a failover right after the
// acknowledgement promotes a replica that holds the events but not their
// publication, and only the writer's failover guard could show them
// there again (it does, when the wait fails: failover.go). The errors
// are runOn's.
func (s *Store) publish(ctx context.Context, primary *goredis.Client, n int, token string, gen, hwm uint64) (store.Bounds, error) {
	rest, err := s.runOn(ctx, primary, n, s.scripts.publish, "append", token, gen, gen, hwm)
	if err != nil {
		return store.Bounds{}, err
	}
	return decBounds(rest), nil
}
