// Reading a call's or the standalone SSE stream, and resuming it with
// Last-Event-ID when it breaks, within the transport's bounds.

package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/resume"
	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
)

// errNoCursor is the cause of ErrStreamLost when a stream broke before the
// server sent an event ID: there is nothing to resume from.
var errNoCursor = errors.New("the stream ended before the server sent an event ID, so it cannot be resumed")

// errResumeTimeout is the cause of ErrStreamLost when resuming failed for
// longer than Transport.ResumeTimeout.
var errResumeTimeout = errors.New("no new event within the resume timeout")

// stream is what the transport knows of one SSE stream across the
// connections that carry it.
type stream struct {
	call  *call    // the call the stream answers; nil for the standalone stream
	sess  *session // the session the stream belongs to
	label string   // for events and logs

	lastID string // the last event ID processed: the resume cursor
	seen   *idSet // event IDs processed
	done   bool   // the call's response was delivered

	fresh bool // the standalone stream's first connection is still to be made
	// oversized reports that the standalone stream was opened anew past
	// an event over MaxEventSize and has read no message since (a priming
	// event does not count: a server may send one on every stream).
	oversized bool
	// ready, when non-nil, is closed once the first connection attempt
	// has its answer (or the stream is over).
	ready     chan struct{}
	readyOnce sync.Once

	// resume holds the server's retry and the attempts and deadline of
	// resuming the stream since its last new event.
	resume  resume.Stream
	lastErr error // why the last connection or attempt failed
}

// newStream returns the stream of call (nil: the standalone stream) on s.
// A call's stream is resumed within ResumeTimeout; the standalone stream
// for as long as its session lives.
func (c *conn) newStream(cl *call, s *session, label string) *stream {
	st := &stream{call: cl, sess: s, label: label, seen: newIDSet(c.opts.SeenIDs)}
	st.resume = resume.Stream{HTTP: c.opts.HTTPClient, Policy: c.backoffPolicy(), OnAnswer: st.answered}
	if cl != nil {
		st.resume.Policy.Timeout = c.opts.ResumeTimeout
	}
	return st
}

// answered records the outcome of a GET of st: the first one's answer
// makes the stream ready, and one to be retried is the stream's last error.
func (st *stream) answered(o resume.Outcome) {
	st.markReady()
	if o.Kind == resume.RetryLater {
		st.lastErr = getError(o)
	}
}

// getError is the error of a GET whose outcome is o: the network error,
// or the refusal.
func getError(o resume.Outcome) error {
	if o.Status == 0 {
		return o.Err
	}
	return statusError("GET", o.Refusal)
}

func (st *stream) markReady() {
	if st.ready != nil {
		st.readyOnce.Do(func() { close(st.ready) })
	}
}

// backoffPolicy is the transport's waits between attempts (InitialBackoff,
// MaxBackoff), without a deadline.
func (c *conn) backoffPolicy() resume.Policy {
	return resume.Policy{Base: c.opts.InitialBackoff, Cap: c.opts.MaxBackoff}
}

// runStream reads st from resp and from the connections that resume it,
// until its call is answered or fails, its session is lost, or ctx ends. A
// nil resp means the first connection is still to be made (the standalone
// stream).
func (c *conn) runStream(ctx context.Context, st *stream, resp *http.Response) {
	defer st.markReady()
	// Whatever ends the stream, its call must not be left waiting. Every
	// path that knows why fails the call itself; this catches the rest
	// (the session was lost after the call was accepted on it).
	defer func() {
		if st.call == nil || st.done {
			return
		}
		ce := &CallError{Method: st.call.method, ID: st.call.id, Session: st.sess.id, Cursor: st.lastID, Err: ErrStreamLost, Cause: st.lastErr}
		if st.sess.isLost() {
			// Another stream saw the session refused; the call fails with
			// that refusal, status and reason included, also when this
			// stream notices the loss before loseSession fails the call.
			ce.Err, ce.Status, ce.Reason = ErrSessionLost, st.sess.lostStatus, st.sess.lostReason
		}
		c.failCall(st.call, ce)
	}()
	for {
		if resp != nil {
			watch := watchSilence(resp.Body, c.opts.ResumeTimeout)
			err := c.readStream(ctx, st, activityReader{resp.Body, watch}, watch)
			if silent := watch.stop(); silent != nil {
				err = silent
				c.logger.Warn("client: the stream's keep-alives stopped; resuming it", "session", prefix(st.sess.id), "stream", st.label, "cursor", st.lastID, "error", silent)
			}
			resp.Body.Close()
			if st.done || ctx.Err() != nil {
				return
			}
			st.lastErr = err
			var large *EventTooLargeError
			if errors.As(err, &large) && st.call != nil {
				c.failCall(st.call, &CallError{Method: st.call.method, ID: st.call.id, Session: st.sess.id, Cursor: st.lastID, Err: ErrStreamLost, Cause: err})
				c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Err: err})
				return
			}
			if large != nil && !c.pastOversized(st, large) {
				return
			}
			if st.lastID == "" && st.call != nil {
				cause := errNoCursor
				if err != nil {
					cause = errors.Join(errNoCursor, err)
				}
				c.failCall(st.call, &CallError{Method: st.call.method, ID: st.call.id, Session: st.sess.id, Err: ErrStreamLost, Cause: cause})
				c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Err: cause})
				return
			}
		}
		resp = c.reconnect(ctx, st)
		if resp == nil {
			return
		}
	}
}

// pastOversized handles an event over MaxEventSize on the standalone
// stream st: a resume from st's cursor would get the same event again, and
// again, so the stream is opened anew without Last-Event-ID, past the event
// and whatever the server sent between (EventStreamLost says so). A stream
// so opened that meets such an event before any message is not opened
// again (false): the server would send it to every new stream.
func (c *conn) pastOversized(st *stream, large *EventTooLargeError) bool {
	large.Standalone = true
	if st.oversized {
		large.Closed = true
		c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Err: large})
		return false
	}
	c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Err: large})
	st.oversized = true
	st.lastID = ""
	st.fresh = true
	return true
}

// readStream processes the events of one connection of st. It returns nil
// when the server ended the response, the read error otherwise. An event
// whose ID was processed before is dropped; each new ID becomes the resume
// cursor.
// watch learns of the server's keep-alive comments (silence.go).
func (c *conn) readStream(ctx context.Context, st *stream, body io.Reader, watch *silenceWatch) error {
	rd := sse.NewReader(body, c.opts.MaxEventSize)
	rd.OnComment = watch.keepAlive
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if errors.Is(err, sse.ErrEventTooLarge) {
				return &EventTooLargeError{Max: c.opts.MaxEventSize}
			}
			return err
		}
		if ev.Retry > 0 {
			st.resume.Retry = ev.Retry
		}
		if ev.HasID && ev.ID == "" {
			// An empty id field resets the last event ID (WHATWG HTML,
			// "Server-sent events"): the server made the stream
			// unresumable from here.
			st.lastID = ""
		}
		newID := ev.HasID && ev.ID != "" && !st.seen.has(ev.ID)
		if len(ev.Data) == 0 || (ev.Name != "" && ev.Name != "message") {
			// A priming or close event (SEP-1699), or an event that is not
			// a message: only its cursor matters.
			if newID {
				st.seen.add(ev.ID)
				st.lastID = ev.ID
				st.resume.Progressed()
			}
			continue
		}
		if ev.HasID && ev.ID != "" && !newID {
			c.emit(Event{Kind: EventDuplicate, Session: st.sess.id, Stream: st.label, Cursor: ev.ID})
			continue
		}
		msg, derr := jsonrpc.DecodeMessage(ev.Data)
		st.oversized = false
		if newID {
			st.seen.add(ev.ID)
			st.lastID = ev.ID
			st.resume.Progressed()
		}
		if derr != nil {
			c.logger.Warn("client: undecodable event dropped", "session", prefix(st.sess.id), "stream", st.label, "cursor", ev.ID, "error", derr)
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if st.call != nil && wire.EndedByDelete(ev, msg) {
			// The call's session was ended by DELETE: the stream ends
			// here, and its resume's 404 loses the session, failing the
			// call with ErrSessionLost as any end of the session does.
			return nil
		}
		msg = c.noteOrigin(msg, st.sess)
		if !c.deliver(msg) {
			return errClosing
		}
		if r, ok := msg.(*jsonrpc.Response); ok && st.call != nil && r.ID == st.call.id {
			st.done = true
			return nil
		}
	}
}

// reconnect opens the next connection of st (package resume): a GET with
// Last-Event-ID (MCP 2025-11-25, "Resumability and Redelivery"), or a
// plain GET for a standalone stream without a cursor, after the server's
// retry or a backoff delay, retrying transient failures. It returns nil
// when the stream is over: its call failed (the session was lost, the
// resume was refused, or ResumeTimeout passed), or the server offers no
// standalone stream.
func (c *conn) reconnect(ctx context.Context, st *stream) *http.Response {
	for {
		req := c.resumeRequest(st)
		var res resume.Result
		var err error
		if st.fresh {
			st.fresh = false
			res, err = st.resume.Open(ctx, req)
		} else {
			res, err = st.resume.Resume(ctx, req, st.lastErr)
		}
		st.markReady()
		if err != nil {
			if ctx.Err() == nil {
				st.lastErr = err // a request that cannot be built: the deferred failure of runStream reports it
			}
			return nil
		}
		ref := res.Refusal
		switch {
		case res.Kind == resume.Resumed:
			if st.lastID != "" {
				c.emit(Event{Kind: EventResumed, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Status: ref.Status})
			}
			return res.Response
		case res.Kind == resume.GenerationLost && (ref.LostKnown || ref.Reason == string(replay.ReasonCursorCompacted)):
			// A compacted cursor loses this stream only: its session
			// serves on at its generation, so its other calls run to
			// their ends, whether or not the 409 lists any request.
			c.fenceStream(st, ref)
			return nil
		case res.Kind == resume.SessionLost, res.Kind == resume.GenerationLost:
			c.loseSession(st.sess, ref.Status, ref.Reason, st.label, st.lastID)
			// The session may have been lost already, before this call was
			// bound to it: fail the call here too.
			c.failCall(st.call, &CallError{Method: callMethod(st.call), ID: callID(st.call), Session: st.sess.id, Cursor: st.lastID,
				Status: ref.Status, Reason: ref.Reason, Err: ErrSessionLost})
			return nil
		case res.Expired:
			cause := errResumeTimeout
			if st.lastErr != nil {
				cause = errors.Join(errResumeTimeout, st.lastErr)
			}
			c.failCall(st.call, &CallError{Method: callMethod(st.call), ID: callID(st.call), Session: st.sess.id, Cursor: st.lastID, Err: ErrStreamLost, Cause: cause})
			c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Err: cause})
			return nil
		}
		// Refused: the server will not resume this stream.
		if st.call != nil {
			cause := statusError("GET", ref)
			c.failCall(st.call, &CallError{Method: st.call.method, ID: st.call.id, Session: st.sess.id, Cursor: st.lastID,
				Status: ref.Status, Reason: ref.Reason, Err: ErrStreamLost, Cause: cause})
			c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Status: ref.Status, Reason: ref.Reason, Err: cause})
			return nil
		}
		if st.lastID == "" {
			// No standalone stream here (405, or a server that answers
			// GET otherwise: MCP 2025-11-25 lets servers decline it).
			c.logger.Debug("client: no standalone stream", "session", prefix(st.sess.id), "status", ref.Status, "reason", ref.Reason)
			return nil
		}
		// The standalone stream cannot be resumed: open a new one. What
		// the server sent in between is lost; say so.
		c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Status: ref.Status, Reason: ref.Reason,
			Err: statusError("GET", ref)})
		st.lastID = ""
		st.fresh = true
	}
}

// resumeRequest returns the GET that resumes st: the session's headers,
// with Last-Event-ID when st has a cursor.
func (c *conn) resumeRequest(st *stream) resume.Request {
	c.mu.Lock()
	id, version := st.sess.id, st.sess.version
	c.mu.Unlock()
	return resume.Request{URL: c.opts.Endpoint, Header: c.opts.Header, Session: id, Version: version, LastEventID: st.lastID}
}

func callMethod(cl *call) string {
	if cl == nil {
		return ""
	}
	return cl.method
}

func callID(cl *call) jsonrpc.ID {
	if cl == nil {
		return jsonrpc.ID{}
	}
	return cl.id
}

// idSet remembers the last n event IDs added.
type idSet struct {
	n    int
	m    map[string]struct{}
	ring []string // the IDs in order of addition, oldest at next once full
	next int
}

func newIDSet(n int) *idSet {
	return &idSet{n: n, m: make(map[string]struct{})}
}

func (s *idSet) has(id string) bool {
	_, ok := s.m[id]
	return ok
}

func (s *idSet) add(id string) {
	s.m[id] = struct{}{}
	if len(s.ring) < s.n {
		s.ring = append(s.ring, id)
		return
	}
	delete(s.m, s.ring[s.next])
	s.ring[s.next] = id
	s.next = (s.next + 1) % s.n
}
