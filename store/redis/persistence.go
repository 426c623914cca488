package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
)

// Persistence is how the Redis server behind a Store keeps data across a
// restart, as its configuration says (CONFIG GET).
type Persistence struct {
	// AppendOnly: `appendonly yes`.
	AppendOnly bool
	// Fsync is the `appendfsync` policy: "always", "everysec" or "no".
	Fsync string
	// Snapshots is the `save` schedule ("" when RDB snapshots are off).
	Snapshots string
}

// Safe reports whether a Redis restart can only keep every acknowledged
// write (append-only, fsync always) or lose everything (no persistence);
// any other setting can bring back an older state, under which sequences
// are assigned twice (see the package documentation, "Durability").
func (p Persistence) Safe() bool {
	if p.AppendOnly {
		return p.Fsync == "always"
	}
	return p.Snapshots == ""
}

// String describes p for a log line, e.g. "appendonly yes, appendfsync
// always, save \"\"".
func (p Persistence) String() string {
	ao := "no"
	if p.AppendOnly {
		ao = "yes"
	}
	return fmt.Sprintf("appendonly %s, appendfsync %s, save %q", ao, p.Fsync, p.Snapshots)
}

// Persistence reads the server's persistence settings, so that a fleet
// replica can warn about (or refuse) a Redis whose restart could bring
// back an older state. It fails with ErrUnavailable when Redis cannot be
// reached, and with a plain error when Redis refuses CONFIG GET (managed
// services often do).
func (s *Store) Persistence(ctx context.Context) (Persistence, error) {
	// One parameter per CONFIG GET: several in one call need Redis 7.
	var cmds [3]*goredis.MapStringStringCmd
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, name := range []string{"appendonly", "appendfsync", "save"} {
			cmds[i] = p.ConfigGet(ctx, name)
		}
		return nil
	})
	if err != nil {
		var reply goredis.Error
		if errors.As(err, &reply) {
			return Persistence{}, fmt.Errorf("redis store: config get: %w", err)
		}
		return Persistence{}, fmt.Errorf("redis store: config get: %w: %w", store.ErrUnavailable, err)
	}
	return Persistence{
		AppendOnly: cmds[0].Val()["appendonly"] == "yes",
		Fsync:      cmds[1].Val()["appendfsync"],
		Snapshots:  cmds[2].Val()["save"],
	}, nil
}
