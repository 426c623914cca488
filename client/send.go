// How the SDK's messages are sent: one POST per message, retried while
// the server cannot be reached, and the JSON or SSE answer routed to the
// call that awaits it.

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/resume"
	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// post sends one POST of body on s (nil: without session headers). The
// request lives in reqCtx (the response stream is read in it) but is
// abandoned, before its answer arrives, when ctx ends, or, when
// headerBound is positive, when its answer's headers have not arrived
// within headerBound (an error wrapping ErrNoAnswer). twice says that
// body is safe to send twice (replayable).
func (c *conn) post(ctx, reqCtx context.Context, s *session, body []byte, headerBound time.Duration, twice bool) (*http.Response, error) {
	req, err := c.newRequest(reqCtx, http.MethodPost, s, body)
	if err != nil {
		return nil, err
	}
	if twice {
		// net/http sends a request marked this way again on a new
		// connection when a reused one turns out closed before any answer
		// (a proxy or server that dropped it), and writes no such header.
		req.Header["Idempotency-Key"] = nil
	}
	rctx, cancel := context.WithCancel(reqCtx)
	var expired atomic.Bool
	if headerBound > 0 {
		// A transport under the HTTP client (tidemark connect's OAuth)
		// holds the bound while a person authorizes (wire.HoldHeaderBound).
		var stopBound func()
		rctx, stopBound = wire.WithHeaderBound(rctx, headerBound, func() {
			expired.Store(true)
			cancel()
		})
		defer stopBound()
	}
	req = req.WithContext(rctx)
	stop := context.AfterFunc(ctx, cancel)
	resp, err := c.opts.HTTPClient.Do(req)
	if expired.Load() {
		if err == nil {
			wire.Drain(resp)
		}
		stop()
		cancel()
		return nil, fmt.Errorf("%w within %v: %v", ErrNoAnswer, headerBound, err)
	}
	if !stop() && err == nil {
		// ctx ended while the answer arrived: the caller gave up.
		wire.Drain(resp)
		cancel()
		return nil, ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = wire.CancelOnClose(resp.Body, cancel)
	return resp, nil
}

// replayable reports whether a message of method is safe to send twice:
// initialize (a second one makes a second session, and the first is left
// to the server's idle timeout; README: initializing again is always
// safe) and notifications/initialized (a server that has it already
// ignores it; MCP 2025-11-25, "Lifecycle").
func replayable(method string) bool {
	return method == "initialize" || method == "notifications/initialized"
}

// sessionFor returns the session a message of method is sent on: none for
// initialize, the current one otherwise, after a re-initialization if the
// current one is lost or retired.
func (c *conn) sessionFor(ctx context.Context, method string) (*session, error) {
	if method == "initialize" {
		return nil, nil
	}
	c.mu.Lock()
	s, canRenew := c.sess, c.initialized
	stale := s != nil && (s.retired || s.isLost())
	c.mu.Unlock()
	if !stale || !canRenew {
		return s, nil
	}
	return c.renew(ctx, s, false)
}

// startPost counts a call's POST to s (nil: none, an initialize) as on
// its way, so that a retirement of s meanwhile ends s only after the
// POST's answer (endPost, or the call's end once s accepted it). It
// reports false, counting nothing, when s was retired or lost since
// sessionFor chose it while a new session can be made: the caller
// chooses again.
func (c *conn) startPost(s *session) bool {
	if s == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if (s.retired || s.isLost()) && c.initialized {
		return false
	}
	s.posting++
	return true
}

// endPost records that a call's POST to s (nil: none) got an answer that
// s did not accept as a call (an error, a refusal), or none; a retired s
// whose last call this was is ended.
func (c *conn) endPost(s *session) {
	if s == nil {
		return
	}
	c.mu.Lock()
	s.posting--
	drained := s.drainedLocked()
	c.mu.Unlock()
	if drained {
		c.endRetired(s)
	}
}

// sendCall POSTs a request of the SDK and arranges for its response to
// reach Read: from a JSON body, or from an SSE stream read (and resumed) by
// a goroutine.
func (c *conn) sendCall(ctx context.Context, req *jsonrpc.Request) error {
	data, err := jsonrpc.EncodeMessage(req)
	if err != nil {
		return rejected{fmt.Errorf("client: encode %s: %w", req.Method, err)}
	}
	c.mu.Lock()
	if _, busy := c.calls[req.ID]; busy {
		c.mu.Unlock()
		// JSON-RPC 2.0, section 4: an id names one request. Sent, the
		// server would refuse it (duplicate_request_id), and the answer
		// of the call in flight would have no call left to reach.
		return rejected{fmt.Errorf("client: %s id %v: a call with that id is in flight: give each call its own id", req.Method, req.ID.Raw())}
	}
	cctx, cancel := context.WithCancel(c.ctx)
	cl := &call{id: req.ID, method: req.Method, cancel: cancel}
	c.calls[req.ID] = cl
	c.mu.Unlock()
	fail := func(err error) error {
		if c.takeCall(req.ID) != nil {
			cancel()
		}
		return rejected{err}
	}

	// A POST that cannot connect is retried for at most connectBound; the
	// first initialize's bound is StartTimeout.
	// headerBound is Transport.HeaderTimeout, StartTimeout for the first
	// initialize.
	connectBound, headerBound := c.opts.ResumeTimeout, c.opts.HeaderTimeout
	if req.Method == "initialize" && c.opts.StartTimeout != 0 {
		c.mu.Lock()
		first := c.sess == nil
		c.mu.Unlock()
		if first {
			connectBound = max(c.opts.StartTimeout, 0)
			if c.opts.StartTimeout > 0 && headerBound > 0 {
				headerBound = c.opts.StartTimeout
			}
		}
	}
	// retryingSince is when the POST first failed to connect or was
	// answered 503 with Retry-After or 429: both retries share one window.
	var retryingSince time.Time
	unavailable := 0 // POSTs answered 503 with Retry-After, or 429
	renewed := false
	for attempt := 0; ; attempt++ {
		s, err := c.sessionFor(ctx, req.Method)
		if err != nil {
			return fail(err)
		}
		if !c.startPost(s) {
			continue
		}
		c.use(s)
		posted := s
		resp, err := c.post(ctx, cctx, s, data, headerBound, replayable(req.Method))
		if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
			c.endPost(posted)
		}
		if err != nil {
			if errors.Is(err, ErrNoAnswer) {
				return fail(&CallError{Method: req.Method, ID: req.ID, Session: sessionID(s), Err: ErrStreamLost, Cause: err})
			}
			if ctx.Err() != nil || cctx.Err() != nil {
				return fail(fmt.Errorf("client: %s: %w", req.Method, err))
			}
			if notSent(err) || req.Method == "initialize" {
				// The server never saw the request, or it is an initialize,
				// whose answer was cut: sending it again cannot run it
				// twice (replayable).
				if retryingSince.IsZero() {
					retryingSince = time.Now()
				}
				if left := connectBound - time.Since(retryingSince); left > 0 && c.sleep(min(resume.Backoff(c.backoffPolicy(), attempt, 0), left), ctx.Done()) {
					continue
				}
			}
			return fail(&CallError{Method: req.Method, ID: req.ID, Session: sessionID(s), Err: ErrStreamLost, Cause: err, NotSent: notSent(err)})
		}
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" ||
			resp.StatusCode == http.StatusTooManyRequests {
			// The server did not take the request and says when to come
			// back (RFC 9110, sections 15.6.4 and 10.2.3; a 429, RFC 6585,
			// section 4, with or without Retry-After: the session has the
			// most calls in flight it may have): send it again then,
			// within ResumeTimeout of the first failure, as the resume
			// rule waits (resume.Next; without Retry-After, the backoff).
			if retryingSince.IsZero() {
				retryingSince = time.Now()
			}
			after := resume.RetryAfter(resp.Header.Get("Retry-After"), time.Now())
			ref := wire.ReadRefusal(resp)
			p := c.backoffPolicy()
			p.Timeout = c.opts.ResumeTimeout
			a := resume.Next(p, resume.State{Attempt: unavailable, Elapsed: time.Since(retryingSince)},
				resume.Outcome{Kind: resume.RetryLater, Refusal: ref, RetryAfter: after}, rand.Float64())
			unavailable++
			if a.Do == resume.Retry && c.sleep(a.Wait, ctx.Done()) {
				continue
			}
			return fail(statusError(req.Method, ref))
		}
		if resp.StatusCode == http.StatusNotFound && s != nil && s.id != "" {
			// The session is gone and the request was not executed: start
			// a new session and send it there, once.
			reason := wire.ReadRefusal(resp).Reason
			c.loseSession(s, http.StatusNotFound, reason, "POST "+req.Method, "")
			if renewed {
				return fail(&CallError{Method: req.Method, ID: req.ID, Session: s.id, Status: http.StatusNotFound, Reason: reason, Err: ErrSessionLost})
			}
			renewed = true
			continue
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fail(statusError(req.Method, wire.ReadRefusal(resp)))
		}
		if req.Method == "initialize" {
			s = newSession(resp.Header.Get(wire.HeaderSession))
			c.mu.Lock()
			old := c.sess
			c.sess = s
			c.mu.Unlock()
			c.supersede(old)
		}
		// Accepted on s as its POST stops being on its way, in one step,
		// so that a retired s never looks drained in between.
		c.mu.Lock()
		pending := c.calls[req.ID] == cl
		if pending && s != nil {
			cl.sess = s
			s.calls++
		}
		if posted != nil {
			posted.posting--
		}
		drained := posted != nil && posted.drainedLocked()
		c.mu.Unlock()
		if drained {
			c.endRetired(posted)
		}
		if !pending {
			// Answered elsewhere (the standalone stream), failed or
			// cancelled meanwhile.
			wire.Drain(resp)
			return nil
		}
		label := fmt.Sprintf("POST %s id %v", req.Method, req.ID.Raw())
		switch wire.MediaType(resp) {
		case wire.MediaSSE:
			st := c.newStream(cl, s, label)
			if !c.spawn(func() { c.runStream(cctx, st, resp) }) {
				resp.Body.Close()
			}
		case wire.MediaJSON:
			c.readJSON(cl, resp)
		default:
			// A call is answered with JSON or SSE (MCP 2025-11-25, "Sending
			// Messages to the Server"); anything else would leave it
			// waiting for ever.
			wire.Drain(resp)
			c.failCall(cl, &CallError{Method: req.Method, ID: req.ID, Session: sessionID(s), Status: resp.StatusCode, Err: ErrStreamLost,
				Cause: fmt.Errorf("answer has Content-Type %q, neither application/json nor text/event-stream", resp.Header.Get("Content-Type"))})
		}
		return nil
	}
}

// readJSON delivers the messages of an application/json answer.
func (c *conn) readJSON(cl *call, resp *http.Response) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(c.opts.MaxEventSize)+1))
	resp.Body.Close()
	if err == nil && len(body) > c.opts.MaxEventSize {
		err = fmt.Errorf("answer larger than %d bytes", c.opts.MaxEventSize)
	}
	var msgs []jsonrpc.Message
	if err == nil {
		msgs, err = wire.DecodeAnswer(body)
	}
	if err != nil {
		// A JSON answer cannot be resumed.
		c.failCall(cl, &CallError{Method: cl.method, ID: cl.id, Session: sessionID(cl.sess), Err: ErrStreamLost, Cause: err})
		return
	}
	for _, m := range msgs {
		if !c.deliver(m) {
			return
		}
	}
	c.failCall(cl, &CallError{Method: cl.method, ID: cl.id, Session: sessionID(cl.sess), Err: ErrStreamLost,
		Cause: fmt.Errorf("JSON answer of %d messages without the response", len(msgs))})
}

// sendOneWay POSTs a notification or a response, which the server answers
// 202 (MCP 2025-11-25, "Sending Messages to the Server"). It goes to
// target when that session is not lost (a response goes to the session
// whose request it answers, even a retired one), else as sessionFor says.
func (c *conn) sendOneWay(ctx context.Context, msg jsonrpc.Message, method string, target *session) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return rejected{fmt.Errorf("client: encode %s: %w", method, err)}
	}
	if method == "notifications/cancelled" {
		// The SDK stopped waiting: stop reading the call's stream.
		var p mcp.CancelledParams
		if req, ok := msg.(*jsonrpc.Request); ok && json.Unmarshal(req.Params, &p) == nil {
			if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
				if cl, drained := c.detachCall(id); cl != nil {
					cl.cancel()
					target = cl.sess
					if drained != nil {
						// The notification goes to the session before
						// its DELETE.
						defer c.endRetired(drained)
					}
				}
			}
		}
	}
	if method == "notifications/initialized" {
		// The SDK has ended its handshake: from now on a lost session is
		// renewed, even when this notification's own POST is what meets
		// the 404 (a server restarted between initialize and it), else
		// every later message would go to the dead session.
		c.mu.Lock()
		c.initialized = true
		c.mu.Unlock()
	}
	var unreachableSince time.Time
	renewed := false
	for attempt := 0; ; attempt++ {
		s, err := target, error(nil)
		if method == "response" && s != nil && s.isLost() {
			// The answer belongs to the lost session's request alone.
			c.logger.Warn("client: an answer to a request of the server's whose session is gone; dropped", "session", prefix(s.id))
			return nil
		}
		if s == nil || s.isLost() {
			s, err = c.sessionFor(ctx, method)
		}
		if err != nil {
			return rejected{err}
		}
		c.use(s)
		resp, err := c.post(ctx, c.ctx, s, data, c.opts.HeaderTimeout, replayable(method))
		if err != nil {
			// A message that is safe to send twice is sent again when its
			// answer was cut too, not only when it could not be sent.
			if ctx.Err() == nil && (notSent(err) || replayable(method)) {
				if unreachableSince.IsZero() {
					unreachableSince = time.Now()
				}
				if left := c.opts.ResumeTimeout - time.Since(unreachableSince); left > 0 && c.sleep(min(resume.Backoff(c.backoffPolicy(), attempt, 0), left), ctx.Done()) {
					continue
				}
			}
			return rejected{fmt.Errorf("client: %s: %w", method, err)}
		}
		if resp.StatusCode == http.StatusNotFound && s != nil && s.id != "" {
			reason := wire.ReadRefusal(resp).Reason
			c.loseSession(s, http.StatusNotFound, reason, "POST "+method, "")
			// A response answers a request of the lost session, and the new
			// session sends its own notifications/initialized: neither is
			// sent again. Other notifications are.
			if renewed || method == "response" || method == "notifications/initialized" || method == "notifications/cancelled" {
				return rejected{&StatusError{Method: method, Status: http.StatusNotFound, Reason: reason}}
			}
			renewed = true
			continue
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return rejected{statusError(method, wire.ReadRefusal(resp))}
		}
		wire.Drain(resp)
		if method == "notifications/initialized" {
			ready := c.startStandalone(s)
			t := time.NewTimer(standaloneWait)
			defer t.Stop()
			select {
			case <-ready:
			case <-t.C:
			case <-ctx.Done():
			}
		}
		return nil
	}
}

func sessionID(s *session) string {
	if s == nil {
		return ""
	}
	return s.id
}
