package requeststate

// This file holds the Ledger that a fleet shares through Redis.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultLedgerPrefix is the default prefix of RedisLedger's keys.
const DefaultLedgerPrefix = "tidemark:request-state:used:"

// RedisLedger is a Ledger in Redis: one key per used state (the prefix and
// the hex of the state's id), written with SET NX and a lifetime that ends
// at the state's expiry, after which Redis deletes it. Every replica that
// shares the Redis refuses a replay of a state any of them accepted. It
// never returns ErrLedgerFull (Redis's maxmemory is its bound); an error
// of Redis comes back as it is, and Open then refuses the state with
// reason unavailable. It is safe for concurrent use.
type RedisLedger struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewRedisLedger returns a RedisLedger over rdb (not closed by the
// ledger) whose keys start with prefix ("": DefaultLedgerPrefix).
func NewRedisLedger(rdb redis.UniversalClient, prefix string) *RedisLedger {
	if prefix == "" {
		prefix = DefaultLedgerPrefix
	}
	return &RedisLedger{rdb: rdb, prefix: prefix}
}

// Use implements Ledger. The key lives expires minus now (at least one
// millisecond), measured by the caller's clock, not Redis's.
func (l *RedisLedger) Use(ctx context.Context, id string, now, expires time.Time) (bool, error) {
	ttl := max(expires.Sub(now), time.Millisecond)
	err := l.rdb.SetArgs(ctx, l.prefix+hex.EncodeToString([]byte(id)), 1, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("redis: %w", err)
	}
	return true, nil
}
