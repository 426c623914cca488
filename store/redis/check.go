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

	goredis "github.com/redis/go-redis/v9"

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
// within checkWriteTimeout (or ctx's deadline, when sooner), and when
// writes wait for replicas (Options.Replicas; zero: those connected) it
// WAITs for as many on the same connection, within the same bound: a
// replica that is connected but does not acknowledge (stopped, its link
// held) fails every session's write (runOn), and so fails the probe. Its
// error wraps store.ErrUnavailable: Redis refused the write (OOM,
// READONLY, ...), did not acknowledge it in time, or fewer replicas than
// writes need acknowledged it. On a Cluster it tries the primary that
// holds the key's slot.
func (s *Store) writable(ctx context.Context) error {
	bound := checkWriteTimeout
	if dl, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(dl))
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	primary, err := primaryFor(wctx, s.rdb, s.checkKey())
	if err != nil {
		return failing(ctx, "write probe", err)
	}
	n, err := s.repl.need(wctx, primary)
	if err != nil {
		return failing(ctx, "write probe", err)
	}
	// WAIT's own timeout ends before the socket's deadline, so that a
	// short count comes back as an answer rather than a cut connection;
	// WAIT 0 would block for ever.
	waitFor := max(min(s.repl.timeout, bound*4/5), time.Millisecond)
	var set *goredis.StatusCmd
	var wait *goredis.Cmd
	_, err = primary.Pipelined(wctx, func(p goredis.Pipeliner) error {
		set = p.Set(wctx, s.checkKey(), "1", checkKeyTTL)
		if n > 0 {
			wait = p.Do(wctx, "WAIT", n, waitFor.Milliseconds())
		}
		return nil
	})
	if err == nil {
		err = set.Err()
	}
	switch {
	case err == nil && wait != nil:
		if acks, werr := wait.Int64(); werr != nil {
			return failing(ctx, "write probe", werr)
		} else if int(acks) < n {
			return fmt.Errorf("redis store: a write reached %d of the %d replicas writes must reach within %v (a replica is stopped or cut off, and every session's write fails the same way): %w",
				acks, n, waitFor.Round(time.Millisecond), store.ErrUnavailable)
		}
		return nil
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
