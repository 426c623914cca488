// Package gosdk hosts an *mcp.Server of the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) as a Tidemark engine, using only
// exported SDK API (DESIGN.md, "Engines"):
//
//   - each session generation is a ServerSession connected, with
//     Server.Connect, over an in-process mcp.Connection;
//   - each inbound request gets a fresh *mcp.RequestExtra; a receiving
//     middleware puts the ID of the request it belongs to in the handler's
//     context, and Connection.Write reads it back, so progress, logging,
//     sampling and elicitation sent with the handler's context are tagged
//     with their request;
//   - a session is re-created from saved state with
//     mcp.ServerSessionOptions.State, and what that state lacks (resource
//     subscriptions) is restored by replaying to the session the messages
//     engine.State.Restore gives.
package gosdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine"
)

// restoreTimeout bounds how long Start waits for the SDK to acknowledge the
// messages it replays into a re-created session.
const restoreTimeout = 5 * time.Second

// Engine hosts one *mcp.Server. Create it with New.
type Engine struct {
	// Restorable says that the server's handlers keep no per-session
	// state of their own: everything a session holds is what the
	// session-state rule folds (engine.State; the ServerSession's
	// initialize parameters and log level, and the resource
	// subscriptions), so a hibernated session wakes at the same
	// generation (engine.HibernateExact). Default false: handlers may
	// keep per-session state a new ServerSession would not have, and a
	// hibernated session wakes at generation+1 (engine.HibernateLossy).
	// Set it before the first Start.
	Restorable bool

	server *mcp.Server
	// related maps the RequestExtra of every inbound call still in flight to
	// the call's ID. The middleware is server-wide, so the map is too.
	related sync.Map // *mcp.RequestExtra → jsonrpc.ID
}

var _ engine.Engine = (*Engine)(nil)

// New returns an Engine for server. It adds a receiving middleware to
// server (AddReceivingMiddleware), which passes through requests that did
// not come through this Engine, so server may also be served by other
// handlers.
func New(server *mcp.Server) *Engine {
	e := &Engine{server: server}
	server.AddReceivingMiddleware(e.tagRequests)
	return e
}

// Hibernation implements engine.Hibernator: a ServerSession holds
// nothing but what engine.State restores, so restoration is exact when
// the handlers keep nothing per session (Restorable).
func (e *Engine) Hibernation() engine.Hibernation {
	if e.Restorable {
		return engine.HibernateExact
	}
	return engine.HibernateLossy
}

// Server returns the hosted server.
func (e *Engine) Server() *mcp.Server { return e.server }

type relatedKey struct{}

// tagRequests puts the ID of the inbound call that a handler serves into
// its context, where Write finds it.
func (e *Engine) tagRequests(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if extra := req.GetExtra(); extra != nil {
			if id, ok := e.related.Load(extra); ok {
				ctx = context.WithValue(ctx, relatedKey{}, id.(jsonrpc.ID))
			}
		}
		return next(ctx, method, req)
	}
}

// Start implements engine.Engine.
func (e *Engine) Start(ctx context.Context, info engine.Info, out engine.Outbox) (engine.Session, error) {
	c := &conn{
		engine:   e,
		token:    info.Token,
		out:      out,
		in:       make(chan jsonrpc.Message, 16),
		done:     make(chan struct{}),
		calls:    make(map[jsonrpc.ID]call),
		restores: make(map[jsonrpc.ID]chan error),
	}
	var opts *mcp.ServerSessionOptions
	if info.State != nil && len(info.State.InitializeParams) > 0 {
		st, err := sdkState(info.State)
		if err != nil {
			return nil, fmt.Errorf("gosdk: restore session %.8s… gen %d: %w", info.Token, info.Generation, err)
		}
		opts = &mcp.ServerSessionOptions{State: st}
	}
	// The session outlives the request that started it: keep ctx's values
	// (loggers, tracing) but not its cancellation.
	ss, err := e.server.Connect(context.WithoutCancel(ctx), transport{c}, opts)
	if err != nil {
		return nil, fmt.Errorf("gosdk: connect session %.8s… gen %d: %w", info.Token, info.Generation, err)
	}
	s := &session{conn: c, ss: ss}
	if info.State != nil {
		if err := c.replay(ctx, info.State.Restore(sdkRestores(info.State))); err != nil {
			s.Close()
			return nil, fmt.Errorf("gosdk: restore session %.8s… gen %d: %w", info.Token, info.Generation, err)
		}
	}
	return s, nil
}

// sdkRestores returns the part of st that sdkState's session state restores
// by itself: all of it but the subscriptions, which mcp.ServerSessionState
// does not hold. A st without initialize params has nothing to restore.
func sdkRestores(st *engine.State) engine.State {
	part := *st
	part.Initialized = true // sdkState marks every restored session initialized
	part.Subscriptions = nil
	return part
}

// sdkState converts the engine-neutral state to the SDK's.
func sdkState(st *engine.State) (*mcp.ServerSessionState, error) {
	var params mcp.InitializeParams
	if err := json.Unmarshal(st.InitializeParams, &params); err != nil {
		return nil, fmt.Errorf("initialize params: %w", err)
	}
	return &mcp.ServerSessionState{
		InitializeParams: &params,
		// A session whose state was saved was usable; requests of the new
		// generation must not wait for a second notifications/initialized.
		InitializedParams:         &mcp.InitializedParams{},
		NegotiatedProtocolVersion: st.ProtocolVersion,
		LogLevel:                  mcp.LoggingLevel(st.LogLevel),
	}, nil
}

// session is one ServerSession over one conn.
type session struct {
	conn *conn
	ss   *mcp.ServerSession
}

func (s *session) Deliver(ctx context.Context, msg jsonrpc.Message, req engine.Request) error {
	return s.conn.deliver(ctx, msg, req)
}

func (s *session) Close() error {
	// End the connection first: the SDK cancels the handlers in flight only
	// when its reader stops, and ServerSession.Close waits for them, so a
	// handler waiting on its context would otherwise never let Close return.
	s.conn.Close()
	return s.ss.Close()
}

func (s *session) Done() <-chan struct{} { return s.conn.done }

// transport hands the SDK its Connection.
type transport struct{ c *conn }

func (t transport) Connect(context.Context) (mcp.Connection, error) { return t.c, nil }

// conn is the mcp.Connection between the SDK's ServerSession and Tidemark.
type conn struct {
	engine *Engine
	token  string
	out    engine.Outbox
	in     chan jsonrpc.Message

	closeOnce sync.Once
	done      chan struct{}

	mu       sync.Mutex
	calls    map[jsonrpc.ID]call       // inbound calls in flight
	restores map[jsonrpc.ID]chan error // replayed subscriptions awaiting their response
}

// call is an inbound call in flight: the request and the extra it carries.
type call struct {
	req   *jsonrpc.Request
	extra *mcp.RequestExtra
}

// deliver gives msg to the SDK, with a fresh RequestExtra for a request.
// After Close it refuses msg with engine.ErrClosed: the inbound queue may
// still have room, but nothing reads it any more.
func (c *conn) deliver(ctx context.Context, msg jsonrpc.Message, req engine.Request) error {
	select {
	case <-c.done:
		return engine.ErrClosed
	default:
	}
	var undo func() // forgets the call's extra when the message is not handed over
	if r, ok := msg.(*jsonrpc.Request); ok {
		extra := &mcp.RequestExtra{TokenInfo: req.TokenInfo, Header: req.Header}
		if req.CloseStream != nil {
			closeStream := req.CloseStream
			extra.CloseSSEStream = func(args mcp.CloseSSEStreamArgs) { closeStream(args.RetryAfter) }
		}
		r.Extra = extra
		if r.IsCall() {
			c.mu.Lock()
			c.calls[r.ID] = call{req: r, extra: extra}
			c.mu.Unlock()
			c.engine.related.Store(extra, r.ID)
			undo = func() {
				c.mu.Lock()
				delete(c.calls, r.ID)
				c.mu.Unlock()
				c.engine.related.Delete(extra)
			}
		}
	}
	select {
	case c.in <- msg:
		return nil
	case <-c.done:
		if undo != nil {
			undo()
		}
		return engine.ErrClosed
	case <-ctx.Done():
		if undo != nil {
			undo()
		}
		return ctx.Err()
	}
}

// Read implements mcp.Connection.
func (c *conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case msg := <-c.in:
		return msg, nil
	case <-c.done:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write implements mcp.Connection: it tags msg with the request it relates
// to and sends it to the outbox.
func (c *conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	var related jsonrpc.ID
	if resp, ok := msg.(*jsonrpc.Response); ok {
		related = resp.ID
		c.mu.Lock()
		if ch, ok := c.restores[resp.ID]; ok {
			delete(c.restores, resp.ID)
			c.mu.Unlock()
			ch <- resp.Error
			return nil
		}
		if cl, ok := c.calls[resp.ID]; ok {
			delete(c.calls, resp.ID)
			c.engine.related.Delete(cl.extra)
			// The SDK keeps a reference to the request it handled last
			// (go-sdk v1.8.0, jsonrpc2 Connection.handleAsync reslices its
			// queue without clearing the slot) until the session's next
			// request: without this, an idle session would hold its last
			// request's params, up to the body limit, for its lifetime.
			// The handler has returned; nothing reads them again.
			cl.req.Params = nil
		}
		c.mu.Unlock()
	} else if id, ok := ctx.Value(relatedKey{}).(jsonrpc.ID); ok {
		related = id
	}
	return c.out.Send(ctx, msg, related)
}

// Close implements mcp.Connection.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.mu.Lock()
		for id, cl := range c.calls {
			c.engine.related.Delete(cl.extra)
			delete(c.calls, id)
		}
		c.mu.Unlock()
	})
	return nil
}

// SessionID implements mcp.Connection: the SDK's ServerSession.ID is the
// session token.
func (c *conn) SessionID() string { return c.token }

// replay delivers the restore messages msgs (engine.State.Restore) to the
// SDK session in order, waiting for the response to each call before the
// next message. The calls' string IDs are ones no client message reaches
// Write with while Start runs, and their responses are consumed here,
// never sent.
func (c *conn) replay(ctx context.Context, msgs []*jsonrpc.Request) error {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	for _, m := range msgs {
		var answered chan error
		if m.IsCall() {
			answered = make(chan error, 1)
			c.mu.Lock()
			c.restores[m.ID] = answered
			c.mu.Unlock()
		}
		if err := c.deliver(ctx, m, engine.Request{}); err != nil {
			return fmt.Errorf("%s %s: %w", m.Method, m.Params, err)
		}
		if answered == nil {
			continue
		}
		select {
		case err := <-answered:
			if err != nil {
				return fmt.Errorf("%s %s: %w", m.Method, m.Params, err)
			}
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w", m.Method, m.Params, ctx.Err())
		}
	}
	return nil
}
