// perrequest.go holds the transport under the sessionless bridge: each
// message goes out on a connection of its own of the go-sdk's streamable
// client transport, so that a broken answer fails one call, never the
// others (DESIGN.md, "The connect bridge").

package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/resume"
)

// errAnswerLost is the error answer a call gets when its connection broke
// before the server's answer came (the sessionless era resumes nothing).
var errAnswerLost = errors.New("the answer stream broke before the server's answer")

// errRejected is the go-sdk's "rejected by transport" error (code
// -32005, jsonrpc2.ErrRejected, which it compares by code): a Write error
// that wraps it fails its message only.
var errRejected = &jsonrpc.Error{Code: -32005, Message: "rejected by transport"}

// perRequest is an mcp.Transport whose connection sends every message on a
// new connection of t. In go-sdk v1.8.0 a JSON answer cut mid-body, an
// undecodable event or a refused resume fails the whole connection, and
// every later Write with it; a connection per request confines that
// failure to its call, whose answer becomes an error wrapping
// errAnswerLost. A sessionless request carries its protocol version in
// params._meta, from which the SDK's transport sets MCP-Protocol-Version,
// so a fresh connection frames it as the shared one would.
//
// A call that cannot connect (the server is down or restarting) was not
// sent, so sending it again cannot run it twice: it is sent again after
// the resume backoff (Policy) within RetryFor of its first failure, as the
// stateful era's transport does (the fault table of docs/connect.md: a new
// call's POST is retried for up to --resume-timeout). server/discover is
// not: the first one's retries are bounded by --start-timeout (sessionless.
// connect).
type perRequest struct {
	t *mcp.StreamableClientTransport
	// RetryFor bounds the retries of a call that cannot connect; zero:
	// none.
	RetryFor time.Duration
	// Policy gives the waits between those retries.
	Policy resume.Policy
}

// Connect implements mcp.Transport.
func (p perRequest) Connect(ctx context.Context) (mcp.Connection, error) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &perRequestConn{t: p.t, retryFor: p.RetryFor, policy: p.Policy, ctx: cctx, cancel: cancel, in: make(chan jsonrpc.Message), done: make(chan struct{})}, nil
}

type perRequestConn struct {
	t        *mcp.StreamableClientTransport
	retryFor time.Duration
	policy   resume.Policy

	ctx    context.Context // ends with Close: ends the pumps
	cancel context.CancelFunc
	in     chan jsonrpc.Message
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// SessionID implements mcp.Connection: the sessionless era has none.
func (c *perRequestConn) SessionID() string { return "" }

// Read implements mcp.Connection.
func (c *perRequestConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-c.in:
		return m, nil
	case <-c.done:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write implements mcp.Connection: msg goes out on a new connection; for
// a call, that connection is read until the call's answer (or its end,
// which answers the call with errAnswerLost), then closed. A call whose
// context ends is given up: the SDK has answered it already.
func (c *perRequestConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	select {
	case <-c.done:
		return mcp.ErrConnectionClosed
	default:
	}
	req, ok := msg.(*jsonrpc.Request)
	retry := ok && req.IsCall() && req.Method != "server/discover" && c.retryFor > 0
	var (
		inner mcp.Connection
		since time.Time // the first failure to connect
	)
	for attempt := 0; ; attempt++ {
		var err error
		inner, err = c.t.Connect(c.ctx)
		if err != nil {
			return err
		}
		err = inner.Write(ctx, msg)
		if err == nil {
			break
		}
		inner.Close()
		if retry && dialError(err) != nil && ctx.Err() == nil {
			if since.IsZero() {
				since = time.Now()
			}
			if left := c.retryFor - time.Since(since); left > 0 && c.sleep(ctx, min(resume.Backoff(c.policy, attempt, 0), left)) {
				continue
			}
		}
		// Marked rejected, the failure is the call's alone: the SDK's
		// jsonrpc2 connection returns it to the caller and stays usable,
		// where any other Write error breaks it for every later call.
		return fmt.Errorf("%w: %w", err, errRejected)
	}
	if !ok || !req.IsCall() {
		inner.Close()
		return nil
	}
	rctx, stop := context.WithCancel(c.ctx)
	unhook := context.AfterFunc(ctx, stop)
	c.wg.Go(func() {
		defer inner.Close()
		defer stop()
		defer unhook()
		for {
			m, err := inner.Read(rctx)
			if err != nil {
				if rctx.Err() == nil {
					c.push(&jsonrpc.Response{ID: req.ID, Error: fmt.Errorf("%w: %v", errAnswerLost, err)})
				}
				return
			}
			c.push(m)
			if r, ok := m.(*jsonrpc.Response); ok && r.ID == req.ID {
				return
			}
		}
	})
	return nil
}

// sleep waits d, and reports false when ctx ended or c closed first.
func (c *perRequestConn) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-c.done:
		return false
	}
}

func (c *perRequestConn) push(m jsonrpc.Message) {
	select {
	case c.in <- m:
	case <-c.done:
	}
}

// Close implements mcp.Connection: it ends the connections still read.
func (c *perRequestConn) Close() error {
	c.once.Do(func() {
		close(c.done)
		c.cancel()
		c.wg.Wait()
	})
	return nil
}
