package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

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
	// Snapshot reports that Redis wrote an RDB snapshot since it started
	// (SAVE, BGSAVE, a replica's full sync to disk) or loaded one with
	// keys at its start (INFO persistence: rdb_saves,
	// rdb_last_load_keys_loaded). Without append-only persistence, Redis
	// loads the snapshot in its directory at its next start whatever the
	// `save` schedule says, bringing back the older state it holds.
	Snapshot bool
}

// Safe reports whether a Redis restart can only keep every acknowledged
// write (append-only, fsync always) or lose everything (no persistence);
// any other setting can bring back an older state, under which sequences
// are assigned twice (see the package documentation, "Durability").
func (p Persistence) Safe() bool {
	if p.AppendOnly {
		return p.Fsync == "always"
	}
	return p.Snapshots == "" && !p.Snapshot
}

// String describes p for a log line, e.g. "appendonly yes, appendfsync
// always, save \"\"".
func (p Persistence) String() string {
	ao := "no"
	if p.AppendOnly {
		ao = "yes"
	}
	s := fmt.Sprintf("appendonly %s, appendfsync %s, save %q", ao, p.Fsync, p.Snapshots)
	if p.Snapshot && !p.AppendOnly {
		s += ", an RDB snapshot written or loaded since Redis started"
	}
	return s
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
		Snapshot:   s.snapshotTaken(ctx),
	}, nil
}

// snapshotTaken reports whether INFO persistence counts an RDB snapshot
// written since Redis started, or one with keys loaded at its start
// (Persistence.Snapshot). A server that does not answer INFO, or lacks
// the fields (before Redis 7), reports none.
func (s *Store) snapshotTaken(ctx context.Context) bool {
	info, err := s.rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return false
	}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "rdb_saves" && name != "rdb_last_load_keys_loaded") {
			continue
		}
		if n, err := strconv.ParseInt(value, 10, 64); err == nil && n > 0 {
			return true
		}
	}
	return false
}
