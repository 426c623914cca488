// Reading a call's or the standalone SSE stream, and resuming it with
// Last-Event-ID when it breaks, within the transport's bounds.

package client

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/wire"
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

	lastID string        // the last event ID processed: the resume cursor
	seen   *idSet        // event IDs processed
	retry  time.Duration // the server's last SSE retry; 0 if none
	done   bool          // the call's response was delivered

	fresh bool // the standalone stream's first connection is still to be made
	// ready, when non-nil, is closed once the first connection attempt
	// has its answer (or the stream is over).
	ready     chan struct{}
	readyOnce sync.Once

	// attempt counts connection attempts since the last new event; since
	// is when the stream broke after its last new event (zero while
	// events flow).
	attempt int
	since   time.Time
	lastErr error
}

func (st *stream) markReady() {
	if st.ready != nil {
		st.readyOnce.Do(func() { close(st.ready) })
	}
}

// progressed records a new event: reconnection delays and the resume
// deadline start over.
func (st *stream) progressed() {
	st.attempt = 0
	st.since = time.Time{}
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
			err := c.readStream(ctx, st, resp.Body)
			resp.Body.Close()
			if st.done || ctx.Err() != nil {
				return
			}
			st.lastErr = err
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

// readStream processes the events of one connection of st. It returns nil
// when the server ended the response, the read error otherwise. An event
// whose ID was processed before is dropped; each new ID becomes the resume
// cursor.
func (c *conn) readStream(ctx context.Context, st *stream, body io.Reader) error {
	rd := sse.NewReader(body, c.opts.MaxEventSize)
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if ev.Retry > 0 {
			st.retry = ev.Retry
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
				st.progressed()
			}
			continue
		}
		if ev.HasID && ev.ID != "" && !newID {
			c.emit(Event{Kind: EventDuplicate, Session: st.sess.id, Stream: st.label, Cursor: ev.ID})
			continue
		}
		msg, derr := jsonrpc.DecodeMessage(ev.Data)
		if newID {
			st.seen.add(ev.ID)
			st.lastID = ev.ID
			st.progressed()
		}
		if derr != nil {
			c.logger.Warn("client: undecodable event dropped", "session", prefix(st.sess.id), "stream", st.label, "cursor", ev.ID, "error", derr)
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.noteOrigin(msg, st.sess)
		if !c.deliver(msg) {
			return errors.New("client: connection closed")
		}
		if r, ok := msg.(*jsonrpc.Response); ok && st.call != nil && r.ID == st.call.id {
			st.done = true
			return nil
		}
	}
}

// reconnect opens the next connection of st: a GET with Last-Event-ID (MCP
// 2025-11-25, "Resumability and Redelivery"), or a plain GET for a
// standalone stream without a cursor. It waits the server's retry or a
// backoff delay first, retries transient failures, and returns nil when the
// stream is over: its call failed (the session was lost, the resume was
// refused, or ResumeTimeout passed), or the server offers no standalone
// stream.
func (c *conn) reconnect(ctx context.Context, st *stream) *http.Response {
	if st.since.IsZero() {
		st.since = time.Now()
	}
	for {
		if !st.fresh {
			d := c.backoff(st.attempt, st.retry)
			if st.call != nil {
				left := c.opts.ResumeTimeout - time.Since(st.since)
				if left <= 0 {
					cause := errResumeTimeout
					if st.lastErr != nil {
						cause = errors.Join(errResumeTimeout, st.lastErr)
					}
					c.failCall(st.call, &CallError{Method: st.call.method, ID: st.call.id, Session: st.sess.id, Cursor: st.lastID, Err: ErrStreamLost, Cause: cause})
					c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Err: cause})
					return nil
				}
				d = min(d, left)
			}
			if !c.sleepCtx(ctx, d, st.sess.lost) {
				return nil
			}
		}
		st.attempt++
		fresh := st.fresh
		st.fresh = false

		resp, err := c.get(ctx, st)
		st.markReady()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			st.lastErr = err
			continue
		}
		status := resp.StatusCode
		switch {
		case status == http.StatusOK && wire.MediaType(resp) == wire.MediaSSE:
			if st.lastID != "" {
				c.emit(Event{Kind: EventResumed, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Status: status})
			}
			return resp
		case (status == http.StatusNotFound || status == http.StatusConflict) && st.sess.id != "":
			ref := wire.ReadRefusal(resp)
			if isFenceWithList(status, ref) {
				c.fenceStream(st, ref)
				return nil
			}
			reason := ref.Reason
			c.loseSession(st.sess, status, reason, st.label, st.lastID)
			// The session may have been lost already, before this call was
			// bound to it: fail the call here too.
			c.failCall(st.call, &CallError{Method: callMethod(st.call), ID: callID(st.call), Session: st.sess.id, Cursor: st.lastID,
				Status: status, Reason: reason, Err: ErrSessionLost})
			return nil
		case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
			wire.Drain(resp)
			st.lastErr = &StatusError{Method: "GET", Status: status}
			continue
		}
		// Any other answer: the server will not resume this stream.
		ref := wire.ReadRefusal(resp)
		reason := ref.Reason
		if st.call != nil {
			cause := statusError("GET", ref)
			c.failCall(st.call, &CallError{Method: st.call.method, ID: st.call.id, Session: st.sess.id, Cursor: st.lastID,
				Status: status, Reason: reason, Err: ErrStreamLost, Cause: cause})
			c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Status: status, Reason: reason, Err: cause})
			return nil
		}
		if fresh || st.lastID == "" {
			// No standalone stream here (405, or a server that answers
			// GET otherwise: MCP 2025-11-25 lets servers decline it).
			c.logger.Debug("client: no standalone stream", "session", prefix(st.sess.id), "status", status, "reason", reason)
			return nil
		}
		// The standalone stream cannot be resumed: open a new one. What
		// the server sent in between is lost; say so.
		c.emit(Event{Kind: EventStreamLost, Session: st.sess.id, Stream: st.label, Cursor: st.lastID, Status: status, Reason: reason,
			Err: statusError("GET", ref)})
		st.lastID = ""
		st.fresh = true
	}
}

// get sends one GET of st: with Last-Event-ID when st has a cursor. For a
// call's stream, the answer's headers must come before the call's resume
// deadline (a server that accepts the connection and never answers must
// not hold the call); the body then streams without a deadline.
func (c *conn) get(ctx context.Context, st *stream) (*http.Response, error) {
	rctx, cancel := context.WithCancel(ctx)
	req, err := c.newRequest(rctx, http.MethodGet, st.sess, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	if st.lastID != "" {
		req.Header.Set(wire.HeaderLastEventID, st.lastID)
	}
	var timer *time.Timer
	if st.call != nil {
		timer = time.AfterFunc(max(c.opts.ResumeTimeout-time.Since(st.since), 0), cancel)
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if timer != nil && !timer.Stop() && err == nil {
		// The deadline passed just as the answer came.
		wire.Drain(resp)
		err = errResumeTimeout
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
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

// sleepCtx is sleep that also ends with ctx.
func (c *conn) sleepCtx(ctx context.Context, d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-c.done:
		return false
	case <-stop:
		return false
	}
}

// backoff returns reconnection delay number attempt (from 0): base·2ⁿ
// capped at MaxBackoff, plus up to half of it at random so that clients
// cut at the same moment do not return at the same moment. base is the
// server's SSE retry when it sent one (never reconnect sooner than asked:
// WHATWG HTML, "Server-sent events", reconnection time), else
// InitialBackoff.
func (c *conn) backoff(attempt int, retry time.Duration) time.Duration {
	base := c.opts.InitialBackoff
	if retry > 0 {
		base = retry
	}
	limit := max(c.opts.MaxBackoff, base)
	d := base
	for i := 0; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d + rand.N(d/2+1)
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
