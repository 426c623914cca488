// Package redis is Tidemark's fleet store: session records, tombstones
// and event logs in Redis (github.com/redis/go-redis/v9), shared by every
// replica of a fleet, so that any replica can serve, replay and tail any
// session (DESIGN.md, "Fleet mode"). It implements store.Store, and
// store.Tasks for the records of tasks (tasks.go).
//
// # Atomicity and fencing
//
// Every write is one Lua script (scripts.go), which Redis runs atomically:
// Append checks the record's generation and adds the events and moves the
// high-water mark in the same step, so a paused or partitioned old owner's
// append fails with a *store.FencedError once another replica has claimed
// the session; Claim is a compare-and-set of the generation that also
// drops the older generations' events and sets the floor to HWM+1; Renew
// checks generation and owner; Trim raises the floor and removes the events
// below it; End removes record and log and writes the tombstone. Reads
// (Get, Read, Bounds) run as one MULTI/EXEC transaction, so the events and
// bounds they return belong to one moment. The key layout is in keys.go.
//
// # Waiting
//
// Wait blocks in Redis, not in the process, so a reader on one replica
// wakes when a writer on another appends: it issues
// XREAD BLOCK on two streams at once, the session's log (an append adds an
// entry there anyway) and a small per-session "wake" stream to which Claim,
// Trim and End add one entry each (capped at one entry). The IDs it reads
// after come from one MULTI/EXEC snapshot taken with the bounds, so no
// change between the check and the block is missed. After a wake-up it
// takes a new snapshot and returns only when the contract's conditions
// hold (HWM > after, floor > after+1, generation changed, ended), else it
// blocks again. A blocking XREAD occupies its connection for its whole
// duration, so Wait uses a second connection pool reserved for it, bounded
// by Options.MaxWaits; past that bound a Wait polls the snapshot every
// Options.PollInterval instead of blocking (slower wake-ups, never a
// stall). A Wait whose context ends is released at once with CLIENT
// UNBLOCK, sent on the ordinary pool, because go-redis does not interrupt
// a blocking read when its context is cancelled.
//
// A Wait for events this process appended itself, queued or on their way
// to Redis, asks Redis nothing: the committer's round trip settles them,
// and the Wait returns when it does (waitQueued in pipeline.go). A reader
// whose next events are such appends waits before it reads (Queued), so
// a live stream costs one read per batch Redis acknowledged.
//
// # Durability and Redis restarts
//
// A call that returned nil is as durable as Redis made it. With
// `appendonly yes` and `appendfsync always`, Redis fsyncs each script's
// effects before it replies, so after a crash and restart every record,
// floor, HWM, tombstone and event that was acknowledged is back: sessions
// continue with no gap and no duplicate (tested in restart_test.go). With
// `appendfsync everysec`, or with RDB snapshots only (`save`), a crash
// brings back an older state: HWMs and generations can move back below
// cursors clients hold, and the same (generation, sequence) be assigned
// again to different events, which no check downstream can detect. So a
// fleet runs Redis either with `appendonly yes` + `appendfsync always`, or
// with no persistence at all (`save ""`, `appendonly no`): then a restart
// loses every session, which is safe, as clients get 404 and initialize
// again. Redis must not evict keys (maxmemory-policy noeviction, the
// default): an evicted record is a session lost without a tombstone.
// Since every key of a session carries an expiry (Options.IdleTTL,
// expiry.go), a volatile-* policy may evict any of them.
//
// # Sentinel, Cluster and failover
//
// Options.URL names one server, a primary that Redis Sentinel manages, or
// a Redis Cluster (client.go). Every key of a session shares one hash
// tag (keys.go), so each script and transaction touches one Cluster slot.
// Writes clients may rely on wait for the primary's replicas (WAIT,
// replicate.go), and appended events become visible to readers only
// after that; a Store also detects a primary that came back with less
// than it acknowledged and moves those sessions to a new generation
// (failover.go).
//
// A Redis that cannot be reached, or that refuses a command (loading,
// out of memory, read-only replica), yields errors wrapping
// store.ErrUnavailable; the store recovers by itself when Redis returns.
// The store disables go-redis's automatic retries: resending a script
// whose reply was lost could apply an append twice. The one case the
// store cannot resolve is a connection lost after Redis ran a write and
// before its reply arrived: the call reports ErrUnavailable although the
// write happened (as every networked store must); the events it stored
// still have correct, unique sequences.
package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/internal/pending"
)

// Defaults of Options.
const (
	// DefaultPrefix is the default Options.Prefix.
	DefaultPrefix = "tidemark:"
	// DefaultMaxWaits is the default Options.MaxWaits (connections).
	DefaultMaxWaits = 1024
	// DefaultPollInterval is the default Options.PollInterval.
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultWaitBlock is the default Options.WaitBlock.
	DefaultWaitBlock = 30 * time.Second
	// DefaultTimeout is the default Options.Timeout.
	DefaultTimeout = 5 * time.Second
)

// wakeLinger is how long the wake stream of an ended session stays, so a
// Wait that took its snapshot just before the End still finds the entry
// that End added when it blocks.
const wakeLinger = time.Minute

// Options configures a Store.
type Options struct {
	// URL locates Redis, in the syntax of go-redis's parsers (client.go):
	// one server as ParseURL reads it,
	// redis://[[user]:password@]host[:port][/db], rediss://… for TLS, or
	// unix:///path/to/socket?db=N; a primary managed by Redis Sentinel as
	// ParseFailoverURL reads it, when the URL has a master_name parameter:
	// redis://SENTINEL:PORT/DB?master_name=NAME&addr=SENTINEL2:PORT&…;
	// a Redis Cluster as ParseClusterURL reads it, when the URL has addr
	// parameters and no master_name: redis://NODE:PORT?addr=NODE2:PORT&…
	// (one seed node: redis://NODE:PORT?addr=NODE:PORT). Required: New
	// fails when it is empty or does not parse.
	URL string

	// Replicas is how many replicas must hold a write (Redis WAIT) before
	// it counts as done and its events become visible to readers
	// (replicate.go): zero (the default) means every replica connected to
	// the primary at the time (ROLE, read at most every second), which
	// are the replicas a failover may promote; N > 0 means at least N;
	// negative means none (a single Redis, or a fleet that accepts losing
	// the last writes in a failover; see docs/fleet.md, "Fleet mode").
	Replicas int

	// ReplicationTimeout bounds each WAIT. A write not held by Replicas
	// replicas within it fails with ErrUnavailable although the primary
	// stored it: an append then ends its generation (its events never
	// become visible; the next request continues at generation+1). Keep
	// it below Timeout. It also bounds the lag at which Check counts a
	// replica as one writes reach (lagBound: 1 s plus it, rounded up to
	// seconds). Default (zero): DefaultReplicationTimeout, 1 s.
	ReplicationTimeout time.Duration

	// Prefix starts every key the store writes, so that several fleets (or
	// test runs) can share one Redis database without seeing each other's
	// sessions. Default (empty): DefaultPrefix, "tidemark:".
	Prefix string

	// PoolSize is the number of connections (per Store) for ordinary
	// commands: every call except the blocking read inside Wait. A call
	// that finds them all busy waits up to Timeout + 1 s for one, then
	// fails with ErrUnavailable. Default (zero): 10 × GOMAXPROCS, go-redis's
	// default.
	PoolSize int

	// MaxWaits bounds, per Store, how many Waits block in Redis at the same
	// time; each holds one connection of its own (XREAD BLOCK) for as long
	// as it waits, and a tailing SSE reader is one Wait. A Wait beyond the
	// bound polls every PollInterval instead. Connections a process opens
	// to Redis are at most PoolSize + MaxWaits; keep the sum over all
	// replicas below Redis's maxclients (10000 by default). Default (zero):
	// DefaultMaxWaits, 1024 connections.
	MaxWaits int

	// PollInterval is how often a Wait beyond MaxWaits re-reads the bounds.
	// Default (zero): DefaultPollInterval, 100 ms.
	PollInterval time.Duration

	// WaitBlock is the longest a single blocking read of a Wait lasts; then
	// the Wait re-reads the record and blocks again. It bounds how long a
	// wake-up lost to a reconnection can go unnoticed. Default (zero):
	// DefaultWaitBlock, 30 s.
	WaitBlock time.Duration

	// Timeout bounds dialing Redis and reading or writing each ordinary
	// command; a Redis that does not answer within it yields
	// ErrUnavailable. Default (zero): DefaultTimeout, 5 s.
	Timeout time.Duration

	// Linger is how long an append whose events all linger
	// (store.Event.Linger: a POST stream's opening event) waits for the
	// session's next append, or another session's round trip, so that it
	// shares their script call. Default (zero) store.LingerMax, 2 ms;
	// negative: never held back.
	Linger time.Duration

	// MaxPendingEvents bounds the events of one session that Append has
	// accepted and Redis not yet acknowledged (pipeline.go); an Append
	// beyond it waits (back-pressure). Default (zero) 4096 events.
	MaxPendingEvents int

	// MaxPendingBytes bounds the bytes (store.Event.Size) of those events
	// in the same way. Default (zero) 4 MiB.
	MaxPendingBytes int64

	// IdleTTL is the fleet's idle TTL (tidemark serve --session-idle-ttl,
	// session.Options.IdleTTL; every replica sets the same). Every key of
	// a session expires in Redis once no write has reached the session
	// for IdleTTL + IdleTTL/4 + IdleMargin, or at most an eighth more
	// (expiry.go), so that a session no replica holds (its owner died, or
	// hibernated it and went away) leaves Redis by itself; the token is
	// then unknown (store.ErrNotFound). Its owner's writes keep it: a
	// request's Touch, an append, a hibernation, and each lease renewal,
	// so a session held under a lease (session.Options.Lease) never
	// expires while its owner lives, and a hibernated one lasts at least
	// that long after its hibernation. A registry without a lease writes
	// nothing for a session whose only activity is an open stream: set a
	// negative IdleTTL under it. Default (zero): DefaultIdleTTL, 30
	// minutes; negative: keys never expire.
	IdleTTL time.Duration

	// IdleMargin is how much longer than IdleTTL + IdleTTL/4 a session's
	// keys last after the last write: it covers the sweep interval (the
	// owner's sweep ends an idle session up to one interval after its idle
	// TTL, with a tombstone) and the lease renewal interval of every
	// replica. Default (zero): DefaultIdleMargin, 1 minute.
	IdleMargin time.Duration

	// Now returns the current time; End turns a tombstone's expiry time
	// into a Redis TTL (expiry − Now), so tombstones do not depend on the
	// Redis server's clock. Default (nil): time.Now.
	Now func() time.Time
}

// Store is a store.Store in Redis. It is safe for concurrent use, and any
// number of Stores (in any number of processes) may share one Redis: they
// see one another's writes, and fencing holds across them.
type Store struct {
	rdb      goredis.UniversalClient // ordinary commands
	wdb      goredis.UniversalClient // blocking reads of Wait (MaxWaits connections)
	prefix   string
	now      func() time.Time
	timeout  time.Duration
	poll     time.Duration
	blockFor time.Duration
	maxWaits int
	scripts  scripts
	repl     *replication
	marks    sync.Map // session token → ackMark (failover.go)
	pl       pipeline // pipelined appends (pipeline.go)

	// closing is cancelled by Close; it releases blocked Waits.
	closing context.Context
	close   context.CancelFunc

	mu     sync.Mutex
	closed bool
	waits  sync.WaitGroup                  // Waits in progress
	idle   map[*goredis.Client][]*waitConn // Wait connections not in use, by server
	inUse  int                             // Wait connections in use
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.LossNotifier = (*Store)(nil)
)

// New connects to Redis and returns a Store. It pings Redis once, so that a
// fleet replica can refuse to start without it: an unreachable Redis fails
// with an error wrapping store.ErrUnavailable, an invalid URL with a plain
// error.
func New(ctx context.Context, opts Options) (*Store, error) {
	if opts.URL == "" {
		return nil, errors.New("redis store: Options.URL is empty")
	}
	ep, err := parseEndpoint(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("redis store: URL %q: %s", redact.URL(opts.URL), redact.URLError(opts.URL, err))
	}
	exp := newExpiry(opts.IdleTTL, opts.IdleMargin)
	s := &Store{
		prefix:   opts.Prefix,
		now:      opts.Now,
		timeout:  opts.Timeout,
		poll:     opts.PollInterval,
		blockFor: opts.WaitBlock,
		maxWaits: opts.MaxWaits,
		scripts:  newScripts(exp),
		repl:     newReplication(opts.Replicas, opts.ReplicationTimeout, ep.kind),
		idle:     make(map[*goredis.Client][]*waitConn),
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.poll <= 0 {
		s.poll = DefaultPollInterval
	}
	if s.blockFor <= 0 {
		s.blockFor = DefaultWaitBlock
	}
	if s.maxWaits <= 0 {
		s.maxWaits = DefaultMaxWaits
	}
	s.repl.timeout = min(s.repl.timeout, s.timeout)
	poolSize := opts.PoolSize
	if poolSize <= 0 {
		poolSize = 10 * runtime.GOMAXPROCS(0)
	}
	s.rdb = ep.client(tuning{timeout: s.timeout, pool: poolSize, ctxTimeout: true})
	// A Wait's context is honoured by CLIENT UNBLOCK (wait.go), not by
	// socket deadlines, so a cancelled Wait keeps its connection healthy.
	s.wdb = ep.client(tuning{timeout: s.timeout, pool: s.maxWaits, ctxTimeout: false})

	s.closing, s.close = context.WithCancel(context.Background())
	s.pl.init(pending.Limits{Events: opts.MaxPendingEvents, Bytes: opts.MaxPendingBytes}, opts.Linger, exp.header())
	go s.commitLoop()
	pctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.rdb.Ping(pctx).Err(); err != nil {
		s.Close()
		return nil, fmt.Errorf("redis store: connect %s: %w: %w", ep, store.ErrUnavailable, err)
	}
	// The replication IDs are read before the first write, so that a
	// failover right after it is seen as a change.
	seen := map[string]string{}
	s.replIDsChanged(seen)
	s.waits.Add(1)
	go s.watch(seen)
	return s, nil
}

// Close implements store.Store: it releases blocked Waits (they return an
// error wrapping ErrUnavailable), waits for them, and closes every
// connection. Later calls fail with ErrUnavailable.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.close()
	<-s.pl.done // the appends queued before Close are sent
	s.waits.Wait()
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	closeIdle(idle)
	return errors.Join(s.wdb.Close(), s.rdb.Close())
}

// fail wraps err, the failure of a Redis command for operation op on a
// session, for the caller: a cancelled or expired ctx is reported as such,
// everything else (network, timeouts, Redis refusing the command, a closed
// Store) wraps store.ErrUnavailable.
func fail(ctx context.Context, op, token string, err error) error {
	return failing(ctx, op+" session "+store.Prefix(token), err)
}

// failing is fail for an operation that what names with its object
// ("update task 0123abcd"). An OOM reply (outOfMemory) is said to be
// Redis refusing writes for want of memory: Redis answers, so the store
// is reachable, but takes no write that can grow its memory, nor any
// MULTI transaction, until memory is freed or maxmemory raised.
func failing(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("redis store: %s: %w", what, ctx.Err())
	}
	if errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redis store: %s: %w: store closed", what, store.ErrUnavailable)
	}
	if outOfMemory(err) {
		return fmt.Errorf("redis store: %s: Redis refuses writes (out of memory: used memory over maxmemory): %w: %w", what, store.ErrUnavailable, err)
	}
	return fmt.Errorf("redis store: %s: %w: %w", what, store.ErrUnavailable, err)
}

// outOfMemory reports whether err holds Redis's refusal of a command
// for want of memory: an error reply starting "OOM " (maxmemory reached
// and nothing to evict under the maxmemory-policy).
func outOfMemory(err error) bool {
	var reply goredis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "OOM ")
}

// status turns a script's reply into an error for its non-"ok" statuses,
// and returns the reply's remaining elements for "ok".
func status(op, token string, gen uint64, reply []any) ([]any, error) {
	if len(reply) == 0 {
		return nil, fmt.Errorf("redis store: %s session %s: %w: empty script reply", op, store.Prefix(token), store.ErrUnavailable)
	}
	switch str(reply[0]) {
	case "ok":
		return reply[1:], nil
	case "notfound":
		return nil, fmt.Errorf("redis store: %s session %s: %w", op, store.Prefix(token), store.ErrNotFound)
	case "ended":
		return nil, decTomb(token, str(at(reply, 1)))
	case "fenced":
		want, _ := strconv.ParseUint(str(at(reply, 1)), 10, 64)
		return nil, &store.FencedError{Token: token, Op: op, Have: gen, Want: want}
	case "lost":
		// guardLua moved the session to a new generation: this writer's
		// generation lost acknowledged events in a failover.
		want, _ := strconv.ParseUint(str(at(reply, 1)), 10, 64)
		return nil, fmt.Errorf("redis store: %s session %s: events up to the acknowledged high-water mark were lost in a Redis failover (HWM now %s); the session continues at generation %d: %w",
			op, store.Prefix(token), str(at(reply, 2)), want, &store.FencedError{Token: token, Op: op, Have: gen, Want: want})
	case "exists":
		return nil, fmt.Errorf("redis store: %s session %s: %w (%s)", op, store.Prefix(token), store.ErrExists, str(at(reply, 1)))
	}
	return nil, fmt.Errorf("redis store: %s session %s: %w: unexpected script reply %v", op, store.Prefix(token), store.ErrUnavailable, reply)
}

// missing returns the error for a token without a record: an *EndedError
// when the tombstone (GET tomb) exists (decTomb), else ErrNotFound.
func missing(op, token string, tomb *goredis.StringCmd) error {
	if v, err := tomb.Result(); err == nil {
		return decTomb(token, v)
	}
	return fmt.Errorf("redis store: %s session %s: %w", op, store.Prefix(token), store.ErrNotFound)
}

// decTomb reads a tombstone's value: the end reason, then, when the
// session belonged to a user, one space and the user's ID. A reason is
// one word of the catalogue (replay/reason.go), so the first space ends
// it; a value without a space is a reason alone (no user).
func decTomb(token, v string) *store.EndedError {
	reason, user, _ := strings.Cut(v, " ")
	return &store.EndedError{Token: token, Reason: store.EndReason(reason), UserID: user}
}

// run runs a script with the session's keys and decodes its status.
func (s *Store) run(ctx context.Context, sc *goredis.Script, op, token string, gen uint64, args ...any) ([]any, error) {
	reply, err := sc.Run(ctx, s.rdb, s.keys(token).all(), args...).Slice()
	if err != nil {
		s.reroute(ctx)
		return nil, fail(ctx, op, token, err)
	}
	return status(op, token, gen, reply)
}

// tx runs fn's commands in one MULTI/EXEC. A GET that found no key
// (goredis.Nil) is not a failure: callers read it from the command.
func (s *Store) tx(ctx context.Context, op, token string, fn func(goredis.Pipeliner)) error {
	cmds, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		fn(p)
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		s.reroute(ctx)
		return fail(ctx, op, token, queued(cmds, err))
	}
	return nil
}

// queued returns err, a transaction's error, with the refusal of the
// first command Redis would not queue when err is EXECABORT, which names
// no cause (under OOM Redis queues no command at all).
func queued(cmds []goredis.Cmder, err error) error {
	var reply goredis.Error
	if !errors.As(err, &reply) || !strings.HasPrefix(reply.Error(), "EXECABORT") {
		return err
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !errors.Is(e, goredis.Nil) && !errors.Is(e, err) {
			return fmt.Errorf("%w: %w", e, err)
		}
	}
	return err
}

// readTx is tx for a transaction that changes nothing (Read, Wait's
// snapshot): it returns ctx.Err() as soon as ctx ends, instead of when a
// stopped or unreachable Redis answers or the read timeout passes
// (go-redis does not interrupt a read blocked on its socket when the
// context is cancelled). A stream whose generation was lost while Redis
// stood still otherwise stayed open, with no keep-alive, until Redis
// answered. The transaction goes on in the background until Redis
// answers or Options.Timeout passes; fn's commands are then read by no
// one.
func (s *Store) readTx(ctx context.Context, op, token string, fn func(goredis.Pipeliner)) error {
	if ctx.Done() == nil {
		return s.tx(ctx, op, token, fn)
	}
	done := make(chan error, 1)
	go func() { done <- s.tx(ctx, op, token, fn) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Time encoding: Unix nanoseconds in decimal, "" for the zero time. Times
// outside the years 1678–2262 (int64 nanoseconds) do not survive.
func encTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixNano(), 10)
}

func decTime(v string) time.Time {
	if v == "" {
		return time.Time{}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func u64(v string) uint64 {
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

func i64(v string) int64 {
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// str returns a reply element as a string ("" for nil).
func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func at(reply []any, i int) any {
	if i < len(reply) {
		return reply[i]
	}
	return nil
}

// bytesOrNil returns v as a byte slice, nil when empty.
func bytesOrNil(v string) []byte {
	if v == "" {
		return nil
	}
	return []byte(v)
}
