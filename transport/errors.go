package transport

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Reasons are the stable machine-readable values of `error.data.reason` in
// every error body the transport writes; the same strings appear in logs.
// The replay decision's reasons come from replay.Outcome.Reason.
const (
	ReasonSessionRequired    = "session_required"     // 400: no Mcp-Session-Id where one is needed
	ReasonSessionIDInvalid   = "session_id_invalid"   // 400: Mcp-Session-Id repeated, too long or not visible ASCII
	ReasonSessionNotFound    = "session_not_found"    // 404: unknown, evicted, deleted or superseded token
	ReasonSessionForbidden   = "session_forbidden"    // 403: the session belongs to another user
	ReasonProtocolVersion    = "protocol_version"     // 400: MCP-Protocol-Version unsupported or repeated
	ReasonContentType        = "content_type"         // 415: POST body is not application/json
	ReasonNotAcceptable      = "not_acceptable"       // 406: Accept lacks a media type the response needs
	ReasonBodyTooLarge       = "body_too_large"       // 413: body over Options.MaxBodyBytes
	ReasonBodyTimeout        = "body_timeout"         // 408: the body did not arrive within Options.BodyTimeout
	ReasonTooManyCalls       = "too_many_calls"       // 429 + Retry-After: the session has the most calls in flight
	ReasonParseError         = "parse_error"          // 400: body is not JSON
	ReasonInvalidRequest     = "invalid_request"      // 400: JSON that is not a valid JSON-RPC message
	ReasonBatchNotAllowed    = "batch_not_allowed"    // 400: a JSON array under 2025-06-18 or later
	ReasonDuplicateID        = "duplicate_request_id" // 400: a request ID already in flight on the session
	ReasonBatchTooLarge      = "batch_too_large"      // 400: a batch with more requests than a session may have in flight
	ReasonOriginForbidden    = "origin_forbidden"     // 403: Origin not allowed
	ReasonHostForbidden      = "host_forbidden"       // 403: non-localhost Host on a loopback listener
	ReasonMethodNotAllowed   = "method_not_allowed"   // 405
	ReasonPathNotFound       = "path_not_found"       // 404: a path that is not the MCP endpoint (PathNotFound)
	ReasonUnavailable        = "unavailable"          // 503: store or engine cannot take the request now
	ReasonCapacity           = "capacity"             // 503: no room for another session
	ReasonOwnerMoved         = "owner_moved"          // 503 + Retry-After: a forwarded request reached a replica that does not own the session either
	ReasonOwnerUnreachable   = "owner_unreachable"    // 503 + Retry-After: the owning replica holds its lease but cannot be reached or failed to answer
	ReasonLastEventIDOnPost  = "last_event_id_on_post"
	ReasonCursorMalformed    = "cursor_malformed"
	ReasonGenerationMismatch = "generation_mismatch"
)

// JSON-RPC error codes used in HTTP-level error bodies: the JSON-RPC 2.0
// codes, and -32001 "session not found" as the TypeScript SDK uses it.
const (
	codeParseError      = -32700
	codeInvalidRequest  = -32600
	codeSessionNotFound = -32001
	codeServerError     = -32000
)

// httpError is a refusal: an HTTP status with a JSON-RPC error body whose
// data carries a stable reason.
type httpError struct {
	status  int
	code    int
	reason  string
	message string
	data    map[string]any // extra fields of error.data besides reason
	id      jsonrpc.ID     // the request's ID when known; null otherwise
	// retryAfter, when positive, is sent as Retry-After (seconds; RFC 9110
	// section 10.2.3) with a 503.
	retryAfter int
	// logged says the caller logged the refusal already, with more than
	// write knows (the session and the cursor): write does not log it again.
	logged bool
	// cause is the error behind the refusal, for the log line only: layer
	// errors name the session by its token prefix, which a refusal body
	// never carries (the request may not hold that token).
	cause error
}

func refuse(status int, reason, message string) *httpError {
	e := &httpError{status: status, code: codeInvalidRequest, reason: reason, message: message}
	switch status {
	case http.StatusNotFound:
		e.code = codeSessionNotFound
	case http.StatusForbidden:
		e.code = codeServerError
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		// RFC 9110 §10.2.3: tell the client when trying again makes sense.
		e.code = codeServerError
		e.retryAfter = 1
	}
	return e
}

func (e *httpError) Error() string { return e.reason + ": " + e.message }

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

// write sends e as the response and logs it.
func (e *httpError) write(w http.ResponseWriter, logger *slog.Logger) {
	data := map[string]any{"reason": e.reason}
	for k, v := range e.data {
		data[k] = v
	}
	// JSON-RPC 2.0 §5: the id is null when the request's id is unknown, which
	// jsonrpc.EncodeMessage would omit instead; hence this envelope.
	body, err := json.Marshal(errorBody{
		JSONRPC: "2.0",
		ID:      e.id.Raw(),
		Error:   errorObject{Code: e.code, Message: e.message, Data: data},
	})
	if err != nil {
		http.Error(w, e.message, e.status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.status == http.StatusMethodNotAllowed {
		h.Set("Allow", "GET, POST, DELETE")
	}
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	w.WriteHeader(e.status)
	w.Write(body)
	// A client's mistakes are routine and cheap to cause in bulk: they log
	// at debug. Refused resumes (409) and the server's own refusals (5xx)
	// are what an operator watches.
	level := slog.LevelDebug
	switch {
	case e.status >= 500:
		level = slog.LevelWarn
	case e.status == http.StatusConflict:
		level = slog.LevelInfo
	}
	if !e.logged {
		attrs := []any{"status", e.status, "reason", e.reason, "detail", e.message}
		if e.cause != nil {
			attrs = append(attrs, "error", e.cause)
		}
		logger.Log(context.Background(), level, "request refused", attrs...)
	}
}

// PathNotFound returns a handler for every path of a server but its MCP
// endpoint: 404 with a JSON-RPC error body (reason path_not_found, code
// -32600) that names the endpoint, so a client with a wrong URL learns
// where to go instead of getting net/http's plain-text 404.
func PathNotFound(endpoint string, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		closeUntilBodyRead(w, r) // the body is never read here
		e := refuse(http.StatusNotFound, ReasonPathNotFound,
			"no MCP endpoint at "+quote(r.URL.Path)+": the endpoint is "+endpoint)
		e.code = codeInvalidRequest
		e.write(w, logger)
	})
}
