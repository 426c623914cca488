package redis

// list.go holds what an operator's tool reads of a whole fleet (tidemark
// inspect --fleet): the replicas the directory holds and every session
// record, with its owner, generation and lease. Both walk the keyspace
// with SCAN (on every primary of a Cluster), so they cost one round trip
// per scanBatch keys and never block Redis; a key written or removed
// during the walk may or may not be seen (SCAN's guarantee).

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

// scanBatch is the COUNT hint of each SCAN, and so about how many records
// one pipelined read fetches.
const scanBatch = 500

// Replica is one entry of the replica directory.
type Replica struct {
	// ID is the replica's ID (tidemark serve --replica-id).
	ID string
	// URL is where it serves MCP (what Lookup returns).
	URL string
	// TTL is how long the entry lasts unless the replica announces itself
	// again (its lease renewal interval keeps it well above zero).
	TTL time.Duration
}

// Replicas returns the replicas announced in the directory, by ID. Errors
// wrap store.ErrUnavailable.
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	var mu sync.Mutex
	var out []Replica
	prefix := s.replicaKey("")
	err := s.scan(ctx, prefix+"*", func(c *goredis.Client, keys []string) error {
		urls := make([]*goredis.StringCmd, len(keys))
		ttls := make([]*goredis.DurationCmd, len(keys))
		if _, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, k := range keys {
				urls[i], ttls[i] = p.Get(ctx, k), p.PTTL(ctx, k)
			}
			return nil
		}); err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, k := range keys {
			url, err := urls[i].Result()
			if err != nil { // expired since the SCAN
				continue
			}
			out = append(out, Replica{ID: strings.TrimPrefix(k, prefix), URL: url, TTL: max(0, ttls[i].Val())})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis store: list replicas: %w: %w", store.ErrUnavailable, err)
	}
	slices.SortFunc(out, func(a, b Replica) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// EachSession calls fn with every session record in Redis, in no
// particular order: Token, Generation, Owner, LeaseUntil, Created and
// LastSeen are set, UserID and State are not read. Calls are not
// concurrent. It stops at fn's first error and returns it; other errors
// wrap store.ErrUnavailable.
func (s *Store) EachSession(ctx context.Context, fn func(store.Record) error) error {
	var mu sync.Mutex
	var fnErr error
	start, end := s.prefix+"{", "}:rec"
	err := s.scan(ctx, start+"*"+end, func(c *goredis.Client, keys []string) error {
		hs := make([]*goredis.SliceCmd, len(keys))
		if _, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, k := range keys {
				hs[i] = p.HMGet(ctx, k, "gen", "owner", "lease", "created", "seen")
			}
			return nil
		}); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, k := range keys {
			v := hs[i].Val()
			if fnErr != nil || len(v) != 5 || v[0] == nil { // ended since the SCAN
				continue
			}
			rec := store.Record{
				Token:      strings.TrimSuffix(strings.TrimPrefix(k, start), end),
				Generation: u64(str(v[0])),
				Owner:      str(v[1]),
				LeaseUntil: decTime(str(v[2])),
				Created:    decTime(str(v[3])),
				LastSeen:   decTime(str(v[4])),
			}
			if err := fn(rec); err != nil {
				fnErr = err
				return err
			}
		}
		return nil
	})
	switch {
	case fnErr != nil:
		return fnErr
	case err != nil:
		return fmt.Errorf("redis store: list sessions: %w: %w", store.ErrUnavailable, err)
	}
	return nil
}

// scan calls fn with each batch of keys matching pattern, on every primary
// (one, or each of a Cluster's, concurrently), through that primary's
// client.
func (s *Store) scan(ctx context.Context, pattern string, fn func(c *goredis.Client, keys []string) error) error {
	each := func(ctx context.Context, c *goredis.Client) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, scanBatch).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				if err := fn(c, keys); err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, each)
	}
	c, ok := s.rdb.(*goredis.Client)
	if !ok {
		return fmt.Errorf("unexpected client %T", s.rdb)
	}
	return each(ctx, c)
}
