package bridge

// This file holds EngineTransport: an mcp.Transport whose connections are
// sessions of an engine (engine/stdio: one subprocess each), outside any
// session of Tidemark's registry.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine"
)

// engineTransport is the mcp.Transport EngineTransport returns.
type engineTransport struct {
	eng    engine.Engine
	name   string
	logger *slog.Logger
	gen    *atomic.Uint64
}

// EngineTransport returns an mcp.Transport whose Connect starts a fresh
// session of eng (for engine/stdio, a new subprocess, counted in its
// MaxProcesses) named name in the engine's logs, and whose connection
// carries that session's messages. Every Transport of one name numbers its
// sessions as generations 1, 2, … so log lines tell them apart. Closing the
// connection ends the engine session; an engine session that ends on its
// own ends the connection (Read returns io.EOF).
func EngineTransport(eng engine.Engine, name string, logger *slog.Logger) func() mcp.Transport {
	if logger == nil {
		logger = slog.Default()
	}
	gen := new(atomic.Uint64)
	return func() mcp.Transport {
		return &engineTransport{eng: eng, name: name, logger: logger, gen: gen}
	}
}

// Connect starts the engine session.
func (t *engineTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	g := t.gen.Add(1)
	c := &engineConn{ready: make(chan struct{}, 1), closed: make(chan struct{})}
	s, err := t.eng.Start(ctx, engine.Info{
		Token: t.name, Generation: g, Logger: t.logger.With("session", t.name, "generation", g),
	}, c)
	if err != nil {
		return nil, fmt.Errorf("bridge: start %s generation %d: %w", t.name, g, err)
	}
	c.s = s
	return c, nil
}

// engineConn is one engine session as an mcp.Connection. It is also the
// session's engine.Outbox: the engine's messages queue until Read takes
// them, so the engine never waits for the client.
type engineConn struct {
	s engine.Session

	mu     sync.Mutex
	queue  []jsonrpc.Message
	ready  chan struct{} // holds a token while queue may be non-empty
	closed chan struct{} // closed by Close
	once   sync.Once
}

// Send implements engine.Outbox: it queues msg for Read.
func (c *engineConn) Send(_ context.Context, msg jsonrpc.Message, _ jsonrpc.ID) error {
	select {
	case <-c.closed:
		return engine.ErrSessionEnded
	default:
	}
	c.mu.Lock()
	c.queue = append(c.queue, msg)
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
	return nil
}

// Read returns the engine's next message; io.EOF once the session ended and
// every message it sent was read, or after Close.
func (c *engineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			msg := c.queue[0]
			c.queue[0] = nil
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return msg, nil
		}
		c.mu.Unlock()
		select {
		case <-c.ready:
		case <-c.s.Done():
			c.mu.Lock()
			empty := len(c.queue) == 0
			c.mu.Unlock()
			if empty {
				return nil, io.EOF
			}
		case <-c.closed:
			return nil, io.EOF
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Write delivers msg to the engine session.
func (c *engineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	return c.s.Deliver(ctx, msg, engine.Request{})
}

// Close ends the engine session.
func (c *engineConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.s.Close()
}

// SessionID implements mcp.Connection: engine sessions behind a bridge have
// no MCP session ID.
func (c *engineConn) SessionID() string { return "" }
