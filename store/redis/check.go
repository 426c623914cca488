package redis

// check.go holds the write probe of Check: the one write a readiness
// probe makes, to learn whether Redis takes writes now, which a read
// cannot tell (CLIENT PAUSE WRITE, out of memory, a read-only replica
// answer reads as usual).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
)

// checkWriteTimeout bounds Check's write probe: a write that Redis has
// not acknowledged within it counts as refused. Redis acknowledges a
// small SET in well under a millisecond (a few with appendfsync always),
// so a write still pending after it is one that Redis holds back (CLIENT
// PAUSE WRITE blocks writes instead of failing them) or a server that
// does not answer, and every session's writes wait the same way.
const checkWriteTimeout = 500 * time.Millisecond

// checkKeyTTL is the TTL of the write probe's key: a fleet that stops
// leaves nothing behind it.
const checkKeyTTL = time.Minute

// checkKey is the write probe's key (keys.go): one for the whole fleet,
// since its value means nothing.
func (s *Store) checkKey() string { return s.prefix + "readiness" }

// writable writes the probe's key, a SET of one byte with checkKeyTTL,
// within checkWriteTimeout (or ctx's deadline, when sooner). Its error
// wraps store.ErrUnavailable: Redis refused the write (OOM, READONLY,
// ...), or did not acknowledge it in time. On a Cluster it tries the
// primary that holds the key's slot.
func (s *Store) writable(ctx context.Context) error {
	bound := checkWriteTimeout
	if dl, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(dl))
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := s.rdb.Set(wctx, s.checkKey(), "1", checkKeyTTL).Err()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		// The socket's deadline is the context's (Options: contexts'
		// deadlines are honoured), and its timeout can come before the
		// context's own error is set.
		return fmt.Errorf("redis store: a write was not acknowledged within %v (Redis holds writes back, as CLIENT PAUSE WRITE does, or does not answer): %w",
			bound.Round(time.Millisecond), store.ErrUnavailable)
	}
	return failing(ctx, "write probe", err)
}
