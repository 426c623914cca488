// attach.go holds the rule of one reader per stream (DESIGN.md, "Delivery
// rules"): which connection serves each stream, and the takeover of a
// stream by a newer connection.

package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// errTakenOver is attach's error for a connection that a newer connection
// took the stream from before it began to serve it.
var errTakenOver = errors.New("transport: stream taken over by a newer connection")

// streamKey names one stream of one session generation.
type streamKey struct {
	token  string
	gen    uint64
	stream uint64
}

// connections enforces one reader per stream (DESIGN.md, "Delivery rules"):
// a connection that attaches to a stream takes it over from the connection
// serving it, so no event is ever written to two connections:
//   - the older connection writes nothing from the moment it is taken over
//     (its sseWriter checks the attachment before every write, under the
//     writer's lock, so only a write already under way completes);
//   - the newer connection writes nothing until the older has stopped;
//   - a connection taken over while it still waits for its own predecessor
//     never serves at all: the newest connection wins.
//
// It also lets Shutdown wait for every connection to end.
type connections struct {
	mu       sync.Mutex
	byStream map[streamKey]*attachment
	active   sync.WaitGroup
	waiting  atomic.Int64 // attach calls waiting for an older connection to stop
}

// attachment is one connection serving one stream.
type attachment struct {
	kickOnce sync.Once
	kicked   chan struct{} // closed when a newer connection takes the stream over
	done     chan struct{} // closed when this connection has stopped writing
}

func newConnections() *connections {
	return &connections{byStream: make(map[streamKey]*attachment)}
}

// attach makes a new attachment the reader of key. If another connection
// serves key, it is told to stop and attach waits until it has (its writes
// are bounded by the write timeout). It fails with errTakenOver when a
// newer connection took key over meanwhile, and with ctx's error when ctx
// ends first; either way the attachment is detached once its predecessor
// has stopped, so that a connection waiting for it never overlaps that
// predecessor.
func (c *connections) attach(ctx context.Context, key streamKey) (*attachment, error) {
	a := &attachment{kicked: make(chan struct{}), done: make(chan struct{})}
	c.mu.Lock()
	old := c.byStream[key]
	c.byStream[key] = a
	c.active.Add(1)
	c.mu.Unlock()
	if old == nil {
		return a, nil
	}
	old.kick()
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	select {
	case <-old.done:
	case <-ctx.Done():
		go func() {
			<-old.done
			c.detach(key, a)
		}()
		return nil, ctx.Err()
	}
	if a.isKicked() {
		c.detach(key, a)
		return nil, errTakenOver
	}
	return a, nil
}

// detach ends a's hold on key.
func (c *connections) detach(key streamKey, a *attachment) {
	c.mu.Lock()
	if c.byStream[key] == a {
		delete(c.byStream, key)
	}
	c.mu.Unlock()
	close(a.done)
	c.active.Done()
}

func (a *attachment) kick() { a.kickOnce.Do(func() { close(a.kicked) }) }

// isKicked reports whether a newer connection has taken a's stream over.
func (a *attachment) isKicked() bool { return isClosed(a.kicked) }

// wait blocks until every attachment is detached or ctx is done.
func (c *connections) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { c.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// readers returns, for each stream of token's generation gen that a
// connection serves, the number of connections serving it (1: one reader
// per stream).
func (c *connections) readers(token string, gen uint64) map[uint64]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint64]int{}
	for k := range c.byStream {
		if k.token == token && k.gen == gen {
			out[k.stream]++
		}
	}
	return out
}

// Readers returns, for each stream of generation gen of the session token
// that a connection is writing, the number of connections writing it: 1
// (one reader per stream). The session inspector shows them.
func (h *Handler) Readers(token string, gen uint64) map[uint64]int {
	return h.conns.readers(token, gen)
}
