package transport

import (
	"context"
	"sync"
)

// streamKey names one stream of one session generation.
type streamKey struct {
	token  string
	gen    uint64
	stream uint64
}

// connections enforces one reader per stream (DESIGN.md, "Delivery rules"):
// a connection that attaches to a stream takes it over from the connection
// serving it, which stops before the new one writes anything, so no event
// is ever written to two connections. It also lets Shutdown wait for every
// connection to end.
type connections struct {
	mu       sync.Mutex
	byStream map[streamKey]*attachment
	active   sync.WaitGroup
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
// are bounded by the write timeout), or until ctx is done.
func (c *connections) attach(ctx context.Context, key streamKey) (*attachment, error) {
	a := &attachment{kicked: make(chan struct{}), done: make(chan struct{})}
	c.mu.Lock()
	old := c.byStream[key]
	c.byStream[key] = a
	c.active.Add(1)
	c.mu.Unlock()
	if old != nil {
		old.kick()
		select {
		case <-old.done:
		case <-ctx.Done():
			c.detach(key, a)
			return nil, ctx.Err()
		}
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

// wait blocks until every attachment is detached or ctx is done.
func (c *connections) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { c.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
