// Package pending counts, per session, the events a pipelined store has
// accepted and not yet stored, and makes producers wait while they exceed
// a bound (back-pressure): a tool that produces faster than the
// disk or Redis can store makes its own appends wait, so the process's
// memory stays bounded. It also says which accepted events may wait for
// their session's next append (Lingers). store/durable and store/redis
// share it.
package pending

import (
	"context"
	"sync"

	"github.com/tidemark-mcp/tidemark/store"
)

// Lingers reports whether every event of evs may be held back, up to
// store.LingerMax, to be stored with the session's next append
// (store.Event.Linger).
func Lingers(evs []store.Event) bool {
	for i := range evs {
		if !evs[i].Linger {
			return false
		}
	}
	return len(evs) > 0
}

// Defaults of Limits.
const (
	// DefaultEvents is the default Limits.Events: 4096 events.
	DefaultEvents = 4096
	// DefaultBytes is the default Limits.Bytes: 4 MiB.
	DefaultBytes = 4 << 20
)

// Limits bounds one session's accepted, not yet stored events.
type Limits struct {
	// Events is the most events (default DefaultEvents).
	Events int
	// Bytes is the most bytes, counted as store.Event.Size (default
	// DefaultBytes).
	Bytes int64
}

// OrDefault returns l with zero fields set to their defaults.
func (l Limits) OrDefault() Limits {
	if l.Events <= 0 {
		l.Events = DefaultEvents
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultBytes
	}
	return l
}

// Count is one session's accepted, not yet stored events. The zero value
// counts nothing. It is safe for concurrent use.
type Count struct {
	mu     sync.Mutex
	events int
	bytes  int64
	// room is closed and cleared whenever the count falls; nil while
	// nobody waits.
	room chan struct{}
}

// Reserve counts n more events of size bytes, first waiting, while the
// count is not zero, until they fit in lim: an append larger than lim on
// its own still goes through once nothing else is pending, so no append
// waits forever. It fails with ctx.Err(), counting nothing, when ctx ends
// first.
func (c *Count) Reserve(ctx context.Context, n int, bytes int64, lim Limits) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitLocked(ctx, func() bool {
		return c.events == 0 || (c.events+n <= lim.Events && c.bytes+bytes <= lim.Bytes)
	}); err != nil {
		return err
	}
	c.events += n
	c.bytes += bytes
	return nil
}

// Release uncounts n events of size bytes (stored, or dropped as lost) and
// wakes the producers waiting for room.
func (c *Count) Release(n int, bytes int64) {
	c.mu.Lock()
	c.events -= n
	c.bytes -= bytes
	if c.room != nil {
		close(c.room)
		c.room = nil
	}
	c.mu.Unlock()
}

// Drain waits until the count is zero, or fails with ctx.Err().
func (c *Count) Drain(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitLocked(ctx, func() bool { return c.events == 0 })
}

// Len returns the events and bytes counted now.
func (c *Count) Len() (events int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events, c.bytes
}

// waitLocked waits, with c.mu held on entry and on return, until ok
// holds, or fails with ctx.Err(); the count falling wakes it to check.
func (c *Count) waitLocked(ctx context.Context, ok func() bool) error {
	for !ok() {
		if c.room == nil {
			c.room = make(chan struct{})
		}
		ch := c.room
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			c.mu.Lock()
			return ctx.Err()
		case <-ch:
		}
		c.mu.Lock()
	}
	return nil
}
