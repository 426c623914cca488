// Package transport is Tidemark's http.Handler for MCP Streamable HTTP
// (MCP 2025-11-25, basic/transports; also 2025-03-26 and 2025-06-18): POST
// of JSON-RPC messages answered as SSE or JSON, the standalone GET stream,
// resumption with Last-Event-ID decided by package replay, DELETE, and the
// HTTP-level rules (protocol version, Origin, Host, media types, body
// limit). Requests of the sessionless era (MCP-Protocol-Version 2026-07-28)
// go to Options.Sessionless.
//
// A request walks forward through the package once, each file holding
// one stage: ServeHTTP (this file) runs the checks every request shares
// (security.go, body.go), reads the MCP headers once (header.go) and hands
// the request to the one function of its kind (servePOST in post.go,
// serveGET in get.go, serveResume in resume.go, serveDELETE in delete.go,
// serveSessionless in sessionless.go). Each runs its checks in the order
// its doc comment lists, finds its session (lookup.go: here, or at the
// replica that owns it, through package fleet) and serves it (answer.go;
// stream.go, attach.go and sse.go for an SSE stream), or returns a
// refusal, a status with a JSON-RPC error body whose reason comes from the
// catalogue in replay/reason.go, which ServeHTTP alone writes
// (refusal.go).
package transport

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/internal/warngate"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// Handler serves MCP Streamable HTTP over a session.Registry.
type Handler struct {
	reg    *session.Registry
	opts   Options
	logger *slog.Logger
	warns  *warngate.Gate[replay.Reason] // how often 5xx refusals are logged
	// versions are the protocol versions served, newest first
	// (servedVersions).
	versions []string
	conns    *connections

	inflight atomic.Int64 // request bytes held by POSTs of calls being answered, of either era (holdInflight)
	// sessionless counts the POSTs of the sessionless era being served,
	// which no session holds: Drain waits for them too.
	sessionless atomic.Int64
	// listens are the sessionless era's listen streams being served,
	// which Drain and Shutdown end.
	listens listens

	router *fleet.Router // where a session's requests are served (fleet mode)

	drainOnce sync.Once
	draining  chan struct{} // closed by Drain

	shutdownOnce sync.Once
	shutdown     chan struct{}   // closed by Shutdown
	shutdownCtx  context.Context // cancelled by Shutdown
	stopAll      context.CancelFunc
}

// New returns a Handler serving the sessions of reg.
func New(reg *session.Registry, opts Options) *Handler {
	opts = opts.withDefaults()
	h := &Handler{
		reg: reg, opts: opts, logger: opts.Logger, warns: warngate.New[replay.Reason](refusalWarnInterval, time.Now),
		conns: newConnections(), versions: servedVersions(&opts),
		router: fleet.NewRouter(reg.Leases(), fleet.RouterOptions{
			Directory: opts.Directory, Self: opts.Advertised, KeepAlive: opts.KeepAlive, JSONResponse: opts.JSONResponse, Logger: opts.Logger,
			Answering: reg.Answering,
			Records: func(ctx context.Context, token string) (store.Record, error) {
				_, rec, err := reg.Status(ctx, token)
				return rec, err
			},
		}),
		shutdown: make(chan struct{}),
		draining: make(chan struct{}),
	}
	h.shutdownCtx, h.stopAll = context.WithCancel(context.Background())
	return h
}

// ServeHTTP implements http.Handler: it routes the request and writes the
// refusal it earns, if any. This is the one place a refusal is written and
// counted (Options.Metrics); one for a client that went away (gone) is
// neither.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	closeUntilBodyRead(w, r)
	if ref := h.route(w, r); ref != nil && !ref.gone {
		h.opts.Metrics.Refused(ref.reason)
		ref.write(w, h.logger, h.warns)
	}
}

// route runs the checks every request shares, in this order, and hands the
// request to the function of its kind, returning that function's refusal:
//  1. a Via that names this process (508 loop_detected; security.go), then
//     Host, then Origin (403 host_forbidden, origin_forbidden);
//  2. with Options.Auth, the bearer token (authorize.go: 401 token_missing,
//     token_invalid, 403 insufficient_scope, 503 unavailable), in both
//     eras;
//  3. a POST's Content-Length over MaxBodyBytes (413 body_too_large), before
//     anything reads the body;
//  4. the era: a sessionless request goes to serveSessionless
//     (sessionless.go), whatever its other headers say;
//  5. with Options.SessionlessOnly, any request of the stateful era (400
//     protocol_version, JSON-RPC -32022: refuseStateful); else
//     MCP-Protocol-Version: repeated, or a version not served (400
//     protocol_version; a version of neither era is refused here, and
//     never reaches the sessionless handler);
//  6. shutdown (503 unavailable);
//  7. the method: POST, GET with Last-Event-ID (a resume), GET, DELETE;
//     any other answers 405 method_not_allowed.
//
// The MCP headers are read once, before step 4 (readHeaders), and the kind
// applies the refusals of their rules in its own order.
func (h *Handler) route(w http.ResponseWriter, r *http.Request) *refusal {
	if ref := checkLoop(r); ref != nil {
		h.discardBody(w, r)
		return ref
	}
	if ref := checkOriginAndHost(r, &h.opts); ref != nil {
		return ref
	}
	if a := h.opts.Auth; a != nil {
		var ref *refusal
		if r, ref = h.authorize(r, a); ref != nil {
			return ref
		}
	}
	if r.Method == http.MethodPost {
		if ref := h.bodyTooLarge(r); ref != nil {
			return ref
		}
		bodyWithTimeout(w, r, h.opts.BodyTimeout)
	}
	hdr := readHeaders(r, h.versions)
	if h.isSessionless(r, hdr) {
		return h.serveSessionless(w, r, hdr)
	}
	if h.opts.SessionlessOnly {
		return h.refuseStateful(r, hdr)
	}
	if hdr.versionRef != nil {
		return h.withRequestID(r, hdr.versionRef)
	}
	if h.shuttingDown() {
		return refuse(replay.ReasonUnavailable, "server is shutting down; retry against another replica or later")
	}
	switch r.Method {
	case http.MethodPost:
		return h.servePOST(w, r, hdr)
	case http.MethodGet:
		if hdr.resuming {
			return h.serveResume(w, r, hdr)
		}
		return h.serveGET(w, r, hdr)
	case http.MethodDelete:
		return h.serveDELETE(w, r, hdr)
	}
	ref := refuse(replay.ReasonMethodNotAllowed, "method "+r.Method+" is not allowed; use GET, POST or DELETE")
	ref.allow = allowStateful
	return ref
}

// PathNotFound returns a handler for every path of a server but its MCP
// endpoint: 404 with a JSON-RPC error body (reason path_not_found, code
// -32600) that names the endpoint, so a client with a wrong URL learns
// where to go instead of getting net/http's plain-text 404.
func PathNotFound(endpoint string, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	return pathNotFound(endpoint, logger, metrics.Discard)
}

// PathNotFound returns the handler the function PathNotFound returns, that
// logs on h's logger and counts its refusals on h's Options.Metrics, as
// ServeHTTP does.
func (h *Handler) PathNotFound(endpoint string) http.Handler {
	return pathNotFound(endpoint, h.logger, h.opts.Metrics)
}

func pathNotFound(endpoint string, logger *slog.Logger, rec metrics.Transport) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		closeUntilBodyRead(w, r) // the body is never read here
		rec.Refused(replay.ReasonPathNotFound)
		refuse(replay.ReasonPathNotFound, "no MCP endpoint at "+quote(r.URL.Path)+": the endpoint is "+endpoint).write(w, logger, nil)
	})
}

// drainPoll is how often Drain looks for calls still in flight.
const drainPoll = 20 * time.Millisecond

// Drain prepares a graceful shutdown: from now on a POST carrying calls
// (requests with an id), of either era, is refused 503 unavailable with
// Retry-After (drainRefusal), while notifications, the client's responses
// (an elicitation answer a call is waiting for) and GET streams are still
// served; Drain then waits until no
// call is in flight on any session this process holds, so the calls
// running finish and their answers reach their streams, and until no POST
// of the sessionless era is being served, so that its calls answer too.
// The sessionless era's subscriptions/listen streams are no calls: Drain
// ends them at once (their handlers answer and return, their responses
// end), and their clients listen again elsewhere or after the restart.
// It logs one line, "draining" with the number of calls, once new calls
// are refused. It returns nil when no call is left, or ctx's error when
// ctx ends first. Call Shutdown after it.
func (h *Handler) Drain(ctx context.Context) error {
	inFlight := func() int { return h.reg.CallsInFlight() + int(h.sessionless.Load()) }
	h.drainOnce.Do(func() {
		close(h.draining)
		h.listens.endAll()
		// Logged once new calls are refused: a line a supervisor (or a
		// test) can wait for.
		if n := inFlight(); n > 0 {
			h.logger.Info("draining", "reason", replay.ReasonShutdown, "calls", n)
		}
	})
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		n := inFlight()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			h.logger.Warn("drain incomplete: calls still in flight", "reason", replay.ReasonShutdown, "calls", n)
			return fmt.Errorf("transport: drain: %d calls still in flight: %w", n, ctx.Err())
		case <-t.C:
		}
	}
}

func (h *Handler) isDraining() bool { return isClosed(h.draining) }

// drainRefusal returns the refusal of new calls while the server drains
// (Drain), in either era: 503 unavailable, with Retry-After (refusal.go),
// before any of them reaches a session, a task or a tool. calls are the
// requests with an id a POST carries; nil when it carries none (a
// notification or a client's response is still served) or the server is
// not draining.
func (h *Handler) drainRefusal(calls []*jsonrpc.Request) *refusal {
	if len(calls) == 0 || !h.isDraining() {
		return nil
	}
	return refuse(replay.ReasonUnavailable,
		"the server is shutting down and takes no new calls: send the request again (after the restart, or to another replica)")
}

// Shutdown makes every open SSE stream send a final retry field and close,
// so clients reconnect (to this process after a restart, or to another
// replica). Call it before http.Server.Shutdown, which waits for handlers
// to return. New streams are refused with 503 afterwards.
func (h *Handler) Shutdown(ctx context.Context) {
	h.shutdownOnce.Do(func() {
		close(h.shutdown)
		h.stopAll()
		h.listens.endAll()
	})
	h.router.Shutdown(ctx)
	h.conns.wait(ctx)
}

func (h *Handler) shuttingDown() bool { return isClosed(h.shutdown) }

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
