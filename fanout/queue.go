package fanout

// This file holds a listener's queue: the notifications waiting for its
// stream, and the goroutine that writes them while there are any, so that
// nothing that raises or delivers a notification waits on one listener's
// connection, and a quiet stream holds no goroutine of its own.

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/replay"
)

// queueLen is the most notifications a listener's queue holds; a stream
// that would need one more is cut. A listener that reads drains its queue
// as fast as its connection takes the writes, so the queue only absorbs
// what arrives at once: one read of the fleet's stream delivers up to
// readCount (256) entries back to back, and raises on this replica come on
// top. 1024, four such reads, lets a client that pauses for a moment (a
// garbage collection, a congested link) keep its stream; the socket
// buffers of the connection hold more beyond it. A stream stalls for good
// only when its client stops reading, and the queue bounds what it holds
// meanwhile: one request per notification, its URI shared with every other
// listener, and nothing once the queue is drained.
const queueLen = 1024

// pending is one notification waiting in a listener's queue: what the
// listener's goroutine passes to the server's sending chain below the Bus.
type pending struct {
	method string
	req    mcp.Request
}

// enqueue adds the notification method, sent as req, to l's queue and
// starts l's writing goroutine unless it runs or l's acknowledgment is not
// sent yet. When the queue is full, l is cut: its stream ends (its listen
// handler returns) and it hears nothing more; its client listens again
// (MCP 2026-07-28, basic/patterns/subscriptions). A notification for a
// listener that ended is dropped.
func (b *Bus) enqueue(l *listener, method string, req mcp.Request) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if len(l.queue) >= queueLen {
		l.mu.Unlock()
		b.cut(l, method)
		return
	}
	l.queue = append(l.queue, pending{method: method, req: req})
	start := l.acked && !l.writing
	l.writing = l.writing || start
	l.mu.Unlock()
	if start {
		go b.write(l)
	}
}

// acknowledged notes that l's acknowledgment is sent, and reports whether
// its queue waits to be written: then the caller starts its writing
// goroutine (Bus.write).
func (l *listener) acknowledged() (start bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked = true
	start = !l.ended && !l.writing && len(l.queue) > 0
	l.writing = l.writing || start
	return start
}

// cut ends l, whose queue is full as a notification of method arrives.
func (b *Bus) cut(l *listener, method string) {
	if !b.forget(l) {
		return
	}
	l.cancel()
	b.logger.Warn("a subscriptions/listen stream is not reading its notifications as fast as they come; it is cut, and its client listens again",
		"method", method, "queued", queueLen, "reason", replay.ReasonListenerStalled)
}

// write sends the notifications of l's queue, in order, through the
// server's sending chain below the Bus, until the queue is empty, l ends or
// the Bus closes; enqueue starts it again for the next. One runs at a time
// (listener.writing), and only once l's acknowledgment is sent, so the
// acknowledgment is the stream's first message (basic/patterns/
// subscriptions, "Acknowledgment"). One write waits for the connection at
// most sendTimeout, or as long as the connection blocks it: a stalled
// write holds up this stream alone.
func (b *Bus) write(l *listener) {
	for {
		p, ok := l.next()
		if !ok {
			return
		}
		select {
		case <-b.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(l.ctx, sendTimeout)
		_, err := l.send(ctx, p.method, p.req)
		cancel()
		if err != nil && l.ctx.Err() == nil {
			b.logger.Warn("delivering a notification to a subscriptions/listen stream failed", "method", p.method, "error", err)
		}
	}
}

// next takes the first notification of l's queue; ok is false when the
// queue is empty or l ended, and then its writing goroutine, the caller,
// ends.
func (l *listener) next() (p pending, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || len(l.queue) == 0 {
		l.writing = false
		return pending{}, false
	}
	p = l.queue[0]
	l.queue[0] = pending{}
	l.queue = l.queue[1:]
	if len(l.queue) == 0 {
		l.queue = nil
	}
	return p, true
}

// end marks l ended and drops its queue: its writing goroutine, if any,
// ends after the write it is in. It is idempotent.
func (l *listener) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended = true
	l.queue = nil
}
