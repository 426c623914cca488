package bridge

// This file holds the order of the backend's progress notifications and
// responses: the go-sdk client hands a response to its caller as soon as it
// reads it, while the notifications read before it wait in the client's
// handler queue; a call could then return, and its stream close, before
// its last progress notification was relayed. The backend connection holds
// each response back until every progress notification read before it has
// been handled.

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// methodProgress is the method of progress notifications.
const methodProgress = "notifications/progress"

// orderWait bounds how long a response waits for the progress
// notifications before it; past it the response goes on, and the
// notifications that were still queued count as handled.
const orderWait = 2 * time.Second

// order counts the progress notifications of one backend connection: read
// from the connection, and handled by the client.
type order struct {
	mu      sync.Mutex
	read    int64
	handled int64
	changed chan struct{} // closed and replaced when handled grows
}

func newOrder() *order { return &order{changed: make(chan struct{})} }

// transport wraps t so that its connection holds back responses for o.
func (o *order) transport(t mcp.Transport) mcp.Transport { return orderedTransport{t, o} }

// middleware is the client's receiving middleware that counts the progress
// notifications it handled.
func (o *order) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method == methodProgress {
			o.mu.Lock()
			o.handled++
			close(o.changed)
			o.changed = make(chan struct{})
			o.mu.Unlock()
		}
		return res, err
	}
}

// noteRead counts one progress notification read.
func (o *order) noteRead() {
	o.mu.Lock()
	o.read++
	o.mu.Unlock()
}

// wait returns once every progress notification read so far was handled,
// or after orderWait, or when ctx ends.
func (o *order) wait(ctx context.Context) {
	timer := time.NewTimer(orderWait)
	defer timer.Stop()
	o.mu.Lock()
	target := o.read
	for o.handled < target {
		changed := o.changed
		o.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-timer.C:
			// A notification the client refused before its handler (bad
			// params) is never counted: forget it, or every later response
			// would wait.
			o.mu.Lock()
			o.handled = max(o.handled, target)
			o.mu.Unlock()
			return
		}
		o.mu.Lock()
	}
	o.mu.Unlock()
}

// orderedTransport is an mcp.Transport whose connection is ordered by o.
type orderedTransport struct {
	mcp.Transport
	o *order
}

func (t orderedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return orderedConn{c, t.o}, nil
}

// orderedConn counts the progress notifications it reads and holds back a
// response until they were handled.
type orderedConn struct {
	mcp.Connection
	o *order
}

func (c orderedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if m.Method == methodProgress && !m.IsCall() {
			c.o.noteRead()
		}
	case *jsonrpc.Response:
		c.o.wait(ctx)
	}
	return msg, err
}
