// A context whose end is seen at once while what context.AfterFunc
// arranged for it waits: the moment after an HTTP handler returns, before
// the goroutines that its request context's end starts have run.

package testenv

import (
	"context"
	"sync"
	"time"
)

// LateRelease is a context that ends with End (or when its parent ends):
// Done closes and Err returns context.Canceled at once, while the
// functions registered on it with context.AfterFunc (and the cancellation
// of contexts derived from it, which context.WithCancel registers the
// same way) wait until Release has been called too. It stands for an
// http.Request's context once net/http has returned from the handler:
// the context is done, but the goroutines its end starts may not have
// run yet, and code that another goroutine runs then (http.Server.Shutdown
// returning, and what follows it) must not depend on them. Values and the
// deadline are its parent's.
type LateRelease struct {
	parent context.Context
	done   chan struct{}

	mu       sync.Mutex
	ended    bool
	released bool
	next     int            // key of the next function registered
	held     map[int]func() // functions registered and not yet run or stopped
}

// NewLateRelease returns a LateRelease that ends when parent does, or
// earlier with End.
func NewLateRelease(parent context.Context) *LateRelease {
	c := &LateRelease{parent: parent, done: make(chan struct{}), held: map[int]func(){}}
	context.AfterFunc(parent, c.End)
	return c
}

// Deadline returns the parent's deadline.
func (c *LateRelease) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Value returns the parent's value for key.
func (c *LateRelease) Value(key any) any { return c.parent.Value(key) }

// Done returns a channel closed by End.
func (c *LateRelease) Done() <-chan struct{} { return c.done }

// Err returns context.Canceled once End has run, nil before.
func (c *LateRelease) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return context.Canceled
	}
	return nil
}

// End ends c; the functions registered on it run now if Release has been
// called, else when it is.
func (c *LateRelease) End() {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	close(c.done)
	run := c.takeLocked()
	c.mu.Unlock()
	startAll(run)
}

// Release lets the functions registered on c run: now if c has ended,
// else when it ends.
func (c *LateRelease) Release() {
	c.mu.Lock()
	c.released = true
	run := c.takeLocked()
	c.mu.Unlock()
	startAll(run)
}

// AfterFunc registers f to run, in a goroutine of its own, once c has
// ended and been released; context.AfterFunc and context.WithCancel call
// it for c. stop unregisters f and reports whether it did so before f
// was started.
func (c *LateRelease) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	key := c.next
	c.next++
	c.held[key] = f
	run := c.takeLocked()
	c.mu.Unlock()
	startAll(run)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.held[key]
		delete(c.held, key)
		return ok
	}
}

// takeLocked returns the functions to run now, which leave held: all of
// them once c has ended and been released, none before. c.mu must be
// held.
func (c *LateRelease) takeLocked() []func() {
	if !c.ended || !c.released || len(c.held) == 0 {
		return nil
	}
	run := make([]func(), 0, len(c.held))
	for k, f := range c.held {
		run = append(run, f)
		delete(c.held, k)
	}
	return run
}

// startAll starts each of fs in a goroutine of its own, as
// context.AfterFunc does.
func startAll(fs []func()) {
	for _, f := range fs {
		go f()
	}
}
