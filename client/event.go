// The resumption events a Transport reports to OnEvent and to its log.

package client

import "fmt"

// EventKind says what happened to a session or stream; see Event.
type EventKind int

const (
	// EventResumed: a stream that broke, or that the server closed before
	// it was finished (SEP-1699), was resumed with GET and Last-Event-ID
	// (Event.Cursor) and the server answered 200.
	EventResumed EventKind = iota + 1
	// EventSessionNotFound: the server answered 404 for the session (on a
	// resume or a POST). The calls streaming on it failed with
	// ErrSessionLost (Event.Calls of them); a new session follows, at
	// once or at the SDK's next message (Event.Deferred).
	EventSessionNotFound
	// EventFenced: the server refused a resume with 409 Conflict, because
	// the session's state was re-created (generation_mismatch) or the
	// cursor was compacted (cursor_compacted). Replaying would cross
	// generations or skip events, so calls failed with ErrSessionLost
	// (Event.Calls of them): those the 409 listed as lost, or, when its
	// body does not say which (no error.data.lostRequests), every call
	// streaming on the session, unless the cursor was compacted, which
	// loses the refused stream only. A new session follows: a 409 forces a new
	// initialize (DESIGN.md, "Where the rule comes from"). One event is reported per refusal that
	// lists the lost requests, and one per session otherwise.
	EventFenced
	// EventReinitialized: a new session (Event.NewSession) replaced a lost
	// one (Event.Session) by a fresh initialize handshake with the
	// parameters of the original one.
	EventReinitialized
	// EventStreamLost: a stream could not be resumed (no cursor, a refusal
	// other than 404/409, a 409 that did not list the stream's call among
	// the lost requests, or Transport.ResumeTimeout passed); its call
	// failed with ErrStreamLost. For the standalone GET stream, the
	// transport opens a new one, and messages the server sent in between
	// may be missing.
	EventStreamLost
	// EventDuplicate: the server sent an event whose cursor (Event.Cursor)
	// this stream had already processed; the transport dropped it, so the
	// SDK sees each event once.
	EventDuplicate
)

// String returns the kind's lowercase name.
func (k EventKind) String() string {
	switch k {
	case EventResumed:
		return "resumed"
	case EventSessionNotFound:
		return "session_not_found"
	case EventFenced:
		return "fenced"
	case EventReinitialized:
		return "reinitialized"
	case EventStreamLost:
		return "stream_lost"
	case EventDuplicate:
		return "duplicate"
	default:
		return fmt.Sprintf("EventKind(%d)", int(k))
	}
}

// Event reports one resumption event to Transport.OnEvent.
type Event struct {
	Kind EventKind
	// Session is the Mcp-Session-Id concerned (the lost one for
	// EventSessionNotFound, EventFenced and EventReinitialized).
	Session string
	// NewSession is the replacement's Mcp-Session-Id (EventReinitialized).
	NewSession string
	// Stream names the stream: "POST tools/call id 7" or "GET standalone".
	Stream string
	// Cursor is the Last-Event-ID sent (EventResumed, EventFenced,
	// EventSessionNotFound, EventStreamLost) or the dropped event's ID
	// (EventDuplicate).
	Cursor string
	// Status is the HTTP status received; 0 if none.
	Status int
	// Reason is error.data.reason of the server's error body; "" if none.
	Reason string
	// Calls is how many calls failed with ErrSessionLost
	// (EventSessionNotFound, EventFenced); 0 when none did.
	Calls int
	// Err is the failure behind EventStreamLost; nil otherwise.
	Err error
	// Deferred (EventSessionNotFound, EventFenced): no new session is
	// opened until the SDK's next message (Transport.DeferIdleRenewal).
	Deferred bool
}

// String renders the event for a log line: its kind, then the session token
// prefixes, generation and counts that are set.
func (e Event) String() string {
	s := e.Kind.String()
	if e.Session != "" {
		s += " session=" + prefix(e.Session)
	}
	if e.NewSession != "" {
		s += " new=" + prefix(e.NewSession)
	}
	if e.Stream != "" {
		s += " stream=" + e.Stream
	}
	if e.Cursor != "" {
		s += " cursor=" + e.Cursor
	}
	if e.Status != 0 {
		s += fmt.Sprintf(" status=%d", e.Status)
	}
	if e.Reason != "" {
		s += " reason=" + e.Reason
	}
	if e.Calls != 0 {
		s += fmt.Sprintf(" calls=%d", e.Calls)
	}
	if e.Err != nil {
		s += " err=" + e.Err.Error()
	}
	return s
}
