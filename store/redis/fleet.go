package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
)

// What a fleet needs besides the store.Store contract (package fleet): a
// directory of replicas (fleet.Directory), so that a replica can reach the
// owner of a session (fleet.Router forwards requests to it), and renewal
// of many leases in one round trip (fleet.Renewer).
//
// The directory is one string key per replica, PREFIX replica:ID, holding
// the URL at which the replica serves MCP, with a TTL: a replica announces
// itself at start and again every lease renewal, so the entry of a replica
// that died disappears after the TTL.

// ErrNoReplica is wrapped by Lookup's error when no replica of that ID has
// announced itself within its TTL: it stopped, died, or never started.
var ErrNoReplica = errors.New("replica not announced")

// ErrReplicaTaken is wrapped by AnnounceFirst's error when the directory
// entry of the replica ID holds another URL: another process announces
// that ID and is alive, or was killed less than the entry's TTL ago.
var ErrReplicaTaken = errors.New("replica ID announced by another process")

// renewBatch is how many renewals one pipelined round trip carries at most.
const renewBatch = 1000

func (s *Store) replicaKey(id string) string { return s.prefix + "replica:" + id }

// Announce records that replica id serves MCP at url, for ttl (rounded up
// to a millisecond; at least 1 ms). Call it at start and then well within
// ttl, e.g. every lease renewal with ttl = the lease. It fails with an
// error wrapping store.ErrUnavailable when Redis cannot be reached.
func (s *Store) Announce(ctx context.Context, id, url string, ttl time.Duration) error {
	ms := max(1, (ttl+time.Millisecond-1)/time.Millisecond)
	if err := s.rdb.Set(ctx, s.replicaKey(id), url, ms*time.Millisecond).Err(); err != nil {
		return fmt.Errorf("redis store: announce replica %q: %w: %w", id, store.ErrUnavailable, err)
	}
	return nil
}

// AnnounceFirst is Announce for a replica that starts: it records url for
// id only if id's entry is absent or already holds url (the same replica,
// restarted on the same address), atomically. Otherwise it returns the URL
// the entry holds and an error wrapping ErrReplicaTaken: two processes
// with one replica ID would each take the other's sessions as their own
// and re-create them at every request. Unreachable Redis: an error
// wrapping store.ErrUnavailable.
func (s *Store) AnnounceFirst(ctx context.Context, id, url string, ttl time.Duration) (holder string, err error) {
	ms := max(1, (ttl+time.Millisecond-1)/time.Millisecond)
	holder, err = s.scripts.announceFirst.Run(ctx, s.rdb, []string{s.replicaKey(id)}, url, int64(ms)).Text()
	switch {
	case err != nil:
		return "", fmt.Errorf("redis store: announce replica %q: %w: %w", id, store.ErrUnavailable, err)
	case holder != "":
		return holder, fmt.Errorf("redis store: announce replica %q at %s: %w at %s", id, url, ErrReplicaTaken, holder)
	}
	return "", nil
}

// Withdraw removes replica id's directory entry, so that others stop
// trying to reach it at once (a graceful shutdown). Errors as Announce.
func (s *Store) Withdraw(ctx context.Context, id string) error {
	if err := s.rdb.Del(ctx, s.replicaKey(id)).Err(); err != nil {
		return fmt.Errorf("redis store: withdraw replica %q: %w: %w", id, store.ErrUnavailable, err)
	}
	return nil
}

// Lookup returns the URL replica id announced. It fails with an error
// wrapping ErrNoReplica when there is no unexpired entry, and with one
// wrapping store.ErrUnavailable when Redis cannot be reached.
func (s *Store) Lookup(ctx context.Context, id string) (string, error) {
	url, err := s.rdb.Get(ctx, s.replicaKey(id)).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return "", fmt.Errorf("redis store: lookup replica %q: %w", id, ErrNoReplica)
	case err != nil:
		return "", fmt.Errorf("redis store: lookup replica %q: %w: %w", id, store.ErrUnavailable, err)
	}
	return url, nil
}

// RenewMany renews, as Renew does, the lease of owner on generation
// gens[i] of session tokens[i], for every i, until leaseUntil, in
// pipelined round trips of up to 1000 renewals. errs[i] is the outcome of
// the i-th renewal, as Renew would report it: nil, a *store.FencedError, a
// not-found or *store.EndedError, or an error wrapping
// store.ErrUnavailable. Each renewal is one script, atomic on its own; the
// batch is not a transaction.
func (s *Store) RenewMany(ctx context.Context, owner string, leaseUntil time.Time, tokens []string, gens []uint64) []error {
	errs := make([]error, len(tokens))
	lease := encTime(leaseUntil)
	for lo := 0; lo < len(tokens); lo += renewBatch {
		hi := min(lo+renewBatch, len(tokens))
		s.renewBatch(ctx, owner, lease, tokens[lo:hi], gens[lo:hi], errs[lo:hi])
	}
	return errs
}

// renewBatch renews one batch; a batch that found the script cache empty
// (Redis restarted) loads the script and runs the refused renewals again,
// which is safe since a refused script did nothing.
func (s *Store) renewBatch(ctx context.Context, owner, lease string, tokens []string, gens []uint64, errs []error) {
	todo := make([]int, len(tokens))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; attempt < 2 && len(todo) > 0; attempt++ {
		cmds := make([]*goredis.Cmd, len(todo))
		_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for j, i := range todo {
				cmds[j] = s.scripts.renew.EvalSha(ctx, p, s.keys(tokens[i]).all(),
					strconv.FormatUint(gens[i], 10), owner, lease)
			}
			return nil
		})
		_ = err // each command carries its own error
		var again []int
		for j, i := range todo {
			reply, err := cmds[j].Slice()
			switch {
			case err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0:
				again = append(again, i)
			case err != nil:
				errs[i] = fail(ctx, "renew", tokens[i], err)
			default:
				_, errs[i] = status("renew", tokens[i], gens[i], reply)
			}
		}
		if len(again) > 0 {
			if err := s.scripts.renew.Load(ctx, s.rdb).Err(); err != nil {
				for _, i := range again {
					errs[i] = fail(ctx, "renew", tokens[i], err)
				}
				return
			}
		}
		todo = again
	}
}
