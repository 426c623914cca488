// refusal.go holds the refusal: the value a check returns when a request
// cannot be served, its JSON-RPC error body, the one function that writes
// it, and the refusals that errors of the session layer call for.

package transport

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/internal/warngate"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// JSON-RPC error codes used in refusal bodies: the JSON-RPC 2.0 codes, and
// -32001 "session not found" as the TypeScript SDK uses it; with them
// -32601 (method not found) and -32020 (header mismatch, MCP 2026-07-28,
// basic/transports) of the sessionless era (refusal.code).
const (
	codeParseError      = -32700
	codeInvalidRequest  = -32600
	codeInvalidParams   = -32602
	codeSessionNotFound = -32001
	codeServerError     = -32000
)

// The Allow header of a 405 refusal in each protocol era: the stateful
// era's endpoint serves GET (a stream), POST and DELETE (MCP 2025-11-25,
// basic/transports); the sessionless era's serves POST alone (MCP
// 2026-07-28, basic/transports).
const (
	allowStateful    = "GET, POST, DELETE"
	allowSessionless = "POST"
)

// retryAfterSeconds is the Retry-After value, in seconds, of every 429 and
// 503 refusal (RFC 9110, section 10.2.3).
const retryAfterSeconds = 1

// A refusal is why a request is not served: an HTTP status with a JSON-RPC
// error body whose error.data.reason is a word of the catalogue
// (replay/reason.go), which also gives the status.
type refusal struct {
	reason  replay.Reason
	message string         // what went wrong and what to do next
	data    map[string]any // fields of error.data besides reason
	id      jsonrpc.ID     // the request's id when known; null otherwise
	// challenge is the WWW-Authenticate header of a refusal of
	// authorization (authorize.go; RFC 6750, section 3).
	challenge string
	// allow is the Allow header of a 405 refusal: the methods the request's
	// protocol era serves (RFC 9110, section 15.5.6).
	allow string
	// logged says the caller logged the refusal already, with more than
	// write knows (the session and the cursor): write does not log it again.
	logged bool
	// gone says the client went away before its request was handled:
	// nobody reads the answer, so ServeHTTP neither writes nor counts it
	// (the failure is the client's leaving, not the server's).
	gone bool
	// rpcCode is the JSON-RPC error code of the body when the reason's is
	// not the one (0: code says): -32022 for a protocol version not served
	// (unsupportedVersion, refuseStateful).
	rpcCode int
	// cause is the error behind the refusal, for the log line only: layer
	// errors name the session by its token prefix, which a refusal body
	// never carries (the request may not hold that token).
	cause error
	// logger, when set, logs the refusal instead of the handler's logger:
	// a session's (session.Live.Logger), whose lines carry the session
	// and its generation.
	logger *slog.Logger
}

// refuse returns a refusal for reason, with message as the error body's
// message.
func refuse(reason replay.Reason, message string) *refusal {
	return &refusal{reason: reason, message: message}
}

// code returns the JSON-RPC error code of the refusal's body.
func (ref *refusal) code() int {
	if ref.rpcCode != 0 {
		return ref.rpcCode
	}
	switch ref.reason {
	case replay.ReasonParseError:
		return codeParseError
	case replay.ReasonSessionNotFound:
		return codeSessionNotFound
	case replay.ReasonInvalidParams:
		return codeInvalidParams
	case replay.ReasonMethodNotFound:
		return jsonrpc.CodeMethodNotFound
	case replay.ReasonHeaderMismatch:
		return mcp.CodeHeaderMismatch
	}
	switch ref.reason.Status() {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusLoopDetected:
		return codeServerError
	}
	return codeInvalidRequest
}

type errorBody struct {
	JSONRPC string      `json:"jsonrpc"`
	ID      any         `json:"id"`
	Error   errorObject `json:"error"`
}

type errorObject struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data"`
}

// refusalWarnInterval is the least time between two WARN lines of one
// refusal reason; the lines between are counted in the next one's
// suppressed.
const refusalWarnInterval = time.Second

// write sends the refusal as the response and logs it: at WARN for 5xx, at
// INFO for 409, at DEBUG for a client's other mistakes, which are routine
// and cheap to cause in bulk. WARN lines pass gate (nil: all of them):
// one per reason per refusalWarnInterval, the next one saying how many
// were held back.
func (ref *refusal) write(w http.ResponseWriter, logger *slog.Logger, gate *warngate.Gate[replay.Reason]) {
	status := ref.reason.Status()
	data := map[string]any{"reason": ref.reason}
	for k, v := range ref.data {
		data[k] = v
	}
	// JSON-RPC 2.0 §5: the id is null when the request's id is unknown, which
	// jsonrpc.EncodeMessage would omit instead; hence this envelope.
	body, err := json.Marshal(errorBody{
		JSONRPC: "2.0",
		ID:      ref.id.Raw(),
		Error:   errorObject{Code: ref.code(), Message: ref.message, Data: data},
	})
	if err != nil {
		http.Error(w, ref.message, status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// A refusal names no session: the token an initialize set before its
	// session failed to start never began (MCP 2025-11-25, "Session
	// Management": the id comes with the InitializeResult).
	h.Del("Mcp-Session-Id")
	switch status {
	case http.StatusMethodNotAllowed:
		h.Set("Allow", ref.allow)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	}
	if ref.challenge != "" {
		h.Set("WWW-Authenticate", ref.challenge)
	}
	w.WriteHeader(status)
	w.Write(body)
	if ref.logged {
		return
	}
	if ref.logger != nil {
		logger = ref.logger
	}
	level := slog.LevelDebug
	suppressed := 0
	switch {
	case status >= 500:
		level = slog.LevelWarn
		ok, n := gate.Pass(ref.reason)
		if !ok {
			return
		}
		suppressed = n
	case status == http.StatusConflict:
		level = slog.LevelInfo
	}
	attrs := []any{"status", status, "reason", ref.reason, "detail", ref.message}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	if ref.cause != nil {
		attrs = append(attrs, "error", ref.cause)
	}
	logger.Log(context.Background(), level, "request refused", attrs...)
}

// lookupRefusal returns the refusal that an error of the session lookup
// (lookup, Registry.Create, Registry.Status) calls for.
func lookupRefusal(err error) *refusal {
	var ref *refusal
	var fr *fleet.Refusal
	var rr *recordRefusal
	switch {
	case errors.As(err, &rr):
		return rr.ref // decided from the session's record (dormant.go)
	case errors.As(err, &fr):
		return refuse(fr.Reason, fr.Message)
	case errors.Is(err, session.ErrNotFound), errors.Is(err, store.ErrEnded):
		ref = notFound(err)
	case errors.Is(err, session.ErrForbidden):
		// Another user's session answers exactly as one that never
		// existed: the answer gives no hint that the token is a session.
		ref = refuse(replay.ReasonSessionNotFound, replay.Unknown.NotFoundMessage())
	case errors.Is(err, engine.ErrCapacity):
		ref = refuse(replay.ReasonCapacity, "no room for another session or server process: retry later")
	case errors.Is(err, engine.ErrUnreachable):
		ref = refuse(replay.ReasonUpstreamUnreachable, "the server this gateway fronts cannot be reached now: retry later")
	default:
		ref = refuse(replay.ReasonUnavailable, "the session's store or server cannot take the request now: retry later")
	}
	ref.cause = err
	return ref
}

// notFound returns the 404 session_not_found of a token whose lookup or
// delivery failed with err, an error that says the session is unknown or
// ended (session.StatusOf): its message names the state, the same for
// every method (replay.Status.NotFoundMessage), and never the token.
func notFound(err error) *refusal {
	st, _ := session.StatusOf(err)
	return refuse(replay.ReasonSessionNotFound, st.NotFoundMessage())
}

// deliveryRefusal returns the refusal for a failure to hand a message to
// live's session, or to store what answering it needs (an opening event, a
// state change, the bounds a resume is decided on), logged by write with
// the session's attributes and the error, as every refusal is: a 5xx at
// most once per reason per refusalWarnInterval, since a store outage or a
// failover fails every request alike. A failure because the client went
// away is clientGone's. A store that answers that the session is unknown
// or ended (404 session_not_found) also ends live's generation in this
// process (session.Live.Gone): no later request of the session is handed
// to the engine.
func deliveryRefusal(live *session.Live, err error) *refusal {
	var ref *refusal
	switch {
	case errors.Is(err, context.Canceled):
		// Every caller passes its request's context: it ended because the
		// client's connection closed (net/http).
		return clientGone(live, err)
	case live.Gone(err):
		// The store no longer holds the session: this process lets go of
		// it too, so that no later request of it reaches the engine.
		ref = notFound(err)
	case errors.Is(err, store.ErrFenced):
		// Another replica took the session over; the next attempt reaches it.
		ref = refuse(replay.ReasonOwnerMoved, "another replica took the session over: retry the request")
	case errors.Is(err, engine.ErrUnreachable):
		ref = refuse(replay.ReasonUpstreamUnreachable, "the server this gateway fronts cannot be reached now: retry the request")
	default:
		ref = refuse(replay.ReasonUnavailable, "the session's store or server cannot take the request now: retry the request")
	}
	ref.cause, ref.logger = err, live.Logger()
	return ref
}

// clientGone returns the refusal for a delivery that failed with err
// because the client's connection closed while its request was being
// handed over (its request's context ended, net/http): no answer can
// reach it, so the refusal is marked gone and the failure is logged at
// DEBUG with reason client_gone, not as a server's failure. A request
// whose client left is routine (a timeout, a closed tab) and cheap to
// cause in bulk.
func clientGone(live *session.Live, err error) *refusal {
	ref := refuse(replay.ReasonUnavailable, "the client closed the connection before its request was handed over")
	ref.gone = true
	live.Logger().Debug("delivery abandoned: the client went away", "reason", replay.ReasonClientGone, "error", err)
	return ref
}

// quote bounds and quotes a client-supplied value for an error message.
func quote(s string) string {
	b, _ := json.Marshal(clip(s))
	return string(b)
}

// clip shortens a client-supplied value to 64 bytes for a log attribute;
// the log handler quotes and escapes it as its format needs.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
