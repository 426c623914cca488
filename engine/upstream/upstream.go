// Package upstream is Tidemark's gateway engine for MCP servers that speak
// Streamable HTTP (MCP 2025-11-25, basic/transports): `tidemark serve
// --upstream URL` puts any such server behind Tidemark's sessions,
// generations, cursors and event log, whatever the server itself supports.
//
// Tidemark is the server its clients see and a client of the upstream. Each
// session generation holds one upstream session (DESIGN.md, "Engines"):
// the client's initialize opens it, and every message the upstream sends is
// handed to the engine.Outbox, which appends it to the session's event log
// before any client sees it, so every stream can be resumed from Tidemark.
//
// Messages are related to client calls by the HTTP stream that carries
// them: everything on the upstream's answer to a POST belongs to the call
// that POST carried, everything on the upstream's standalone GET stream to
// no call. Requests the upstream sends the client get IDs unique within
// the Tidemark session (a new upstream session numbers its requests from
// the start again); the client's answers go back under the upstream's IDs.
//
// The upstream's faults each get one answer:
//   - its session answers 404 (it restarted, or ended the session): the
//     generation ends, the calls in flight fail with a JSON-RPC error whose
//     error.data.reason is upstream_session_lost, and the session's next
//     request opens a new upstream session at generation+1, restored from
//     the session's engine.State (engine.State.Restore); the client's old
//     cursors answer 409;
//   - a call's answer stream is cut: resumed upstream with the upstream's
//     own Last-Event-ID when its events carry IDs (package resume), tried
//     again while the upstream cannot be reached or answers a transient
//     status (503, 429, another 5xx, or a 409 without a reason, as the
//     go-sdk answers while it still counts the cut connection as the
//     stream's reader); when the upstream refuses the resume otherwise,
//     or on every try until Options.ResumeTimeout, the call fails
//     (upstream_stream_cut; upstream_unreachable when no try reached it).
//     A stream whose events carry no IDs fails its call
//     (upstream_stream_cut) after a ping has told whether the upstream
//     session survived (404: upstream_session_lost as above). All of it
//     is bounded by Options.ResumeTimeout;
//   - it cannot be reached: the message is not handed over and the
//     transport answers 503 upstream_unreachable with Retry-After
//     (engine.ErrUnreachable);
//   - it takes the client's initialize and does not answer it within
//     Options.Timeout: the initialize fails (upstream_unreachable), its
//     upstream request ends, and the session does not begin;
//   - it gives no session ID (a stateless server), or answers a POST with
//     one application/json body instead of an SSE stream: served as such.
//
// A session may hibernate (DESIGN.md, "Hibernation"), lossily: its
// generation gives up everything it holds in the process, its standalone
// GET stream included, but keeps its upstream session (no DELETE), whose
// ID and protocol version go into the record's State. The wake, on any
// replica, starts generation+1, which pings the kept upstream session and
// reattaches to it without a new initialize; when the upstream answers 404
// it restores the State into a new upstream session, as after a lost one.
//
// Requests of the sessionless era (MCP-Protocol-Version 2026-07-28) do
// not reach the engine: Engine.Sessionless passes them to the
// upstream as they are.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/redact"
)

// Defaults of Options.
const (
	// DefaultConnectTimeout is the default of Options.ConnectTimeout.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultTimeout is the default of Options.Timeout.
	DefaultTimeout = 30 * time.Second
	// DefaultResumeTimeout is the default of Options.ResumeTimeout.
	DefaultResumeTimeout = 10 * time.Second
)

// idleConnTimeout is how long an idle connection to the upstream is kept
// for reuse: below the 5 s after which Node.js servers close idle
// connections (http.Server.keepAliveTimeout), so that a call is not sent on
// a connection the upstream is closing at that moment (its POST cannot be
// retried: it is not idempotent).
const idleConnTimeout = 4 * time.Second

// maxMessageBytes bounds one message (an SSE event, or a JSON body) the
// upstream sends, in bytes; a larger one ends the stream that carries it.
const maxMessageBytes = 16 << 20

// ErrClosed is wrapped by Start's error after Engine.Close.
var ErrClosed = errors.New("upstream: engine closed")

// Options configures an Engine.
type Options struct {
	// URL is the upstream's MCP endpoint, http or https, e.g.
	// "http://127.0.0.1:3001/mcp". Required.
	URL string
	// Header is added to every request to the upstream (tidemark serve
	// --upstream-header), e.g. an Authorization of the gateway's own; a
	// name also in Forward takes this value instead of the client's. It
	// may not name a header the gateway sets itself (see New). Default:
	// none.
	Header http.Header
	// Forward names the request headers copied from each client request to
	// the upstream requests made for it (tidemark serve
	// --upstream-forward-header), e.g. Authorization. Requests the gateway
	// makes on its own (the standalone GET stream, pings, the restore of a
	// re-created session, DELETE) carry those of the session's latest
	// client request. When Forward is not empty, a re-created session is
	// restored when its first client message arrives, with that message's
	// headers; otherwise at once. Default: none.
	Forward []string
	// TokenSource, when set, gives the gateway an access token of its own
	// for the upstream (tidemark serve --upstream-oauth-token-url): every
	// request to the upstream carries Authorization: Bearer TOKEN of it
	// (RFC 6750, section 2.1), and never a client's token. A request whose
	// token cannot be obtained fails as if the upstream could not be
	// reached (engine.ErrUnreachable: 503 upstream_unreachable). Header and
	// Forward may not name Authorization then. Default: none.
	TokenSource oauth2.TokenSource
	// ConnectTimeout bounds connecting to the upstream (TCP and TLS). A
	// message for which no connection could be made by then is not handed
	// over: Deliver fails with engine.ErrUnreachable (503 with
	// Retry-After). Default DefaultConnectTimeout, 5 seconds.
	ConnectTimeout time.Duration
	// Timeout bounds writing a message to the upstream on a connection
	// made (a call not written by then is not handed over, as above), and
	// each upstream exchange but the answer to a client's request other
	// than initialize: the client's initialize from its POST until its
	// answer (then it fails with replay.ReasonUpstreamUnreachable, and
	// the session does not begin), a notification or a client's response
	// until the upstream accepts it (202), the answers to the restore's
	// requests and to pings, DELETE. The answer to any other request
	// lasts as long as its tool does. Default DefaultTimeout, 30 seconds.
	Timeout time.Duration
	// ResumeTimeout bounds how long a call whose upstream answer stream
	// was cut is resumed upstream (or, without event IDs, how long the
	// upstream session is checked with ping) before the call fails.
	// Default DefaultResumeTimeout, 10 seconds.
	ResumeTimeout time.Duration
	// Logger receives engine-wide lines; session lines go to the logger of
	// engine.Info. Default slog.Default().
	Logger *slog.Logger
}

// reservedHeaders are the request headers the gateway sets itself, which
// Options.Header and Options.Forward may not name.
var reservedHeaders = []string{
	"Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id", "Content-Type", "Accept",
	"Content-Length", "Content-Encoding", "Transfer-Encoding", "Host", "Connection",
}

// Engine fronts one upstream Streamable HTTP server; each session
// generation is one upstream session. Create it with New; it is safe for
// concurrent use.
type Engine struct {
	opts    Options
	url     string
	http    *http.Client
	streams *http.Client    // of the standalone GET streams: dedicated, under the token's Transport
	base    *http.Transport // under http's Transport, which may add the token
	forward []string        // canonical header names

	mu       sync.Mutex
	sessions map[*conn]struct{} // generations whose live state runs
	closed   bool
	deleting sync.WaitGroup // DELETEs of closed upstream sessions
}

var _ engine.Engine = (*Engine)(nil)

// New returns an Engine for opts. It fails when URL is not an absolute
// http or https URL, or when Header or Forward name a header the gateway
// sets itself (Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID,
// Content-Type, Accept, Content-Length, Content-Encoding,
// Transfer-Encoding, Host, Connection).
func New(opts Options) (*Engine, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream: URL %q: want an absolute http:// or https:// URL of an MCP endpoint", opts.URL)
	}
	forward := make([]string, 0, len(opts.Forward))
	for _, name := range opts.Forward {
		forward = append(forward, http.CanonicalHeaderKey(name))
	}
	names := append([]string(nil), forward...)
	for name := range opts.Header {
		names = append(names, http.CanonicalHeaderKey(name))
	}
	for _, name := range names {
		if name == "Authorization" && opts.TokenSource != nil {
			return nil, errors.New("upstream: header Authorization carries the gateway's own token (TokenSource) and cannot be forwarded or added too")
		}
		for _, r := range reservedHeaders {
			if name == r {
				return nil, fmt.Errorf("upstream: header %s is set by the gateway itself and cannot be forwarded or added", name)
			}
		}
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ResumeTimeout <= 0 {
		opts.ResumeTimeout = DefaultResumeTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dialer := &net.Dialer{Timeout: opts.ConnectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: opts.ConnectTimeout,
		// Each call in flight holds a connection for its answer stream;
		// keep enough idle ones that busy sessions do not dial per call.
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     idleConnTimeout,
	}
	var rt, streams http.RoundTripper = tr, &dedicated{dial: dialer.DialContext, proxy: tr.Proxy, fallback: tr}
	if opts.TokenSource != nil {
		rt = &oauth2.Transport{Source: opts.TokenSource, Base: tr}
		streams = &oauth2.Transport{Source: opts.TokenSource, Base: streams}
	}
	return &Engine{
		opts: opts, url: u.String(), forward: forward, base: tr,
		// No overall timeout: a call's answer lasts as long as its tool.
		http:     &http.Client{Transport: rt},
		streams:  &http.Client{Transport: streams},
		sessions: make(map[*conn]struct{}),
	}, nil
}

// Running returns the number of generations whose live state runs: each
// holds its goroutines, its standalone GET stream and its calls' HTTP
// requests. A hibernated session's generation is not among them.
func (e *Engine) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.sessions)
}

// URL returns the upstream endpoint.
func (e *Engine) URL() string { return e.url }

// Start implements engine.Engine: it begins generation info.Generation of
// session info.Token. A fresh session (info.State nil) opens its upstream
// session when the client's initialize is delivered. A re-created one opens
// a new upstream session and restores the state into it with the messages
// of info.State.Restore, or, woken from hibernation, reattaches to the
// upstream session its State kept (info.State.Suspended): at once in the
// background, or, when Options.Forward is set, with the headers of the
// first client message; Deliver waits for the restore. Start fails only after Close (ErrClosed).
func (e *Engine) Start(ctx context.Context, info engine.Info, out engine.Outbox) (engine.Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, fmt.Errorf("upstream: start session %s gen %d: %w", redact.Token(info.Token), info.Generation, ErrClosed)
	}
	c := newConn(e, info, out)
	e.sessions[c] = struct{}{}
	if info.State != nil && len(e.forward) == 0 {
		c.restoreInBackground()
	}
	return c, nil
}

// release forgets a generation whose live state has ended.
func (e *Engine) release(c *conn) {
	e.mu.Lock()
	delete(e.sessions, c)
	e.mu.Unlock()
}

// Close ends every generation's live state, as Session.Close does, waits
// (at most Options.Timeout) for the DELETEs of their upstream sessions
// and of those Release has started, and makes later Starts fail. Call it
// on shutdown, after the handler's Close, whose release of hibernated
// sessions on the memory store (session.Options.ReleaseOnClose) starts
// DELETEs; called again, it waits for those started since.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	all := make([]*conn, 0, len(e.sessions))
	for c := range e.sessions {
		all = append(all, c)
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Go(func() { c.Close() })
	}
	wg.Wait()
	e.deleting.Wait()
	e.base.CloseIdleConnections()
	return nil
}
