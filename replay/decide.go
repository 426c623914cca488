// decide.go holds the replay decision (DESIGN.md, "The replay decision"):
// its input, its outcomes with their statuses and reasons, and Decide.

package replay

import (
	"fmt"
	"net/http"
)

// Status is what the session registry knows of a session token.
type Status int

const (
	// Unknown: the token was never issued here, or its tombstone has expired.
	Unknown Status = iota
	// Live: the session exists and may be served.
	Live
	// Evicted: ended by the server (idle timeout, capacity pressure, the
	// retention budget, a shutdown); the token is kept as a tombstone so it
	// keeps answering 404.
	Evicted
	// Superseded: replaced by a newer session; the token is dead.
	Superseded
	// Deleted: ended by the client's DELETE; the token is kept as a
	// tombstone so it keeps answering 404. It is told apart from Evicted
	// so that a client learns the session ended at its own request, not
	// at the server's.
	Deleted
)

// String returns the lowercase name used in logs.
func (s Status) String() string {
	switch s {
	case Live:
		return "live"
	case Evicted:
		return "evicted"
	case Superseded:
		return "superseded"
	case Deleted:
		return "deleted"
	default:
		return "unknown"
	}
}

// EndedStatus returns the status of a token whose tombstone holds the end
// reason r (store.EndReason, a word of this catalogue): Deleted for
// ReasonDeleted, Superseded for ReasonSuperseded, and Evicted for every
// other reason, the empty one included (a tombstone that does not say why:
// the server ended the session).
func EndedStatus(r Reason) Status {
	switch r {
	case ReasonDeleted:
		return Deleted
	case ReasonSuperseded:
		return Superseded
	default:
		return Evicted
	}
}

// NotFoundMessage returns the message of the 404 session_not_found a
// token whose status is s answers, whatever the request's method: it names
// the status in the words of the vocabulary (DESIGN.md, "Vocabulary"):
// unknown, evicted or superseded, and deleted for a session the client
// ended itself, and what the client does next. It names no part of the
// token: the request that gets it may not hold the token.
func (s Status) NotFoundMessage() string {
	if s == Deleted {
		return "session is deleted: it was ended by DELETE; send initialize to start a new session"
	}
	return "session is " + s.String() + ": send initialize to start a new session"
}

// Session is what the replay decision needs of a session record.
type Session struct {
	Status     Status
	Tag        string // Tag of the session token
	Generation uint64 // live generation
	// Floor is the replay floor: the lowest sequence of the live generation
	// whose event is still retained. Every event from Floor to HWM is
	// retained. When the generation has no event yet, Floor is HWM+1.
	Floor uint64
	// HWM is the high-water mark: the highest sequence emitted so far.
	HWM uint64
}

// EventAt is what the caller found in the event log at a cursor's sequence.
type EventAt struct {
	Found  bool   // false: the event is no longer retained
	Stream uint64 // the stream the event belongs to, when Found
	// Lost, with Found false, says the event is missing although the
	// session's bounds say it is retained: the store lost the log (deleted
	// outside Tidemark, or evicted by Redis), not compaction. The
	// outcome is the same 409 cursor_compacted; its message and data
	// (logLost) say what happened.
	Lost bool
}

// Input is everything the decision reads. It is plain data: Decide performs
// no I/O and reads no clock.
type Input struct {
	// HasSessionID reports whether the request carried Mcp-Session-Id.
	HasSessionID bool
	// Session is the record the token resolved to (Status Unknown if none).
	Session Session
	// LastEventID is the raw Last-Event-ID header value.
	LastEventID string
	// At is the event at the cursor's sequence, or nil when the caller has
	// not looked it up yet; see NeedEvent.
	At *EventAt
}

// Outcome is the result of the replay decision. Its order follows the rows of
// the decision table (DESIGN.md, "The replay decision").
type Outcome int

const (
	// Replay: replay the cursor's stream after the cursor, then continue live.
	Replay Outcome = iota
	// SessionRequired: no Mcp-Session-Id header (400).
	SessionRequired
	// SessionNotFound: token unknown, evicted, deleted, tombstoned or
	// superseded (404).
	SessionNotFound
	// CursorMalformed: Last-Event-ID does not parse, names another session,
	// or names a stream the event at its sequence does not belong to (400).
	CursorMalformed
	// GenerationMismatch: the cursor belongs to an older or newer generation (409).
	GenerationMismatch
	// CursorCompacted: the cursor is below the replay floor (409).
	CursorCompacted
	// CursorAhead: the cursor is above the high-water mark (400); never
	// clamped. No event above the high-water mark was ever sent, so the
	// caller ends the live generation (Decision.Message).
	CursorAhead
	// NeedEvent is not a final outcome: every row up to the stream check
	// passed, and the caller must look up the event at Decision.Cursor.Sequence,
	// set Input.At and call Decide again.
	NeedEvent
)

// Reason returns the stable machine-readable reason of o from the catalogue
// (reason.go), as it appears in error bodies (`error.data.reason`), logs and
// metric labels: ReasonReplay for Replay, a refusal's reason otherwise, and
// "" for NeedEvent, which is not a final outcome.
func (o Outcome) Reason() Reason {
	switch o {
	case Replay:
		return ReasonReplay
	case SessionRequired:
		return ReasonSessionRequired
	case SessionNotFound:
		return ReasonSessionNotFound
	case CursorMalformed:
		return ReasonCursorMalformed
	case GenerationMismatch:
		return ReasonGenerationMismatch
	case CursorCompacted:
		return ReasonCursorCompacted
	case CursorAhead:
		return ReasonCursorAhead
	default:
		return ""
	}
}

// HTTPStatus returns the HTTP status code of o: 200 for Replay, and for a
// refusal its reason's status from the catalogue: 400, 404 or 409, as the
// table states (DESIGN.md, "The replay decision"). NeedEvent has none (0).
func (o Outcome) HTTPStatus() int {
	if o == Replay {
		return http.StatusOK
	}
	return o.Reason().Status()
}

// Decision is the result of Decide.
type Decision struct {
	Outcome Outcome
	// Cursor is the parsed Last-Event-ID; zero when it did not parse.
	Cursor Cursor
	// Session is the session the decision was made against.
	Session Session
	// Detail explains a CursorMalformed outcome (the parse error, or which
	// check failed), or a CursorCompacted one whose events the store lost
	// (EventAt.Lost); empty otherwise.
	Detail string
}

// Message returns a one-sentence human explanation of d that says what the
// client should do next: its Cause, and for a 409 (GenerationMismatch,
// CursorCompacted) the advice of a server that cannot tell which of the
// stream's requests are lost, to send them again. A server that can tell
// writes its own advice after Cause (transport, resumeRefusal). For
// CursorAhead it adds that the cursor's generation ends, as the server
// that applies the decision ends it (transport, resume; session,
// Live.EndAhead), so that no id above the high-water mark is issued in
// it again.
func (d Decision) Message() string {
	switch d.Outcome {
	case GenerationMismatch:
		if d.Cursor.Generation > d.Session.Generation {
			return d.Cause() + fmt.Sprintf("; generation %d ends, and the session continues above generation %d: "+
				"it does not know which requests the stream carried, nor whether their calls finished: "+
				"check each call's effect before sending it again", d.Session.Generation, d.Cursor.Generation)
		}
		return d.Cause() + "; the requests the stream carried are lost (error.data.lostRequests lists them, when known): " +
			"send them again, or initialize a new session"
	case CursorCompacted:
		if d.Detail != "" {
			return d.Cause() + " and its requests are lost: send them again, or initialize a new session"
		}
		return d.Cause() + ": send its requests again, or initialize a new session"
	case CursorAhead:
		return d.Cause() + fmt.Sprintf("; generation %d ends, and the session continues at the next generation: the stream cannot be resumed",
			d.Session.Generation)
	}
	return d.Cause()
}

// Cause returns what d found, the opening of Message: for a 409, why the
// stream cannot be resumed, without saying which of its requests to send
// again (a server that keeps a ledger of the stream's requests knows
// more than d: session.Live.Refused); for every other outcome, Message.
func (d Decision) Cause() string {
	s, c := d.Session, d.Cursor
	switch d.Outcome {
	case Replay:
		return fmt.Sprintf("replaying stream %d after sequence %d of generation %d", c.Stream, c.Sequence, c.Generation)
	case SessionRequired:
		return "Mcp-Session-Id header is required to resume a stream"
	case SessionNotFound:
		return s.Status.NotFoundMessage()
	case CursorMalformed:
		return "Last-Event-ID is not a cursor of this session: " + d.Detail
	case GenerationMismatch:
		if c.Generation > s.Generation {
			// No generation above the live one has existed: the store lost
			// events it had confirmed (restored from a backup behind a
			// session that went on), or the cursor was not issued here.
			return fmt.Sprintf("cursor generation %d > live generation %d: no such generation was issued, so the store lost events it had "+
				"confirmed (restored from a backup?) or the cursor was not issued here; refusing cross-generation replay",
				c.Generation, s.Generation)
		}
		return fmt.Sprintf("cursor generation %d != live generation %d: the session's state was re-created, refusing cross-generation replay",
			c.Generation, s.Generation)
	case CursorCompacted:
		if d.Detail != "" {
			return d.Detail + "; the stream cannot be resumed"
		}
		return fmt.Sprintf("cursor sequence %d is below the replay floor %d: events were compacted; the stream cannot be resumed",
			c.Sequence, s.Floor)
	case CursorAhead:
		// No event above the high-water mark, the durable watermark, was
		// ever sent: log first (DESIGN.md, "Delivery rules").
		return fmt.Sprintf("cursor sequence %d is above the high-water mark %d: refusing to clamp; no event above the high-water mark "+
			"was ever sent, so the store lost events it had confirmed (restored from a backup?) or the cursor was not issued here",
			c.Sequence, s.HWM)
	case NeedEvent:
		return fmt.Sprintf("look up the event at sequence %d", c.Sequence)
	}
	return "unknown outcome"
}

// Data returns the fields of d for a JSON-RPC error's `data` member: always
// "reason", plus the generations, floor or high-water mark that explain it,
// and for a cursor whose events the store lost, "logLost" (true) and
// "detail".
func (d Decision) Data() map[string]any {
	m := map[string]any{"reason": d.Outcome.Reason()}
	switch d.Outcome {
	case GenerationMismatch:
		m["generation"] = d.Session.Generation
		m["cursorGeneration"] = d.Cursor.Generation
	case CursorCompacted:
		m["floor"] = d.Session.Floor
		m["cursorSequence"] = d.Cursor.Sequence
		if d.Detail != "" {
			m["logLost"] = true
			m["detail"] = d.Detail
		}
	case CursorAhead:
		m["hwm"] = d.Session.HWM
		m["cursorSequence"] = d.Cursor.Sequence
	case CursorMalformed:
		if d.Detail != "" {
			m["detail"] = d.Detail
		}
	}
	return m
}

// Decide applies the replay decision (DESIGN.md, "The replay decision") to a
// GET that carries Last-Event-ID. The rows are checked in table order and
// the first that matches decides; both bounds are inclusive (cursor = floor
// and cursor = HWM replay). The rule it encodes: replay validity is a
// function of (session, generation, cursor range), never of the range
// alone, and a cursor is never clamped (DESIGN.md, "Where the rule comes
// from").
//
// When every row before the stream check passes and in.At is nil, Decide
// returns NeedEvent; the caller looks up the event and decides again.
func Decide(in Input) Decision {
	d := Decision{Session: in.Session}
	if !in.HasSessionID {
		d.Outcome = SessionRequired
		return d
	}
	if in.Session.Status != Live {
		d.Outcome = SessionNotFound
		return d
	}
	c, malformed := cursorRow(in.Session, in.LastEventID)
	if malformed != nil {
		return *malformed
	}
	d.Cursor = c
	s := in.Session
	switch {
	case c.Generation != s.Generation:
		d.Outcome = GenerationMismatch
	case c.Sequence < s.Floor:
		d.Outcome = CursorCompacted
	case c.Sequence > s.HWM:
		d.Outcome = CursorAhead
	case in.At == nil:
		d.Outcome = NeedEvent
	case !in.At.Found:
		// Compaction ran between reading the bounds and reading the event,
		// or the store lost the log: the event is gone, which is the
		// compacted row.
		d.Outcome = CursorCompacted
		if in.At.Lost {
			d.Detail = fmt.Sprintf("the session's event log is missing from the store, although the session's record says "+
				"sequences %d to %d are retained (it was deleted outside Tidemark, or evicted by Redis)", s.Floor, s.HWM)
		}
	case in.At.Stream != c.Stream:
		d.Outcome, d.Detail = CursorMalformed, fmt.Sprintf("event %d belongs to stream %d, not %d", c.Sequence, in.At.Stream, c.Stream)
	default:
		d.Outcome = Replay
	}
	return d
}

// DecideCursor applies, to the Last-Event-ID lastEventID of a request
// whose live session has tag tag, the row of the decision that the cursor
// alone decides (row 3: it does not parse, or names another session),
// before anything else is read of the session: its generation and bounds,
// its live state. It returns that CursorMalformed decision, the one Decide
// returns for the same cursor on the same live session whatever its
// generation and bounds, with ok true; or ok false when the cursor passes
// the row and Decide, given the session's record and bounds, decides
// (DESIGN.md, "The replay decision"). The caller establishes rows 1 and 2
// (a session ID, a live session) first: they come before row 3.
func DecideCursor(tag, lastEventID string) (d Decision, ok bool) {
	s := Session{Status: Live, Tag: tag}
	if _, malformed := cursorRow(s, lastEventID); malformed != nil {
		return *malformed, true
	}
	return Decision{}, false
}

// cursorRow applies row 3 of the decision to lastEventID sent for the
// live session s: the parsed cursor, or the CursorMalformed decision.
func cursorRow(s Session, lastEventID string) (Cursor, *Decision) {
	c, err := Parse(lastEventID)
	if err != nil {
		return Cursor{}, &Decision{Outcome: CursorMalformed, Session: s, Detail: err.Error()}
	}
	if c.Tag != s.Tag {
		return c, &Decision{Outcome: CursorMalformed, Session: s, Cursor: c,
			Detail: fmt.Sprintf("tag %s is not this session's: the cursor belongs to another session", c.Tag)}
	}
	return c, nil
}
