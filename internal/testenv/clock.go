// The settable clock that tests hand to components taking a
// `Now func() time.Time` option.

package testenv

import (
	"sync"
	"time"
)

// Clock is a time source that moves only when the test advances it. Its
// methods are safe for the component's goroutines and the test's at once.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that reads start until advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time; pass the method value (clk.Now) as a
// component's Now option.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward for a negative d).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
