// eventcut.go holds EventCutter, a Filter that cuts the connection that
// carries a chosen SSE event, right after that event.

package faultproxy

import (
	"bytes"
	"slices"
	"sync"
)

// EventCutter is a Filter (its Filter method) that cuts, once, the
// connection carrying the first SSE event that match reports true for,
// right after that event's blank line: the client gets that event whole
// and nothing after it. Events are told apart by the "\n\n" that ends
// them (the server must not use "\r\n"). It is safe for concurrent use.
type EventCutter struct {
	match func(event []byte) bool

	mu      sync.Mutex
	pending map[int][]byte // per connection: bytes of an unfinished event
	cut     []byte         // the event cut after; nil before the cut
}

// NewEventCutter returns an EventCutter for match, which sees each whole
// event (its field lines and the blank line that ends it) until it reports
// true once.
func NewEventCutter(match func(event []byte) bool) *EventCutter {
	return &EventCutter{match: match, pending: make(map[int][]byte)}
}

// Filter implements the Filter of a Proxy.
func (c *EventCutter) Filter(conn int, chunk []byte) Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut != nil {
		return Decision{Forward: len(chunk)}
	}
	prev := c.pending[conn]
	buf := append(slices.Clip(prev), chunk...)
	start := 0
	for {
		end := bytes.Index(buf[start:], []byte("\n\n"))
		if end < 0 {
			break
		}
		end += start + 2
		if ev := buf[start:end]; c.match(ev) {
			c.cut = slices.Clone(ev)
			delete(c.pending, conn)
			return Decision{Forward: max(0, end-len(prev)), Cut: true}
		}
		start = end
	}
	c.pending[conn] = slices.Clone(buf[start:])
	return Decision{Forward: len(chunk)}
}

// Cut returns the event the connection was cut after, and whether the cut
// happened.
func (c *EventCutter) Cut() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut, c.cut != nil
}
