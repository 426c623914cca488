package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/fanout"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// Fleet mode (`tidemark serve --redis URL`): session records and event logs
// live in Redis, every replica serves every session by forwarding requests
// to the session's owner, and ownership is a lease renewed every
// --lease-renew (DESIGN.md, "Fleet mode"; docs/fleet.md, "Fleet mode").

// Defaults of the fleet flags.
const (
	defaultLeaseTTL   = 10 * time.Second
	defaultLeaseRenew = 3 * time.Second
)

// urlForms says, in usage errors, which --redis URLs are valid.
const urlForms = "want redis://HOST:PORT/DB, a Sentinel URL with master_name, or a Cluster URL with addr parameters; see docs/fleet.md"

// fleetConfig holds the fleet flags of `tidemark serve`.
type fleetConfig struct {
	redisURL     string // empty: not a fleet
	replicaID    string // empty: hostname-RANDOM
	leaseTTL     time.Duration
	leaseRenew   time.Duration
	advertiseURL string // empty: http://<resolved listen address><path>
	replicas     int    // redis.Options.Replicas
	replTimeout  time.Duration
}

// fleetFlags declares the fleet flags on fs.
func fleetFlags(fs *flag.FlagSet, c *fleetConfig) {
	fs.StringVar(&c.redisURL, "redis", "", "run as a replica of a fleet: keep sessions and event logs in Redis at this URL, shared by every replica; any replica serves any session: redis://HOST:PORT/DB, Sentinel redis://SENTINEL:PORT/DB?master_name=NAME&addr=SENTINEL2:PORT&addr=SENTINEL3:PORT, Cluster redis://NODE:PORT?addr=NODE2:PORT&addr=NODE3:PORT; Redis must run with maxmemory-policy noeviction, warned at start otherwise (URL; empty: no fleet)")
	fs.StringVar(&c.replicaID, "replica-id", "", "with --redis: this replica's ID in session records and in the replica directory, unique in the fleet (text; empty: hostname-RANDOM, new at each start)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", defaultLeaseTTL, "with --redis: how long this replica's ownership of a session lasts unless renewed; another replica takes over a session this long after its owner died (duration)")
	fs.DurationVar(&c.leaseRenew, "lease-renew", defaultLeaseRenew, "with --redis: how often leases are renewed and this replica re-announced; well below --lease-ttl (duration)")
	fs.IntVar(&c.replicas, "redis-replicas", 0, "with --redis: how many Redis replicas must hold a write (WAIT) before it counts and its events become visible (replicas; 0: every replica connected to the primary, the ones a failover may promote; -1: none, so a failover can lose the last writes)")
	fs.DurationVar(&c.replTimeout, "redis-replication-timeout", redis.DefaultReplicationTimeout, "with --redis: how long a write waits for --redis-replicas; past it the write fails, the call answers 503 unavailable and the session continues at generation+1 (duration)")
	fs.StringVar(&c.advertiseURL, "advertise-url", "", "with --redis: the URL other replicas forward this replica's sessions' requests to (URL; empty: http://HOST:PORT of the listener plus --path, with the host name when listening on all interfaces)")
}

// check validates the fleet flags; the error is a usage error. The flags
// that apply with --redis only are refused without it by checkOnlyWith.
func (c *fleetConfig) check(dataDir string) error {
	if c.redisURL == "" {
		return nil
	}
	switch {
	case dataDir != "":
		return errors.New("--redis and --data-dir exclude each other: a fleet keeps its sessions in Redis")
	case c.leaseTTL <= 0:
		return fmt.Errorf("--lease-ttl must be positive, not %v", c.leaseTTL)
	case c.leaseRenew <= 0 || c.leaseRenew >= c.leaseTTL:
		return fmt.Errorf("--lease-renew (%v) must be positive and below --lease-ttl (%v)", c.leaseRenew, c.leaseTTL)
	case c.replTimeout <= 0 || c.replTimeout >= redis.DefaultTimeout:
		return fmt.Errorf("--redis-replication-timeout (%v) must be positive and below %v, the Redis command timeout", c.replTimeout, redis.DefaultTimeout)
	case c.replicas < -1:
		return fmt.Errorf("--redis-replicas must be -1 or more, not %d", c.replicas)
	}
	return nil
}

// openRedis connects to --redis and reports how Redis persists data. An
// unreachable Redis is an error that names the URL and what to do.
// idleTTL is --session-idle-ttl: a session's keys expire in Redis once
// nothing has written them for about that long (redis.Options.IdleTTL),
// with a margin that also covers this replica's lease renewals, which
// are below --lease-ttl.
func (c *fleetConfig) openRedis(logger *slog.Logger, idleTTL time.Duration) (*redis.Store, error) {
	// go-redis reports each failed dial on its own logger (stderr); the
	// store's errors already say it, in this process's log format.
	goredis.SetLogger(redisLog{logger})
	st, err := redis.New(context.Background(), redis.Options{URL: c.redisURL, Replicas: c.replicas, ReplicationTimeout: c.replTimeout,
		IdleTTL: idleTTL, IdleMargin: redis.DefaultIdleMargin + c.leaseTTL})
	switch {
	case errors.Is(err, store.ErrUnavailable):
		return nil, fmt.Errorf("--redis %s: cannot reach Redis (%s): start redis-server there, or point --redis at a running one", redact.URL(c.redisURL), redact.URLError(c.redisURL, err))
	case err != nil:
		return nil, fmt.Errorf("--redis %s: %s (%s)", redact.URL(c.redisURL), redact.URLError(c.redisURL, err), urlForms)
	}
	if c.replicaID == "" {
		c.replicaID = defaultReplicaID()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := st.Persistence(ctx)
	switch {
	case err != nil:
		logger.Warn("cannot read Redis's persistence settings; make sure a restart of Redis either keeps every write (appendonly yes, appendfsync always) or none",
			"reason", replay.ReasonPersistenceUnknown, "error", err)
	case !p.Safe() && p.Snapshot && !p.AppendOnly && p.Snapshots == "":
		logger.Warn("Redis has no save schedule but wrote or loaded an RDB snapshot since it started (SAVE, BGSAVE, a replica's sync): its next start loads the snapshot and brings back an older state, under which sequences are assigned twice; delete the snapshot from Redis's directory, or use appendonly yes with appendfsync always",
			"reason", replay.ReasonUnsafePersistence, "persistence", p.String())
	case !p.Safe():
		// Warned, not refused: the risk is Redis restarting after a crash,
		// and an operator may accept it knowingly; see docs/fleet.md, "Fleet
		// mode", Redis restarts.
		logger.Warn("Redis persistence is unsafe for a fleet: after a Redis crash it can bring back an older state, under which sequences are assigned twice; use appendonly yes with appendfsync always, or no persistence at all",
			"reason", replay.ReasonUnsafePersistence, "persistence", p.String())
	default:
		logger.Info("redis persistence", "persistence", p.String())
	}
	checkEviction(ctx, st, logger)
	return st, nil
}

// checkEviction warns, in one line, when Redis may evict the store's keys
// (maxmemory-policy other than noeviction), or when its policy cannot be
// read. Warned, not refused, as unsafe persistence is: Redis evicts only
// once it reaches maxmemory.
func checkEviction(ctx context.Context, st *redis.Store, logger *slog.Logger) {
	policy, err := st.EvictionPolicy(ctx)
	switch {
	case err != nil:
		logger.Warn("cannot read Redis's maxmemory-policy; make sure it is noeviction: under any other policy Redis may evict sessions, which then answer 404, or their event logs",
			"reason", replay.ReasonEvictionUnknown, "error", err)
	case policy != redis.NoEviction:
		logger.Warn("Redis may evict sessions: a session Redis evicts answers 404 and its events are lost; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf)",
			"reason", replay.ReasonUnsafeEviction, "maxmemory_policy", policy)
	}
}

// openBus returns the Bus that carries the notifications of
// subscriptions/listen streams: through a Redis Stream at --redis, shared by
// every replica, or, without --redis, within this process. close ends it
// and its Redis connections.
func (c *fleetConfig) openBus(logger *slog.Logger) (bus *fanout.Bus, close func(), err error) {
	if c.redisURL == "" {
		bus, err = fanout.New(context.Background(), fanout.Options{Logger: logger})
		return bus, func() { bus.Close() }, err
	}
	rdb, err := c.redisClient()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bus, err = fanout.New(ctx, fanout.Options{Redis: rdb, Logger: logger})
	if err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("--redis %s: %s: start redis-server there, or point --redis at a running one", redact.URL(c.redisURL), redact.URLError(c.redisURL, err))
	}
	return bus, func() { bus.Close(); rdb.Close() }, nil
}

// redisClient returns a new client of --redis (one server, Sentinel or
// Cluster, as for the store), or the usage error of a URL go-redis cannot
// parse.
func (c *fleetConfig) redisClient() (goredis.UniversalClient, error) {
	rdb, err := redis.NewClient(c.redisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis %s: %s (%s)", redact.URL(c.redisURL), redact.URLError(c.redisURL, err), urlForms)
	}
	return rdb, nil
}

// advertise returns the URL other replicas forward requests to: the flag,
// or http://<listen address><path>, with the host name in place of an
// unspecified address (0.0.0.0, ::).
func (c *fleetConfig) advertise(ln net.Listener, path string) string {
	if c.advertiseURL != "" {
		return c.advertiseURL
	}
	addr := ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(addr.Port)) + path
}

// defaultReplicaID returns hostname-RANDOM (8 base32 characters), so two
// replicas on one host, or a restarted replica, never share an ID: a
// restarted process must not mistake its predecessor's sessions for its
// own live state.
func defaultReplicaID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "replica"
	}
	return h + "-" + strings.ToLower(rand.Text()[:8])
}

// announceFirst takes this replica's directory entry at start. An entry
// that holds another URL belongs to another process with this replica ID:
// a replica killed moments ago (its entry expires within the lease TTL) or
// a live duplicate (it renews the entry). It waits up to twice the lease
// TTL for the entry to go, then gives up: two live processes with one ID
// would take each other's sessions at every request
// (TestDuplicateReplicaIDRefused).
func (c *fleetConfig) announceFirst(st *redis.Store, url string, logger *slog.Logger) error {
	deadline := time.Now().Add(2 * c.leaseTTL)
	warned := false
	for {
		holder, err := st.AnnounceFirst(context.Background(), c.replicaID, url, c.leaseTTL)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, redis.ErrReplicaTaken):
			return fmt.Errorf("--redis %s: %s", redact.URL(c.redisURL), redact.URLError(c.redisURL, err))
		case time.Now().After(deadline):
			return fmt.Errorf("--replica-id %s is announced by another live process at %s (it kept its entry for %v): give each replica a unique --replica-id",
				c.replicaID, holder, 2*c.leaseTTL)
		case !warned:
			logger.Warn("replica ID announced by another process; waiting for its entry to expire (a replica killed moments ago keeps it up to --lease-ttl)",
				"replica", c.replicaID, "holder", holder, "reason", replay.ReasonReplicaIDInUse, "wait_max", 2*c.leaseTTL)
			warned = true
		}
		time.Sleep(c.leaseRenew)
	}
}

// announce records this replica in the directory every renew interval
// (with the lease TTL as the entry's TTL) until ctx is done, then removes
// the entry so that nobody forwards to a replica that stopped.
func (c *fleetConfig) announce(ctx context.Context, st *redis.Store, url string, logger *slog.Logger) {
	t := time.NewTicker(c.leaseRenew)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st.Withdraw(wctx, c.replicaID)
			cancel()
			return
		case <-t.C:
		}
		err := st.Announce(ctx, c.replicaID, url, c.leaseTTL)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			logger.Warn("announcing this replica failed; retrying", "reason", replay.ReasonUnavailable, "error", err)
			failing = true
		case err == nil && failing:
			logger.Info("replica announced again", "replica", c.replicaID)
			failing = false
		}
	}
}

// redisLog sends go-redis's internal log lines to the process's logger at
// DEBUG level.
type redisLog struct{ logger *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.logger.DebugContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
