// options.go holds the Handler's options and their defaults.

package transport

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// InflightCost is what one byte of a POST body costs the process while
// the POST's calls are answered (bytes): the body, and the copy of its
// params that decoding makes (jsonrpc.DecodeMessage) and the engine holds
// until it answers. Options.MaxInflightBytes counts each body once, at
// this cost and ValueCost per JSON value (InflightBytes).
const InflightCost = 2

// ValueCost is what one JSON value of a POST body costs the process once
// an engine decodes it into Go values (bytes): an interface of 16 bytes in
// a []any or a map that grows by doubling. A body of many small values
// costs far more decoded than its size: 2,090,000 zeros in a 4 MB array
// took about 58 MB of RSS each while answered.
const ValueCost = 32

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 4 << 20
	// DefaultMaxInflightBytes is 16 bodies of DefaultMaxBodyBytes, each
	// counted at InflightCost.
	DefaultMaxInflightBytes = 128 << 20
	DefaultBodyTimeout      = 30 * time.Second
	DefaultKeepAlive        = 15 * time.Second
	DefaultWriteTimeout     = 30 * time.Second
	DefaultRetry            = time.Second
	// DefaultMaxListens bounds the open subscriptions/listen streams of a
	// process (Options.MaxListens), sized from what one open stream holds
	// (BenchmarkListenStream; docs/operating.md, "Retention and memory"):
	// that many streams hold about what DefaultMaxInflightBytes lets the
	// bodies of calls in flight hold.
	DefaultMaxListens = 1000
)

const (
	// MinKeepAlive is the least keep-alive interval: a positive
	// Options.KeepAlive below it is taken as it, since a stream writes a
	// comment every half interval and a smaller one floods the client.
	MinKeepAlive = 10 * time.Millisecond
	// MinRetry is the least SSE retry field: the field is written in
	// whole milliseconds, so a positive Options.Retry below it is taken as
	// it rather than written as 0 (reconnect at once).
	MinRetry = time.Millisecond
)

// Options configures a Handler. The zero value serves with the defaults.
type Options struct {
	// JSONResponse answers POSTs that carry requests with one
	// application/json body instead of an SSE stream (MCP 2025-11-25,
	// "Sending Messages to the Server"). Messages related to those requests
	// then go to the standalone GET stream. Default false: SSE.
	JSONResponse bool
	// Retry is the reconnection delay sent as the SSE `retry` field in
	// priming events and when the server closes a stream. Default 1 second;
	// negative: no retry field; a positive value below MinRetry is taken
	// as MinRetry.
	Retry time.Duration
	// KeepAlive is the idle time after which an SSE stream gets a comment
	// line, so proxies and clients keep it open: Tidemark's own streams
	// and the event streams of Sessionless (a quiet subscriptions/listen
	// stream of 2026-07-28). Default 15 seconds;
	// negative: never; a positive value below MinKeepAlive is taken as
	// MinKeepAlive.
	KeepAlive time.Duration
	// WriteTimeout bounds each write of events to a connection, and each
	// write and flush of Sessionless's responses; a client that does not
	// read for this long loses the connection (it resumes, or listens
	// again). Default 30 seconds.
	WriteTimeout time.Duration
	// MaxBodyBytes is the largest POST body accepted, in bytes; larger
	// bodies get 413. Default 4 MiB.
	MaxBodyBytes int64
	// MaxInflightBytes bounds the memory held by POSTs whose calls are
	// being answered, of either era, summed over the process: each body
	// counts InflightBytes (bytes), a stateful POST's until its calls are
	// answered, a 2026-07-28 call's until its handler has answered it (a
	// subscriptions/listen's until its stream ends). A POST of calls that
	// would go over it gets 503 inflight_bytes with Retry-After, and
	// nothing of it is delivered. Default DefaultMaxInflightBytes (128 MiB); negative: no
	// bound.
	MaxInflightBytes int64
	// MaxListens bounds the sessionless era's subscriptions/listen streams
	// open at once in the process (streams). A listen beyond it gets 503
	// capacity with Retry-After before it reaches Sessionless, and the
	// streams open are unharmed; one that ends makes room for the next.
	// No session counts it (MaxSessions and MaxCallsPerSession of package
	// session do not apply to it), so without the bound a client that
	// opens listens is held back by file descriptors alone. Default
	// DefaultMaxListens; negative: no bound.
	MaxListens int
	// BodyTimeout bounds reading a POST body; a client that sends it slower
	// gets 408 body_timeout (a slow body must not hold a connection and a
	// goroutine for ever). Default 30 seconds.
	BodyTimeout time.Duration
	// AllowedOrigins lists Origin values (scheme://host[:port]) accepted
	// besides the request's own host. A request with any other Origin gets
	// 403 (MCP 2025-11-25, "Security Warning": servers MUST validate
	// Origin). "*" accepts every origin.
	AllowedOrigins []string
	// DisableLocalhostProtection turns off the DNS-rebinding check that
	// answers 403 to a request reaching a loopback listener with a Host
	// that is not localhost or a loopback address.
	DisableLocalhostProtection bool
	// Sessionless serves requests of the sessionless era (MCP-Protocol-Version
	// 2026-07-28, or a POST without the header whose params carry
	// _meta["io.modelcontextprotocol/protocolVersion"]). Nil: such requests
	// get 400 protocol_version. A later version is refused either way: the
	// handler routes only the revisions it serves.
	Sessionless http.Handler
	// SessionlessOnly serves the sessionless era alone: a request of the
	// stateful era (initialize, a session's requests, GET, DELETE, a POST
	// with MCP-Protocol-Version 2025-11-25 or earlier, or none) gets 400
	// protocol_version with the JSON-RPC error -32022 naming 2026-07-28 as
	// the one version served (refuseStateful). The server behind
	// Sessionless should list 2026-07-28 alone in server/discover
	// (mcp.ServerOptions.SupportedProtocolVersions).
	SessionlessOnly bool
	// Logger receives structured lines with session token prefix,
	// generation, stream and reason. Default slog.Default().
	Logger *slog.Logger
	// Directory locates the replica that owns a session held by another
	// replica of a fleet (fleet.ErrRemote), so that requests for it are
	// forwarded there (fleet.Router); the forwarded request carries
	// fleet.ForwardedByHeader with this replica's ID, the registry's Owner.
	// Default nil: single-process mode; should the registry still report a
	// remote owner, the request waits for that owner's lease to lapse and
	// is then served here.
	Directory fleet.Directory
	// Advertised is the URL at which this replica announces itself in
	// Directory. A session whose owner Directory places at the same URL is
	// held by an earlier process at this address, which cannot be running
	// while this one listens there: its requests wait for that lease to
	// lapse rather than being forwarded here again (fleet.RouterOptions.Self).
	// Empty: every owner's URL is forwarded to.
	Advertised string
	// Metrics records refusals, resumes, streams, replays and
	// notifications (package metrics). Default: metrics.Discard.
	Metrics metrics.Transport
	// Auth, when set, makes the Handler an OAuth 2.1 resource server: each
	// request needs a bearer token Auth.Verify accepts (authorize.go).
	// Default nil: no authorization (a middleware in front may still put
	// a go-sdk auth.TokenInfo in the request's context).
	Auth *Auth
	// Tracer starts a span per resume and per notification, and gives
	// requests the trace context of their HTTP headers (package tracing).
	// Default nil: no spans.
	Tracer *tracing.Tracer
}

// withDefaults returns opts with every zero field set to its default.
func (opts Options) withDefaults() Options {
	if opts.Retry == 0 {
		opts.Retry = DefaultRetry
	}
	if opts.Retry > 0 {
		opts.Retry = max(opts.Retry, MinRetry)
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	if opts.KeepAlive > 0 {
		opts.KeepAlive = max(opts.KeepAlive, MinKeepAlive)
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxInflightBytes == 0 {
		opts.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if opts.MaxListens == 0 {
		opts.MaxListens = DefaultMaxListens
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.Discard
	}
	return opts
}
