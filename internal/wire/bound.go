// bound.go holds the wait a request's sender allows for its answer's
// headers, which a transport under the sender may hold while it waits on
// a person rather than on the server.

package wire

import (
	"context"
	"sync"
	"time"
)

// headerBound is a timer over one request's wait for its answer's
// headers, which Hold stops while a transport waits on something other
// than the server (an interactive authorization).
type headerBound struct {
	d     time.Duration
	timer *time.Timer

	mu      sync.Mutex
	held    int  // holds not yet released
	stopped bool // the answer came, or the bound fired
}

type headerBoundKey struct{}

// WithHeaderBound returns a context carrying a bound of d over the wait
// for a request's answer headers, and a stop to call once they arrive. At
// d, unless stopped or held (HoldHeaderBound), expire runs once.
func WithHeaderBound(ctx context.Context, d time.Duration, expire func()) (context.Context, func()) {
	b := &headerBound{d: d}
	b.timer = time.AfterFunc(d, func() {
		b.mu.Lock()
		fire := !b.stopped && b.held == 0
		b.stopped = b.stopped || fire
		b.mu.Unlock()
		if fire {
			expire()
		}
	})
	stop := func() {
		b.mu.Lock()
		b.stopped = true
		b.mu.Unlock()
		b.timer.Stop()
	}
	return context.WithValue(ctx, headerBoundKey{}, b), stop
}

// HoldHeaderBound stops the header bound ctx carries, if any, until the
// release it returns is called; the bound then starts over, whole, since
// the request is sent again after what held it. A transport calls it
// around a wait the server has no part in: an OAuth authorization that a
// person completes in a browser (MCP 2025-11-25, basic/authorization)
// may take minutes, and the bound is for the server's answer.
func HoldHeaderBound(ctx context.Context) (release func()) {
	b, ok := ctx.Value(headerBoundKey{}).(*headerBound)
	if !ok {
		return func() {}
	}
	b.mu.Lock()
	b.held++
	b.timer.Stop()
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.held--; b.held == 0 && !b.stopped {
				b.timer.Reset(b.d)
			}
		})
	}
}
