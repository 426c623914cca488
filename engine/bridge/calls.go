package bridge

// This file holds the forwarded calls in flight: the progress tokens the
// backend sees in their place (clients choose theirs freely, so two of them
// may share one on the one backend connection), and where the backend's
// progress and log messages go back to.

import (
	"context"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// progressKey is the _meta key of a request's progress token (MCP
// 2025-11-25, basic/utilities/progress).
const progressKey = "progressToken"

// calls tracks the forwarded calls in flight.
type calls struct {
	mu     sync.Mutex
	next   uint64
	byTok  map[string]*call // the token the backend sees → its call
	flight map[*call]struct{}
}

// call is one forwarded request in flight.
type call struct {
	ctx     context.Context // the go-sdk handler's: messages sent with it reach the request's stream
	session *mcp.ServerSession
	token   any // the client's progress token, nil for none
}

func newCalls() *calls {
	return &calls{byTok: make(map[string]*call), flight: make(map[*call]struct{})}
}

// start records a call of req (whose forwarded _meta is meta), served
// under ctx, and returns meta with the client's progress token replaced by
// one unique on the backend connection, and the function that ends the
// record.
func (cs *calls) start(ctx context.Context, req mcp.Request, meta mcp.Meta) (mcp.Meta, func()) {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	c := &call{ctx: ctx, session: ss}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.flight[c] = struct{}{}
	tok, ok := meta[progressKey]
	if !ok || tok == nil {
		return meta, func() { cs.end(c, "") }
	}
	cs.next++
	mine := fmt.Sprintf("tidemark-bridge-%d", cs.next)
	c.token = tok
	cs.byTok[mine] = c
	meta[progressKey] = mine
	return meta, func() { cs.end(c, mine) }
}

func (cs *calls) end(c *call, tok string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.flight, c)
	if tok != "" {
		delete(cs.byTok, tok)
	}
}

// progress is the backend client's progress handler: the notification goes
// to the stream of the call whose token it names, under the client's
// token; a notification of no call in flight is dropped.
func (cs *calls) progress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	tok, _ := req.Params.ProgressToken.(string)
	cs.mu.Lock()
	c := cs.byTok[tok]
	cs.mu.Unlock()
	if c == nil || c.session == nil {
		return
	}
	p := *req.Params
	p.ProgressToken = c.token
	c.session.NotifyProgress(c.ctx, &p)
}

// log is the backend client's logging handler. A log message names no
// request; it goes to the stream of the call in flight when exactly one is,
// and is dropped otherwise (the stdio gateway's router relates it the same
// way).
func (cs *calls) log(_ context.Context, req *mcp.LoggingMessageRequest) {
	cs.mu.Lock()
	var sole *call
	if len(cs.flight) == 1 {
		for c := range cs.flight {
			sole = c
		}
	}
	cs.mu.Unlock()
	if sole == nil || sole.session == nil {
		return
	}
	sole.session.Log(sole.ctx, req.Params)
}
