package bridge

// This file holds the connection to the backend: opened on demand, one at
// a time, restored (server, tool mirror, resource subscriptions) when it
// comes up again, and the backend's notifications it relays.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/fanout"
)

// sessionlessVersion is the first revision without initialize.
const sessionlessVersion = "2026-07-28"

// clientInfo is how the Bridge introduces itself to the backend.
var clientInfo = &mcp.Implementation{Name: "tidemark-gateway", Version: "1.0.0"}

// conn is one connection to the backend.
type conn struct {
	cs *mcp.ClientSession
	// modern says the backend speaks 2026-07-28: requests keep the
	// client's per-request _meta.
	modern bool
	gen    uint64
	// retired says the Bridge closed it for being idle (guarded by b.mu).
	retired bool
}

// backend returns the connection to the backend, connecting when none is
// up. Requests that arrive while a connection attempt is under way wait for
// it (or for ctx). The error is the attempt's, or ErrClosed.
func (b *Bridge) backend(ctx context.Context) (*conn, error) {
	for {
		b.mu.Lock()
		switch {
		case b.closed:
			b.mu.Unlock()
			return nil, ErrClosed
		case b.conn != nil:
			c := b.conn
			b.mu.Unlock()
			return c, nil
		case b.connecting == nil:
			b.connecting = make(chan struct{})
			go b.connect(b.connecting)
		}
		ch := b.connecting
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		b.mu.Lock()
		c, err := b.conn, b.connectErr
		b.mu.Unlock()
		if c == nil && err != nil {
			return nil, err
		}
	}
}

// connect makes one attempt to connect to the backend, and closes done when
// it is over: b.conn is then the new connection, or b.connectErr says why
// there is none.
func (b *Bridge) connect(done chan struct{}) {
	c, err := b.dial()
	b.mu.Lock()
	defer close(done)
	defer b.mu.Unlock()
	b.connecting, b.connectErr = nil, err
	if err != nil {
		return
	}
	if b.closed {
		go c.cs.Close()
		b.connectErr = ErrClosed
		return
	}
	b.conn = c
	// The requests that waited for it may all have gone meanwhile.
	b.armIdleLocked()
	go b.watch(c)
}

// dial connects a client to the backend and restores what the Bridge holds
// of it: the server built from its first InitializeResult, the tool mirror,
// the resource subscriptions of the open streams.
func (b *Bridge) dial() (*conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.ConnectTimeout)
	defer cancel()
	client := mcp.NewClient(clientInfo, b.clientOptions())
	o := newOrder()
	client.AddReceivingMiddleware(o.middleware)
	cs, err := client.Connect(ctx, o.transport(b.opts.Dial()), nil)
	if err != nil {
		return nil, fmt.Errorf("bridge: connect to the backend: %w", err)
	}
	init := cs.InitializeResult()
	b.mu.Lock()
	b.gen++
	c := &conn{cs: cs, modern: init.ProtocolVersion >= sessionlessVersion, gen: b.gen}
	if b.server == nil {
		b.server = b.newServer(init)
	}
	uris := make([]string, 0, len(b.subs))
	for uri := range b.subs {
		uris = append(uris, uri)
	}
	b.mu.Unlock()
	b.logger.Info("connected to the backend for sessionless requests", "connection", c.gen,
		"protocol", init.ProtocolVersion, "server", serverName(init))
	b.syncTools(ctx, c)
	slices.Sort(uris)
	for _, uri := range uris {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			b.logger.Warn("subscribing the backend again failed", "uri", uri, "error", err)
		}
	}
	return c, nil
}

func serverName(init *mcp.InitializeResult) string {
	if init.ServerInfo == nil {
		return ""
	}
	return init.ServerInfo.Name
}

// watch waits for the connection to end, then lets the next request open a
// new one.
func (b *Bridge) watch(c *conn) {
	err := c.cs.Wait()
	b.mu.Lock()
	if b.conn == c {
		b.conn = nil
	}
	quiet := b.closed || c.retired
	b.mu.Unlock()
	if !quiet {
		b.logger.Warn("the backend connection for sessionless requests ended; the next request opens a new one",
			"connection", c.gen, "error", err)
	}
}

// lost returns err as the client gets it (wireError), and when err says
// the connection c is closed, forgets c at once: the next request opens a
// new connection instead of failing on c until watch sees it end.
func (b *Bridge) lost(c *conn, err error) error {
	if errors.Is(err, mcp.ErrConnectionClosed) {
		b.mu.Lock()
		if b.conn == c {
			b.conn = nil
		}
		b.mu.Unlock()
		go c.cs.Close()
	}
	return wireError(err)
}

// newServer returns the *mcp.Server the sessionless requests are served
// by: the backend's identity, instructions and capabilities, the Bridge's
// forwarding middleware and the Bus.
func (b *Bridge) newServer(init *mcp.InitializeResult) *mcp.Server {
	impl := init.ServerInfo
	if impl == nil {
		impl = &mcp.Implementation{Name: "tidemark-gateway", Version: "1.0.0"}
	}
	caps := init.Capabilities
	if caps == nil {
		caps = &mcp.ServerCapabilities{}
	}
	s := mcp.NewServer(impl, &mcp.ServerOptions{
		Instructions:              init.Instructions,
		Capabilities:              caps,
		Logger:                    sdkLogger(b.logger),
		SubscribeHandler:          b.subscribe,
		UnsubscribeHandler:        b.unsubscribe,
		SupportedProtocolVersions: b.opts.ProtocolVersions,
	})
	s.AddReceivingMiddleware(b.forward)
	b.bus.Attach(s)
	s.AddSendingMiddleware(ownListChangesDropped)
	return s
}

// ownListChangesDropped is the outermost sending middleware of the
// Bridge's server. It drops the list-change notifications the go-sdk
// sends of its own accord when the mirror adds or removes a tool: the
// backend's own notification already reaches every listener through the
// Bus, which sends below this middleware. The go-sdk's would reach a
// tools listener a second time, and it also goes to every session it
// counts as pre-2026-07-28, which includes a sessionless request's
// session until its request is handled: a stream filtered to prompts
// alone would hear it (MCP 2026-07-28, basic/patterns/subscriptions).
func ownListChangesDropped(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case fanout.ToolsListChanged, fanout.PromptsListChanged, fanout.ResourcesListChanged:
			return nil, nil
		}
		return next(ctx, method, req)
	}
}

// clientOptions are the options of the client that talks to the backend:
// no capability, no automatic multi round-trip (input-required results go
// back to the client that asked), and the backend's notifications relayed.
func (b *Bridge) clientOptions() *mcp.ClientOptions {
	raise := func(ctx context.Context, n fanout.Notification) {
		if err := b.bus.Raise(ctx, n); err != nil {
			b.logger.Warn("relaying a notification of the backend failed", "method", n.Method, "uri", n.URI, "error", err)
		}
	}
	return &mcp.ClientOptions{
		Logger:         sdkLogger(b.logger),
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ToolListChangedHandler: func(ctx context.Context, req *mcp.ToolListChangedRequest) {
			raise(ctx, fanout.Notification{Method: fanout.ToolsListChanged})
			b.resyncTools(req.Session)
		},
		PromptListChangedHandler: func(ctx context.Context, _ *mcp.PromptListChangedRequest) {
			raise(ctx, fanout.Notification{Method: fanout.PromptsListChanged})
		},
		ResourceListChangedHandler: func(ctx context.Context, _ *mcp.ResourceListChangedRequest) {
			raise(ctx, fanout.Notification{Method: fanout.ResourcesListChanged})
		},
		ResourceUpdatedHandler: func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			raise(ctx, fanout.Notification{Method: fanout.ResourceUpdated, URI: req.Params.URI})
		},
		ProgressNotificationHandler: b.calls.progress,
		LoggingMessageHandler:       b.calls.log,
	}
}

// subscribe is the server's SubscribeHandler: the first stream that names a
// URI subscribes the backend to it.
func (b *Bridge) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	b.mu.Lock()
	b.subs[uri]++
	first := b.subs[uri] == 1
	b.mu.Unlock()
	if !first {
		return nil
	}
	// The backend's subscribe runs to its end even when the listener
	// leaves meanwhile: cut, it may still reach the backend, and with no
	// subscription recorded here no unsubscribe would follow. Once it
	// succeeds the go-sdk calls unsubscribe as the listen handler returns.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.opts.ConnectTimeout)
	defer cancel()
	c, err := b.backend(ctx)
	if err == nil {
		err = c.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
	}
	if err != nil {
		b.release(uri)
		return wireError(err)
	}
	return nil
}

// unsubscribe is the server's UnsubscribeHandler: the last stream that
// named a URI ends the backend's subscription to it. The go-sdk calls it
// as a listen stream's handler returns, with that handler's context,
// which has ended by then (the client went away, or the stream was
// closed): the backend's resources/unsubscribe runs on a context of its
// own, bounded by Options.ConnectTimeout.
func (b *Bridge) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.opts.ConnectTimeout)
	defer cancel()
	if !b.release(req.Params.URI) {
		return nil
	}
	b.mu.Lock()
	c := b.conn
	b.mu.Unlock()
	if c == nil {
		return nil
	}
	if err := c.cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: req.Params.URI}); err != nil {
		b.logger.Warn("unsubscribing the backend failed", "uri", req.Params.URI, "error", err)
	}
	return nil
}

// release counts one stream less for uri and reports whether none is left.
func (b *Bridge) release(uri string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[uri]--
	if b.subs[uri] > 0 {
		return false
	}
	delete(b.subs, uri)
	return true
}
