// eviction.go holds reading Redis's maxmemory-policy: a fleet needs
// Redis never to evict the store's keys.

package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
)

// NoEviction is the maxmemory-policy under which Redis never evicts a
// key: over maxmemory it refuses writes instead (the store then answers
// ErrUnavailable). It is the only policy a fleet may run with: an evicted
// record is a session lost without a tombstone (404), an evicted log a
// session whose events are lost (store.ErrLogLost).
const NoEviction = "noeviction"

// EvictionPolicy returns the server's maxmemory-policy (CONFIG GET), so
// that a fleet replica can warn when Redis may evict the store's keys
// (anything but NoEviction). It fails with ErrUnavailable when Redis
// cannot be reached, and with a plain error when Redis refuses CONFIG GET
// (managed services often do).
func (s *Store) EvictionPolicy(ctx context.Context) (string, error) {
	m, err := s.rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		var reply goredis.Error
		if errors.As(err, &reply) {
			return "", fmt.Errorf("redis store: config get maxmemory-policy: %w", err)
		}
		return "", fmt.Errorf("redis store: config get maxmemory-policy: %w: %w", store.ErrUnavailable, err)
	}
	p, ok := m["maxmemory-policy"]
	if !ok {
		return "", errors.New("redis store: config get maxmemory-policy: no such parameter in the reply")
	}
	return p, nil
}
