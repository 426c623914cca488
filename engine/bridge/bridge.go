// Package bridge serves requests of the sessionless protocol revision (MCP
// 2026-07-28) for a gateway: through the go-sdk's own stateless handler
// (transport.Options.Sessionless), over an *mcp.Server whose requests are
// answered by another MCP server that a go-sdk client reaches, such as the
// subprocess of the stdio gateway (EngineTransport over engine/stdio).
//
// The fronted server (the backend) is one connection shared by every
// sessionless request of this process, opened at the first request and
// again after it ended, and closed once no request has been served for
// Options.IdleAfter (behind the stdio gateway it is a subprocess counted
// in the engine's bound, which it then gives back). The go-sdk client probes it with server/discover:
//
//   - A backend that speaks 2026-07-28 gets each request as the client sent
//     it, with the client's per-request _meta (protocol version, client
//     info and capabilities, log level); its input-required results and
//     requestState pass back to the client.
//   - A backend of an earlier revision is initialized once, at the newest
//     revision it accepts, as a client that declares no capability: the
//     requests reach it without the per-request _meta, so it never asks
//     the client anything (no elicitation, sampling or roots), and a
//     request it would answer by asking gets its own error or refusal.
//
// What the bridge answers itself, through the go-sdk: server/discover (the
// backend's server info, instructions and capabilities), the HTTP rules of
// the revision (headers, Mcp-Param-* validation against the backend's tool
// schemas, which the bridge mirrors), and subscriptions/listen: a stream's
// resource subscriptions become subscriptions of the backend (one per URI,
// however many streams name it), and the backend's resources/updated and
// list_changed notifications are raised through a fanout.Bus, so they
// reach the listeners of every replica that shares it.
//
// requestState: with a Sealer, a state the backend puts in an
// input-required result reaches the client sealed (bound to the principal,
// the request and an expiry, valid on any replica that shares the key
// ring), and is opened back to the backend's own state on the retry; a
// tampered, expired or foreign state is refused with the Sealer's error
// and never reaches the backend.
package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/fanout"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// DefaultConnectTimeout is the default bound on connecting to the backend.
const DefaultConnectTimeout = 30 * time.Second

// DefaultIdleAfter is the default of Options.IdleAfter: how long the
// backend connection stays up while no sessionless request is served.
// Keeping it costs, behind the stdio gateway, one subprocess of the
// engine's bound (--max-processes); ending it costs the next request one
// start of the backend, since no client's stream depends on it once its
// requests are over (a listen stream keeps it up while open). A minute
// lets a client's requests in a row share one backend, and gives the
// slot back soon after the last. It is not --hibernate-after (10 minutes
// by default), a session's bound: waking a session loses its streams, a
// cost the shared backend does not have.
const DefaultIdleAfter = time.Minute

// ErrClosed is the error of requests after Close.
var ErrClosed = errors.New("bridge: closed")

// Options configures a Bridge.
type Options struct {
	// Dial returns the transport of a new connection to the backend. The
	// Bridge connects a go-sdk client over it when a request needs the
	// backend and no connection is up. Required.
	Dial func() mcp.Transport
	// Bus carries the backend's list-change and resource-update
	// notifications to the subscriptions/listen streams of every replica
	// sharing it. Default nil: a Bus of this process alone.
	Bus *fanout.Bus
	// Sealer seals the requestState of the backend's input-required
	// results and opens it on the retry. Default nil: states pass through
	// as the backend wrote them.
	Sealer *requeststate.Sealer
	// IdleAfter is how long the backend connection stays up while no
	// sessionless request is being served (an open subscriptions/listen
	// stream is a request being served): then the Bridge closes it, which
	// for EngineTransport ends the subprocess and frees its place in the
	// engine's bound; the next request connects again. Default (zero)
	// DefaultIdleAfter, one minute; negative: never.
	IdleAfter time.Duration
	// ConnectTimeout bounds connecting to the backend, its discovery or
	// initialize included. Default (zero) DefaultConnectTimeout, 30 s.
	ConnectTimeout time.Duration
	// HTTP configures the go-sdk's stateless handler (JSON responses, body
	// limit, DNS-rebinding protection); the Bridge sets Stateless and
	// Logger. Default zero: the go-sdk's defaults.
	HTTP mcp.StreamableHTTPOptions
	// Logger receives the Bridge's lines. Default slog.Default().
	Logger *slog.Logger
	// ProtocolVersions restricts the revisions server/discover lists and
	// the sessionless requests accept (mcp.ServerOptions.
	// SupportedProtocolVersions). Default nil: the go-sdk's every revision.
	ProtocolVersions []string
}

// Bridge is an http.Handler for sessionless requests whose answers come
// from the backend. Create it with New; it is safe for concurrent use.
type Bridge struct {
	opts    Options
	logger  *slog.Logger
	bus     *fanout.Bus
	handler http.Handler // the go-sdk's stateless handler over server

	mu         sync.Mutex
	server     *mcp.Server   // built from the first connection's InitializeResult
	conn       *conn         // the backend connection, nil while none is up
	connecting chan struct{} // closed when the connection attempt under way ends
	connectErr error         // the error of the last attempt
	gen        uint64        // connections made so far
	subs       map[string]int
	tools      map[string]bool // names of the tools mirrored on server
	calls      *calls
	closed     bool
	active     int         // sessionless requests being served
	idle       *time.Timer // ends the connection once idle; nil while none is due
	idleSeq    uint64      // idle ends armed so far
}

// New returns a Bridge for opts. It connects to nothing until the first
// request.
func New(opts Options) *Bridge {
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.IdleAfter == 0 {
		opts.IdleAfter = DefaultIdleAfter
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b := &Bridge{opts: opts, logger: opts.Logger, bus: opts.Bus, subs: make(map[string]int), tools: make(map[string]bool), calls: newCalls()}
	if b.bus == nil {
		b.bus, _ = fanout.New(context.Background(), fanout.Options{Logger: opts.Logger})
	}
	hopts := opts.HTTP
	hopts.Stateless = true
	hopts.Logger = sdkLogger(opts.Logger)
	b.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.server
	}, &hopts)
	return b
}

// ServeHTTP serves one sessionless request. When the backend cannot be
// reached it answers 503 with a JSON-RPC error whose error.data.reason is
// capacity (the engine has no room for its process) or unavailable, and
// Retry-After.
func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.enter()
	defer b.leave()
	if _, err := b.backend(r.Context()); err != nil {
		// The error names processes and addresses of this host: it goes
		// to the log, not to the client.
		reason, message := replay.ReasonUnavailable, "the MCP server behind this gateway cannot be reached now: try again shortly"
		if errors.Is(err, engine.ErrCapacity) {
			reason, message = replay.ReasonCapacity, "the gateway runs as many MCP server processes as it may: try again shortly"
		}
		b.logger.Warn("sessionless request refused: the backend cannot be reached", "reason", reason, "error", err)
		writeRefusal(w, reason, message)
		return
	}
	b.handler.ServeHTTP(w, r)
}

// writeRefusal answers 503 with a JSON-RPC error body (id null, code
// -32000) carrying reason, and Retry-After: 1 (RFC 9110, section 10.2.3).
func writeRefusal(w http.ResponseWriter, reason replay.Reason, message string) {
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32000, "message": message, "data": map[string]any{"reason": reason}},
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(body)
}

// Close ends the backend connection and makes later requests fail. The
// Bus given in Options is not closed.
func (b *Bridge) Close() error {
	b.mu.Lock()
	b.closed = true
	c := b.conn
	b.conn = nil
	b.stopIdleLocked()
	b.mu.Unlock()
	if c != nil {
		c.cs.Close()
	}
	return nil
}

// sdkLogger is the logger the Bridge gives the go-sdk's server and
// handler: its warnings and errors only, not a line per request.
func sdkLogger(l *slog.Logger) *slog.Logger {
	return slog.New(minLevel{l.Handler(), slog.LevelWarn})
}

// minLevel is a slog.Handler that drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}
func (h minLevel) WithGroup(g string) slog.Handler { return minLevel{h.Handler.WithGroup(g), h.min} }
