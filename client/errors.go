// The errors a call or a message returns: CallError with its sentinels
// ErrSessionLost and ErrStreamLost, StatusError, and the wrapping that lets
// the SDK fail one call yet keep the connection.

package client

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// ErrSessionLost is the sentinel of a call that was in flight on a session
// the server no longer serves: a resume of the call's stream was answered
// 404 (the session token is unknown, evicted, deleted or superseded; MCP
// 2025-11-25, "Session Management") or 409 (the session's state was
// re-created or the cursor compacted, so its streams cannot be replayed;
// DESIGN.md, "The replay decision"), or a 409 that listed the
// call among the requests its stream lost (error.data.lostRequests). The
// call may or may not have taken effect on the server; the transport has
// already started a new session, so the caller may retry it. Test with
// errors.Is.
var ErrSessionLost = errors.New("client: session lost")

// ErrStreamLost is the sentinel of a call whose response stream broke and
// cannot be resumed: it broke before the server sent any event ID (no
// cursor to resume from), the server refused the resume with a status other
// than 404 or 409 (for example 400 cursor_ahead, or 405 when the server
// does not resume streams) or with a 409 whose error.data.lostRequests did
// not list the call (CallError.Ran reports whether it listed the call as
// answered or running instead), the POST broke after it was sent but before an
// answer arrived, resuming failed for longer than Transport.ResumeTimeout,
// or the stream held an event over Transport.MaxEventSize
// (EventTooLargeError); or, with TaskTransport, the application/json
// answer of a tools/call broke before its end. The call may or may not
// have taken effect. Test with errors.Is.
var ErrStreamLost = errors.New("client: stream lost")

// ErrNoAnswer is the cause of a call whose POST got no answer headers
// within Transport.HeaderTimeout: the server accepted the connection (and
// perhaps the call) but did not answer. Test with errors.Is.
var ErrNoAnswer = errors.New("client: no answer from the server")

// EventTooLargeError is the Cause of a call whose answer stream held an
// SSE event of more than Max bytes (Transport.MaxEventSize): the call was
// sent and may have run, but its answer cannot be read, and a resume would
// get the same event again, so the call fails at once with ErrStreamLost.
// Test with errors.As.
//
// On the standalone GET stream (Standalone) the same event is the Err of
// an EventStreamLost: the transport opens a new standalone stream, without
// Last-Event-ID, past the event and what the server sent with it; when
// that new stream again starts with an event over the bound, the
// standalone stream is not opened again for the session (its calls go on,
// each on its own stream).
type EventTooLargeError struct {
	// Max is the bound that the event exceeded, in bytes.
	Max int
	// Standalone reports that the event came on the standalone GET
	// stream, not on a call's stream.
	Standalone bool
	// Closed reports that the standalone stream is not opened again for
	// the session: the new one opened past such an event began with
	// another.
	Closed bool
}

func (e *EventTooLargeError) Error() string {
	if e.Standalone {
		s := "client: an SSE event of more than " + strconv.Itoa(e.Max) + " bytes (Transport.MaxEventSize) on the standalone stream, so the server's message in it cannot be read; a resume would get the same event again"
		if e.Closed {
			s += "; the new standalone stream began with another, so it is not opened again for this session"
		}
		return s
	}
	return "client: an SSE event of more than " + strconv.Itoa(e.Max) + " bytes (Transport.MaxEventSize), so the call's answer cannot be read; a resume would get the same event again"
}

// CallError is the error a call returns when the transport gives it up. It
// wraps ErrSessionLost or ErrStreamLost (Err) and, when a network failure
// caused it, that failure (Cause); errors.Is and errors.As see both.
type CallError struct {
	// Method is the JSON-RPC method of the call, e.g. "tools/call".
	Method string
	// ID is the call's JSON-RPC request ID.
	ID jsonrpc.ID
	// Session is the Mcp-Session-Id the call was sent on ("" when the
	// server does not use sessions).
	Session string
	// Cursor is the Last-Event-ID of the last resume attempt ("" if none).
	Cursor string
	// Status is the HTTP status that ended the call (404, 409, 400, ...); 0
	// when no status was received (the connection failed).
	Status int
	// Reason is error.data.reason of the server's JSON-RPC error body when
	// it had one (Tidemark's: session_not_found, generation_mismatch,
	// cursor_compacted, cursor_ahead, ...); "" otherwise.
	Reason string
	// Err is ErrSessionLost or ErrStreamLost.
	Err error
	// NotSent reports that the call's POST never reached the server: no
	// connection could be made within the retry bound, so sending it
	// again cannot run it twice. False whenever the POST was sent (its
	// body written, its answer begun, or its stream broken), when the call
	// may or may not have run.
	NotSent bool
	// Ran reports that the server said the call ran: the 409 that refused
	// its stream listed its id in error.data.answeredRequests (it finished
	// in a generation that has ended, and its answer cannot be read) or in
	// error.data.runningRequests (it still runs, and its answer comes where
	// no resume reaches). Sending it again runs it twice. False when the
	// server did not say so, and whenever NotSent.
	Ran bool
	// Cause is the network or protocol failure behind Err; nil if none.
	Cause error
}

// Error describes the call, the session, the status and the reason.
func (e *CallError) Error() string {
	b := []byte("client: ")
	b = append(b, e.Method...)
	if e.ID.IsValid() {
		b = append(b, " id "...)
		b = append(b, fmt.Sprint(e.ID.Raw())...)
	}
	if e.Session != "" {
		b = append(b, " session "...)
		b = append(b, prefix(e.Session)...)
	}
	b = append(b, ": "...)
	switch {
	case errors.Is(e.Err, ErrSessionLost):
		b = append(b, "session lost"...)
	default:
		b = append(b, "stream lost"...)
	}
	if e.Status != 0 {
		b = append(b, " (HTTP "...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
		if e.Reason != "" {
			b = append(b, ' ')
			b = append(b, e.Reason...)
		}
		b = append(b, ')')
	}
	if e.Cursor != "" {
		b = append(b, " at cursor "...)
		b = append(b, e.Cursor...)
	}
	if e.Ran {
		b = append(b, "; the server says it ran"...)
	}
	if e.Cause != nil {
		b = append(b, ": "...)
		b = append(b, e.Cause.Error()...)
	}
	return string(b)
}

// Unwrap returns Err and Cause.
func (e *CallError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// StatusError is the error a request returns when the server refuses its
// POST with an HTTP error status other than a 404 that the transport
// recovers from (MCP 2025-11-25, "Sending Messages to the Server").
type StatusError struct {
	// Method is the JSON-RPC method of the message that was refused.
	Method string
	// Status is the HTTP status code.
	Status int
	// Reason is error.data.reason of the JSON-RPC error body; "" if none.
	Reason string
	// Message is error.message of the JSON-RPC error body, or the start of
	// a non-JSON body.
	Message string
}

// statusError returns the *StatusError of a refused message of method.
func statusError(method string, r wire.Refusal) *StatusError {
	return &StatusError{Method: method, Status: r.Status, Reason: r.Reason, Message: r.Message}
}

// Error describes the refusal: "client: tools/call refused with HTTP 400
// invalid_request: ...".
func (e *StatusError) Error() string {
	r := wire.Refusal{Status: e.Status, Reason: e.Reason, Message: e.Message}
	return "client: " + e.Method + " refused with " + r.String()
}

// codeRejected is the JSON-RPC error code with which the go-sdk marks a
// transport Write failure that concerns one message only ("rejected by
// transport", go-sdk v1.8.0 internal/jsonrpc2 ErrRejected). Write errors
// match it, so the SDK fails only the call concerned and keeps the
// connection; any other Write error would make the SDK close it.
const codeRejected = -32005

var errRejected = &jsonrpc.Error{Code: codeRejected, Message: "rejected by transport"}

// rejected wraps a Write error so that errors.Is matches both err and the
// SDK's ErrRejected, while the message stays err's.
type rejected struct{ err error }

func (r rejected) Error() string   { return r.err.Error() }
func (r rejected) Unwrap() []error { return []error{r.err, errRejected} }

// prefix shortens a session token for messages and logs, as store.Prefix
// does on the server: tokens are credentials.
func prefix(token string) string {
	if len(token) <= 8 {
		return token
	}
	return token[:8] + "…"
}
