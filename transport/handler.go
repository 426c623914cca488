// Package transport is Tidemark's http.Handler for MCP Streamable HTTP
// (MCP 2025-11-25, basic/transports; also 2025-03-26 and 2025-06-18): POST
// of JSON-RPC messages answered as SSE or JSON, the standalone GET stream,
// resumption with Last-Event-ID decided by package replay, DELETE, and the
// HTTP-level rules (protocol version, Origin, Host, media types, body
// limit). Every refusal is a precise status with a JSON-RPC error body that
// carries a stable reason (errors.go). Requests of the sessionless era
// (MCP-Protocol-Version 2026-07-28 or later) go to Options.Sessionless.
package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/session"
)

// Protocol versions of the stateful era that the handler serves, and the
// first version of the sessionless era.
const (
	V20241105    = "2024-11-05" // negotiated by the go-sdk when a client asks for it; served as 2025-03-26
	V20250326    = "2025-03-26"
	V20250618    = "2025-06-18"
	V20251125    = "2025-11-25"
	VSessionless = "2026-07-28"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 4 << 20
	DefaultBodyTimeout  = 30 * time.Second
	DefaultKeepAlive    = 15 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	DefaultRetry        = time.Second
	// MaxSessionIDLen is the longest Mcp-Session-Id accepted, in bytes;
	// Tidemark's own tokens are 26 bytes.
	MaxSessionIDLen = 128
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
	// negative: no retry field.
	Retry time.Duration
	// KeepAlive is the idle time after which an SSE stream gets a comment
	// line, so proxies and clients keep it open. Default 15 seconds;
	// negative: never.
	KeepAlive time.Duration
	// WriteTimeout bounds each write of events to a connection; a client
	// that does not read for this long loses the connection (it resumes).
	// Default 30 seconds.
	WriteTimeout time.Duration
	// MaxBodyBytes is the largest POST body accepted, in bytes; larger
	// bodies get 413. Default 4 MiB.
	MaxBodyBytes int64
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
	// 2026-07-28 or later, or a POST whose params carry
	// _meta["io.modelcontextprotocol/protocolVersion"]). Nil: such requests
	// get 400 protocol_version.
	Sessionless http.Handler
	// Logger receives structured lines with session token prefix,
	// generation, stream and reason. Default slog.Default().
	Logger *slog.Logger
	// Directory locates the replica that owns a session held by another
	// replica of a fleet (session.ErrRemote), so that requests for it are
	// forwarded there (forward.go); the forwarded request carries
	// ForwardedByHeader with this replica's ID, the registry's Owner.
	// Default nil: single-process mode; should the registry still report a
	// remote owner, the request waits for that owner's lease to lapse and
	// is then served here.
	Directory Directory
}

// Handler serves MCP Streamable HTTP over a session.Registry.
type Handler struct {
	reg    *session.Registry
	opts   Options
	logger *slog.Logger
	conns  *connections

	fwd *http.Transport // forwarded requests (fleet mode)

	drainOnce sync.Once
	draining  chan struct{} // closed by Drain

	shutdownOnce sync.Once
	shutdown     chan struct{}   // closed by Shutdown
	shutdownCtx  context.Context // cancelled by Shutdown
	stopAll      context.CancelFunc
}

// New returns a Handler serving the sessions of reg.
func New(reg *session.Registry, opts Options) *Handler {
	if opts.Retry == 0 {
		opts.Retry = DefaultRetry
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = DefaultKeepAlive
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
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Handler{
		reg: reg, opts: opts, logger: opts.Logger,
		conns:    newConnections(),
		fwd:      newForwardTransport(opts.JSONResponse),
		shutdown: make(chan struct{}),
		draining: make(chan struct{}),
	}
	h.shutdownCtx, h.stopAll = context.WithCancel(context.Background())
	return h
}

// drainPoll is how often Drain looks for calls still in flight.
const drainPoll = 20 * time.Millisecond

// Drain prepares a graceful shutdown: from now on a POST carrying calls
// (requests with an id) is refused 503 unavailable with Retry-After, while
// notifications, the client's responses (an elicitation answer a call is
// waiting for) and GET streams are still served; Drain then waits until no
// call is in flight on any session this process holds, so the calls
// running finish and their answers reach their streams. It logs one line,
// "draining" with the number of calls, once new calls are refused. It
// returns nil when no call is left, or ctx's error when ctx ends first.
// Call Shutdown after it.
func (h *Handler) Drain(ctx context.Context) error {
	h.drainOnce.Do(func() {
		close(h.draining)
		// Logged once new calls are refused: a line a supervisor (or a
		// test) can wait for.
		if n := h.reg.CallsInFlight(); n > 0 {
			h.logger.Info("draining", "reason", "shutdown", "calls", n)
		}
	})
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		n := h.reg.CallsInFlight()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			h.logger.Warn("drain incomplete: calls still in flight", "reason", "shutdown", "calls", n)
			return fmt.Errorf("transport: drain: %d calls still in flight: %w", n, ctx.Err())
		case <-t.C:
		}
	}
}

func (h *Handler) isDraining() bool {
	select {
	case <-h.draining:
		return true
	default:
		return false
	}
}

// Shutdown makes every open SSE stream send a final retry field and close,
// so clients reconnect (to this process after a restart, or to another
// replica). Call it before http.Server.Shutdown, which waits for handlers
// to return. New streams are refused with 503 afterwards.
func (h *Handler) Shutdown(ctx context.Context) {
	h.shutdownOnce.Do(func() {
		close(h.shutdown)
		h.stopAll()
	})
	h.conns.wait(ctx)
	h.fwd.CloseIdleConnections()
}

func (h *Handler) shuttingDown() bool {
	select {
	case <-h.shutdown:
		return true
	default:
		return false
	}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	closeUntilBodyRead(w, r)
	if herr := h.checkOriginAndHost(r); herr != nil {
		herr.write(w, h.logger)
		return
	}
	if r.Method == http.MethodPost {
		if r.ContentLength > h.opts.MaxBodyBytes {
			// Refused from the headers, before anything reads the body
			// (initialize's era check would wait for it; regression:
			// TestContentLengthOverLimitRefusedAtOnce).
			refuse(http.StatusRequestEntityTooLarge, ReasonBodyTooLarge,
				fmt.Sprintf("request body of %d bytes (Content-Length) exceeds %d bytes", r.ContentLength, h.opts.MaxBodyBytes)).write(w, h.logger)
			return
		}
		bodyWithTimeout(w, r, h.opts.BodyTimeout)
	}
	version, herr := protocolVersion(r)
	// A POST that carries the sessionless era's per-request version belongs
	// to that era whatever its header says; its handler judges the version.
	sessionless := version >= VSessionless ||
		((version == "" || herr != nil) && r.Method == http.MethodPost && h.sessionlessBody(r))
	if herr != nil && !sessionless {
		herr.write(w, h.logger)
		return
	}
	if sessionless {
		if h.opts.Sessionless == nil {
			refuse(http.StatusBadRequest, ReasonProtocolVersion,
				"protocol version "+version+" (sessionless era) is not served here").write(w, h.logger)
			return
		}
		h.opts.Sessionless.ServeHTTP(w, r)
		return
	}
	if h.shuttingDown() {
		refuse(http.StatusServiceUnavailable, ReasonUnavailable, "server is shutting down; retry against another replica or later").write(w, h.logger)
		return
	}
	switch r.Method {
	case http.MethodPost:
		h.servePOST(w, r, version)
	case http.MethodGet:
		h.serveGET(w, r, version)
	case http.MethodDelete:
		h.serveDELETE(w, r)
	default:
		refuse(http.StatusMethodNotAllowed, ReasonMethodNotAllowed, "method "+r.Method+" is not allowed; use GET, POST or DELETE").write(w, h.logger)
	}
}

// protocolVersion returns the MCP-Protocol-Version header ("" when absent),
// or a refusal when it is repeated or names a version of the stateful era
// that is not served (MCP 2025-11-25, "Protocol Version Header": 400).
func protocolVersion(r *http.Request) (string, *httpError) {
	vals := r.Header.Values("Mcp-Protocol-Version")
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", refuse(http.StatusBadRequest, ReasonProtocolVersion, "MCP-Protocol-Version header is repeated")
	}
	v := vals[0]
	if !isDate(v) {
		return "", refuse(http.StatusBadRequest, ReasonProtocolVersion, "MCP-Protocol-Version "+quote(v)+" is not a YYYY-MM-DD version")
	}
	switch {
	case v == V20241105 || v == V20250326 || v == V20250618 || v == V20251125 || v >= VSessionless:
		return v, nil
	}
	return "", refuse(http.StatusBadRequest, ReasonProtocolVersion,
		"unsupported MCP-Protocol-Version "+quote(v)+"; supported: 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28")
}

func isDate(v string) bool {
	if len(v) != 10 || v[4] != '-' || v[7] != '-' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if i != 4 && i != 7 && (v[i] < '0' || v[i] > '9') {
			return false
		}
	}
	return true
}

// sessionlessBody reports whether a POST body's params carry the
// sessionless era's per-request protocol version, restoring the body for the
// next reader. A body it cannot read or parse is left to the stateful path,
// which refuses it precisely.
func (h *Handler) sessionlessBody(r *http.Request) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, h.opts.MaxBodyBytes+1))
	// The body is put back for its handler to read again, with the read
	// error, if any, after the bytes that came: a truncated or stalled body
	// must fail there too, not pass as a shorter message.
	rest := r.Body
	if err != nil {
		rest = io.NopCloser(errReader{err})
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), rest), r.Body}
	if err != nil || !bytes.Contains(body, []byte("io.modelcontextprotocol/protocolVersion")) {
		return false
	}
	var msg struct {
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return false
	}
	_, ok := msg.Params.Meta["io.modelcontextprotocol/protocolVersion"]
	return ok
}

// sessionID returns the Mcp-Session-Id header ("" when absent), or a
// refusal when it is repeated, too long or not visible ASCII (MCP
// 2025-11-25, "Session Management": 0x21 to 0x7E).
func sessionID(r *http.Request) (string, *httpError) {
	vals := r.Header.Values("Mcp-Session-Id")
	if len(vals) == 0 {
		return "", nil
	}
	if len(vals) > 1 {
		return "", refuse(http.StatusBadRequest, ReasonSessionIDInvalid, "Mcp-Session-Id header is repeated")
	}
	v := vals[0]
	if len(v) > MaxSessionIDLen {
		return "", refuse(http.StatusBadRequest, ReasonSessionIDInvalid, "Mcp-Session-Id is longer than 128 bytes")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", refuse(http.StatusBadRequest, ReasonSessionIDInvalid, "Mcp-Session-Id has a byte outside visible ASCII")
		}
	}
	return v, nil
}

// accepts reports whether the Accept header admits mediaType (exactly, by
// its type wildcard, or by */*).
func accepts(r *http.Request, mediaType string) bool {
	major, _, _ := strings.Cut(mediaType, "/")
	// The most specific matching range decides (RFC 9110 §12.5.1): the
	// type itself, then type/*, then */*; a quality of 0 refuses.
	best, ok := 0, false
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, _ := strings.Cut(part, ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			rank := 0
			switch mt {
			case mediaType:
				rank = 3
			case major + "/*":
				rank = 2
			case "*/*":
				rank = 1
			}
			if rank > best {
				best, ok = rank, !refused(params)
			}
		}
	}
	return ok
}

// refused reports whether an Accept entry's parameters give it the quality
// 0, which marks its media type as not acceptable (RFC 9110 §12.4.2).
func refused(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(p, "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return err == nil && q == 0
		}
	}
	return false
}

// quote bounds and quotes a client-supplied value for an error message.
func quote(s string) string {
	b, _ := json.Marshal(clip(s))
	return string(b)
}

// clip shortens a client-supplied value to 64 bytes for a log attribute;
// the log handler quotes and escapes it as its format needs (regression: a
// cursor logged through quote came out twice quoted, cursor="\"…\"").
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// errReader fails every Read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
