package fanout

// This file holds the Bus's Redis Stream: the entry each raised
// notification becomes, and the reader that delivers the entries other
// replicas appended.

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/replay"
)

// Fields of a stream entry.
const (
	fieldOrigin = "origin" // the Bus that appended it (Bus.origin)
	fieldMethod = "method"
	fieldURI    = "uri" // ResourceUpdated only
)

// Backoff of the reader while Redis cannot be read.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// readCount is the most entries one read of the stream returns.
const readCount = 256

// publish appends n to the stream, trimmed to about MaxLen entries.
func (b *Bus) publish(ctx context.Context, n Notification) error {
	values := []any{fieldOrigin, b.origin, fieldMethod, n.Method}
	if n.URI != "" {
		values = append(values, fieldURI, n.URI)
	}
	return b.opts.Redis.XAdd(ctx, &redis.XAddArgs{
		Stream: b.opts.Key, MaxLen: b.opts.MaxLen, Approx: true, Values: values,
	}).Err()
}

// position is where a reader stands in the stream: the ID of the entry it
// read last, and how many entries the stream had received up to and
// including that one (XINFO STREAM entries-added), which tells whether
// the entries after it were trimmed.
type position struct {
	id    string
	added int64
}

// newest returns the position after the newest entry of stream key: "0-0"
// and 0 when the stream does not exist yet.
func newest(ctx context.Context, rdb redis.UniversalClient, key string) (position, error) {
	info, err := rdb.XInfoStream(ctx, key).Result()
	switch {
	case err != nil && strings.Contains(err.Error(), "no such key"):
		return position{id: "0-0"}, nil
	case err != nil:
		return position{}, err
	}
	return position{id: info.LastGeneratedID, added: info.EntriesAdded}, nil
}

// read delivers the entries appended after pos by other Buses, in stream
// order, until ctx ends. While Redis cannot be read it retries with
// backoff from the same entry, so nothing still in the stream is skipped.
func (b *Bus) read(ctx context.Context, pos position) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		streams, err := b.opts.Redis.XRead(ctx, &redis.XReadArgs{
			Streams: []string{b.opts.Key, pos.id}, Count: readCount, Block: b.opts.Block,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue // nothing new within Block
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			if backoff == 0 {
				b.logger.Warn("cannot read the fleet's notification stream; retrying", "key", b.opts.Key,
					"reason", replay.ReasonUnavailable, "error", err)
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			sleep(ctx, backoff)
			continue
		}
		if backoff != 0 {
			backoff = 0
			b.logger.Info("reading the fleet's notification stream again", "key", b.opts.Key)
			b.checkLost(ctx, pos)
		}
		for _, s := range streams {
			for _, m := range s.Messages {
				pos.id = m.ID
				pos.added++
				b.received(ctx, m)
			}
		}
	}
}

// received delivers one entry another Bus appended; an entry of this Bus
// was delivered when it was raised.
func (b *Bus) received(ctx context.Context, m redis.XMessage) {
	if origin, _ := m.Values[fieldOrigin].(string); origin == b.origin {
		return
	}
	method, _ := m.Values[fieldMethod].(string)
	uri, _ := m.Values[fieldURI].(string)
	n := Notification{Method: method, URI: uri}
	if err := n.check(); err != nil {
		b.logger.Warn("ignoring a stream entry that is no notification", "key", b.opts.Key, "id", m.ID, "error", err)
		return
	}
	b.deliver(ctx, n)
}

// checkLost logs when entries after pos were trimmed before this Bus read
// them: the stream has dropped more entries (entries-added minus length)
// than it had received up to pos. The count is exact unless someone
// deletes entries with XDEL.
func (b *Bus) checkLost(ctx context.Context, pos position) {
	info, err := b.opts.Redis.XInfoStream(ctx, b.opts.Key).Result()
	if err != nil {
		return
	}
	if dropped := info.EntriesAdded - info.Length; dropped > pos.added {
		b.logger.Warn("notifications raised on other replicas were trimmed from the stream before this replica read them; its listeners missed them",
			"key", b.opts.Key, "reason", replay.ReasonNotificationsLost, "last_read", pos.id, "missed", dropped-pos.added)
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
