// The life of a session after its server refuses it: its calls fail, a
// new session is initialized with the original parameters, and that
// session's standalone stream is opened.

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/resume"
	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// loseSession records that the server no longer serves s (status 404 or
// 409): every call streaming on s fails with ErrSessionLost, its standalone
// stream stops, and a re-initialization starts. After a 409 the token may
// still be live on the server at a newer generation; it is ended with a
// best-effort DELETE, since the transport will not use it again. Only the
// first call for s has an effect.
func (c *conn) loseSession(s *session, status int, reason, stream, cursor string) {
	if s == nil {
		return
	}
	// The calls are taken inside the Once and s.lost closes only after
	// them: a stream that sees s.lost, or that reports the refusal second
	// (sync.Once makes it wait), finds its call already failed here, so the
	// report counts every call (TestLoseSessionTakesCallsBeforeLostCloses).
	first := false
	var victims []*call
	var orphans []jsonrpc.ID
	canRenew, deferred := false, false
	s.lostOnce.Do(func() {
		first = true
		c.mu.Lock()
		defer c.mu.Unlock()
		if s.stopStandalone != nil {
			s.stopStandalone()
		}
		for id, cl := range c.calls {
			if cl.sess == s {
				delete(c.calls, id)
				victims = append(victims, cl)
			}
		}
		s.calls = 0
		orphans = c.forgetLocked(s)
		canRenew = c.initialized && c.initParams != nil
		deferred = canRenew && c.defersLocked(s)
		s.lostStatus, s.lostReason = status, reason
		close(s.lost)
	})
	if !first {
		return
	}

	why := "the MCP session that sent this request was lost (HTTP " + strconv.Itoa(status)
	if reason != "" {
		why += " " + reason
	}
	c.cancelOrphans(orphans, why+"), so an answer would reach no one")
	for _, cl := range victims {
		cl.cancel()
		c.push(&jsonrpc.Response{ID: cl.id, Error: &CallError{
			Method: cl.method, ID: cl.id, Session: s.id, Cursor: cursor, Status: status, Reason: reason, Err: ErrSessionLost,
		}})
	}
	kind := EventSessionNotFound
	if status == http.StatusConflict {
		kind = EventFenced
	}
	c.emit(Event{Kind: kind, Session: s.id, Stream: stream, Cursor: cursor, Status: status, Reason: reason, Calls: len(victims), Deferred: deferred})
	if status == http.StatusConflict && s.id != "" {
		c.spawn(func() { c.deleteSession(s) })
	}
	if canRenew && !deferred {
		c.spawn(func() { c.renew(c.ctx, s, true) })
	}
}

// defersLocked reports whether the loss of s waits for the SDK's next
// message to be re-initialized (Transport.DeferIdleRenewal); c.mu is
// held.
func (c *conn) defersLocked(s *session) bool {
	return c.opts.DeferIdleRenewal && s.own && !s.used
}

// use records that a message of the SDK's goes on s (nil: none).
func (c *conn) use(s *session) {
	if s == nil {
		return
	}
	c.mu.Lock()
	s.used = true
	c.mu.Unlock()
}

// renew returns the session that replaces lost (a lost or retired
// session), starting a re-initialization if none runs; concurrent callers
// share one. own says that no message of the SDK's asked for it: the new
// session is the transport's own until the SDK sends a message on it
// (Transport.DeferIdleRenewal).
func (c *conn) renew(ctx context.Context, lost *session, own bool) (*session, error) {
	c.mu.Lock()
	if c.sess != nil && c.sess != lost && !c.sess.isLost() && !c.sess.retired {
		s := c.sess
		c.mu.Unlock()
		return s, nil
	}
	if c.renewing == nil && !c.closingLocked() {
		ch := make(chan struct{})
		c.renewing = ch
		params := c.initParams
		c.spawnLocked(func() {
			s, err := c.reinitialize(params)
			c.mu.Lock()
			if err == nil {
				s.own = own
				c.sess = s
			}
			c.renewErr = err
			c.renewing = nil
			close(ch)
			c.mu.Unlock()
			if errors.Is(err, errClosing) {
				return
			}
			if err != nil {
				c.logger.Warn("client: re-initialization failed", "session", prefix(lost.id), "error", err)
				return
			}
			c.emit(Event{Kind: EventReinitialized, Session: lost.id, NewSession: s.id})
			c.startStandalone(s)
		})
	}
	ch := c.renewing
	c.mu.Unlock()
	if ch == nil {
		return nil, errClosing
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, errClosing
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.renewErr != nil {
		return nil, c.renewErr
	}
	return c.sess, nil
}

// errClosing is the error of a re-initialization that Close stopped, or
// that did not start because Close had begun.
var errClosing = errors.New("client: connection closed")

// closingLocked reports whether Close has begun. c.mu is held.
func (c *conn) closingLocked() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// reinitialize runs the initialize handshake again with params, retrying
// transient failures with backoff; all of it within ResumeTimeout.
func (c *conn) reinitialize(params json.RawMessage) (*session, error) {
	deadline := time.Now().Add(c.opts.ResumeTimeout)
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		closing := c.closingLocked()
		c.mu.Unlock()
		if closing {
			return nil, errClosing
		}
		s, err := c.handshake(params, deadline)
		if err == nil {
			return s, nil
		}
		var se *StatusError
		if errors.As(err, &se) && se.Status >= 400 && se.Status < 500 && se.Status != http.StatusRequestTimeout && se.Status != http.StatusTooManyRequests {
			return nil, err // the server refuses the handshake itself
		}
		left := time.Until(deadline)
		if left <= 0 || !c.sleep(min(resume.Backoff(c.backoffPolicy(), attempt, 0), left), c.closing) {
			return nil, err
		}
	}
}

// handshake sends initialize with params (under an ID of the transport's
// own, so the SDK never sees its answer) and notifications/initialized, and
// returns the new session (MCP 2025-11-25, "Lifecycle"), or fails at
// deadline.
func (c *conn) handshake(params json.RawMessage, deadline time.Time) (*session, error) {
	c.mu.Lock()
	c.internalID++
	id, _ := jsonrpc.MakeID("tidemark-client-initialize-" + strconv.FormatInt(c.internalID, 10))
	c.mu.Unlock()
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: "initialize", Params: params})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithDeadline(c.ctx, deadline)
	defer cancel()
	resp, err := c.post(ctx, ctx, nil, data, 0, true)
	if err != nil {
		return nil, fmt.Errorf("client: initialize: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, statusError("initialize", wire.ReadRefusal(resp))
	}
	s := newSession(resp.Header.Get(wire.HeaderSession))
	answer, err := c.readAnswer(resp, id)
	if err != nil {
		return nil, fmt.Errorf("client: initialize: %w", err)
	}
	if answer.Error != nil {
		return nil, fmt.Errorf("client: initialize: %w", answer.Error)
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(answer.Result, &res); err != nil {
		return nil, fmt.Errorf("client: initialize result: %w", err)
	}
	s.version = res.ProtocolVersion

	note, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage("{}")})
	if err != nil {
		return nil, err
	}
	nresp, err := c.post(ctx, ctx, s, note, 0, true)
	if err != nil {
		return nil, fmt.Errorf("client: notifications/initialized: %w", err)
	}
	if nresp.StatusCode < 200 || nresp.StatusCode > 299 {
		return nil, statusError("notifications/initialized", wire.ReadRefusal(nresp))
	}
	wire.Drain(nresp)
	if c.opts.Restore != nil {
		for _, m := range c.opts.Restore() {
			if err := c.restore(ctx, s, m); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// restore sends m, one of Transport.Restore's messages, on the new
// session s, and for a call awaits its answer. A refusal or an error
// answer is logged: the session serves without that part of the state
// (a server may refuse a subscription it accepted before). A message that
// cannot be sent, or whose answer breaks, is the handshake's error.
func (c *conn) restore(ctx context.Context, s *session, m *jsonrpc.Request) error {
	data, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		return fmt.Errorf("client: restore %s: %w", m.Method, err)
	}
	resp, err := c.post(ctx, ctx, s, data, 0, false)
	if err != nil {
		return fmt.Errorf("client: restore %s: %w", m.Method, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ref := wire.ReadRefusal(resp)
		c.logger.Warn("client: the new session refused a restored message", "session", prefix(s.id), "method", m.Method, "status", ref.Status, "reason", ref.Reason)
		return nil
	}
	if !m.IsCall() {
		wire.Drain(resp)
		return nil
	}
	answer, err := c.readAnswer(resp, m.ID)
	if err != nil {
		return fmt.Errorf("client: restore %s: %w", m.Method, err)
	}
	if answer.Error != nil {
		c.logger.Warn("client: the new session answered a restored call with an error", "session", prefix(s.id), "method", m.Method, "error", answer.Error)
	}
	return nil
}

// readAnswer reads the response to request id from a JSON body or an SSE
// stream (not resumed: a broken handshake is simply sent again).
func (c *conn) readAnswer(resp *http.Response, id jsonrpc.ID) (*jsonrpc.Response, error) {
	defer resp.Body.Close()
	return wire.ReadResponse(resp, id, c.opts.MaxEventSize)
}

// standaloneWait bounds how long the first opening of the standalone
// stream holds back the SDK (see startStandalone).
const standaloneWait = 2 * time.Second

// startStandalone opens s's standalone GET stream, unless disabled, and
// keeps it open (resumed when it breaks) until s is lost or the connection
// closes (MCP 2025-11-25, "Listening for Messages from the Server"). It
// returns a channel closed once the first GET has its answer (or failed).
// The SDK's first requests wait for it, up to standaloneWait: a server may
// route a request's answer to the standalone stream, and must know of the
// stream before the request is sent for the answer to take a predictable
// path (the conformance suite's sse-retry scenario depends on it).
func (c *conn) startStandalone(s *session) <-chan struct{} {
	ready := make(chan struct{})
	if c.opts.DisableStandaloneStream || s == nil {
		close(ready)
		return ready
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	if s.stopStandalone != nil || s.isLost() {
		c.mu.Unlock()
		cancel()
		close(ready)
		return ready
	}
	s.stopStandalone = cancel
	c.mu.Unlock()
	st := c.newStream(nil, s, "GET standalone")
	st.fresh, st.ready = true, ready
	if !c.spawn(func() { c.runStream(ctx, st, nil) }) {
		cancel()
		close(ready)
	}
	return ready
}
