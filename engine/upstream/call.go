// This file holds the journey of one client call through the upstream: its
// POST, the answer read back (one JSON body or an SSE stream), and what
// happens when that stream is cut before the answer.

package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/resume"
	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
)

// Bounds of the waits between attempts to reach an upstream that did not
// answer (resuming a cut stream, checking the session, the GET stream):
// the first wait, unless the upstream's SSE retry says otherwise, and the
// cap of their doubling (package resume).
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// backoffPolicy is the upstream's waits between attempts (minBackoff,
// maxBackoff), with resumeTimeout (0: none) as the deadline. A 409 without
// a reason is retried: the go-sdk answers a resume 409 "stream ID
// conflicts with ongoing stream" while it still counts the cut connection
// as the stream's reader.
func backoffPolicy(resumeTimeout time.Duration) resume.Policy {
	return resume.Policy{Base: minBackoff, Cap: maxBackoff, Timeout: resumeTimeout, RetryBareConflict: true}
}

// deliverCall registers a client call and POSTs it upstream in the
// background. It returns once the POST is written (the call is then in
// flight upstream, and its answer or failure reaches its stream), or with
// an error wrapping engine.ErrUnreachable when no connection to the
// upstream could be made (within Options.ConnectTimeout), or the POST was
// not written within Options.Timeout: the call was not handed over.
func (c *conn) deliverCall(req *jsonrpc.Request, hdr http.Header) error {
	body, err := jsonrpc.EncodeMessage(req)
	if err != nil {
		return fmt.Errorf("upstream: encode %s: %w", req.Method, err)
	}
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return c.closedErr()
	}
	ctx, cancel := context.WithCancel(c.ctx)
	cl := &call{id: req.ID, method: req.Method, header: hdr, stop: cancel}
	c.calls[req.ID] = cl
	c.routes.FromClient(req)
	t := target{session: c.session, version: c.version, header: hdr}
	c.mu.Unlock()

	start := time.Now()
	w := newWritten()
	c.wg.Go(func() {
		defer cancel()
		c.runCall(ctx, cl, body, t, w)
	})
	// A connection is made within ConnectTimeout (the dialer's bound),
	// or the POST fails; writing it on a connection made is bounded by
	// Timeout, so that a loaded gateway does not give up on a call the
	// upstream is about to take.
	timer := time.NewTimer(c.e.opts.Timeout)
	defer timer.Stop()
	select {
	case err = <-w.ch:
	case <-timer.C:
		cancel()
		if err = <-w.ch; err != nil {
			err = fmt.Errorf("upstream POST %s: %w: %s not written within %v", c.e.url, engine.ErrUnreachable,
				req.Method, c.e.opts.Timeout)
		}
	}
	if err != nil {
		c.take(req.ID) // not handed over: the transport frees its ID
		return err
	}
	if req.Method == methodInitialize {
		c.boundInitialize(cl, c.e.opts.Timeout-time.Since(start))
	}
	return nil
}

// boundInitialize arms the bound of the client's initialize, cl, handed
// over: unanswered after d (what is left of Options.Timeout since its
// POST began), it fails (initializeUnanswered).
func (c *conn) boundInitialize(cl *call, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls[cl.id] == cl {
		cl.bound = time.AfterFunc(max(d, 0), func() { c.initializeUnanswered(cl) })
	}
}

// initializeUnanswered fails the client's initialize, cl, which the
// upstream has not answered within Options.Timeout of its POST: an
// upstream that takes the connection, or opens the answer's stream, and
// never sends the response would leave the session unusable without end
// (the restore of a re-created session bounds its own initialize by the
// same Options.Timeout). The upstream request ends (its connection
// closes), and the error, with reason upstream_unreachable, ends the
// session, which never began, as any failed initialize does (MCP
// 2025-11-25, lifecycle): its token answers 404, and its Close ends an
// upstream session the answer's headers gave with DELETE.
func (c *conn) initializeUnanswered(cl *call) {
	if c.take(cl.id) == nil {
		return // answered
	}
	cl.stop() // after the take: the ended request must not answer it otherwise
	c.logger.Warn("the upstream did not answer initialize in time; failing it, and the session does not begin. "+
		"Check that --upstream names the MCP endpoint of a running server, or raise --upstream-timeout",
		"id", cl.id.Raw(), "reason", replay.ReasonUpstreamUnreachable, "timeout", c.e.opts.Timeout)
	c.fail([]jsonrpc.ID{cl.id}, replay.ReasonUpstreamUnreachable, fmt.Sprintf("the upstream MCP server did not answer "+
		"initialize within %v (tidemark serve --upstream-timeout); the session did not begin: check that --upstream "+
		"names the MCP endpoint of a running server, then initialize a new one", c.e.opts.Timeout))
}

// runCall sends a call's POST and reads its answer.
func (c *conn) runCall(ctx context.Context, cl *call, body []byte, t target, w *written) {
	req, err := c.e.newRequest(ctx, http.MethodPost, body, t)
	if err != nil {
		w.report(err)
		return
	}
	resp, err := c.e.do(req, w)
	if err != nil {
		switch {
		case !w.ok.Load(), c.ctx.Err() != nil:
			// Not handed over (Deliver says so), or the generation ended.
		case ctx.Err() != nil:
			// Written as Deliver gave up waiting: Deliver reported it
			// handed over, so the call gets an answer.
			c.failCall(cl, replay.ReasonUpstreamUnreachable, fmt.Sprintf("the upstream MCP server took longer than %v "+
				"to take the call", c.e.opts.Timeout))
		default:
			// Written, then the connection failed before any answer: the
			// call is in flight upstream and its answer is lost with it.
			c.afterCut(ctx, cl, nil, "", err)
		}
		return
	}
	if cl.method == methodInitialize {
		c.noteSession(resp)
	}
	c.readAnswer(ctx, cl, resp, t.session != "")
}

// readAnswer reads the upstream's answer to a call's POST.
func (c *conn) readAnswer(ctx context.Context, cl *call, resp *http.Response, withSession bool) {
	switch kindOf(resp, withSession) {
	case answerLost:
		wire.Drain(resp)
		c.lose(fmt.Errorf("POST %s: %w", cl.method, errSessionLost))
	case answerError:
		c.answerFromError(ctx, cl, readStatusError(cl.method, resp))
	case answerAccepted:
		what := "the call"
		if cl.method != "tools/call" {
			what = cl.method
		}
		c.failCall(cl, replay.ReasonUpstreamError, "the upstream MCP server "+readNoAnswer(resp, what))
	case answerJSON:
		msgs, err := readJSON(resp)
		if err != nil {
			c.failCall(cl, replay.ReasonUpstreamError, "the upstream MCP server's JSON answer is not JSON-RPC: "+err.Error())
			return
		}
		for _, m := range msgs {
			c.relay(ctx, m, cl.id)
		}
		c.failCall(cl, replay.ReasonUpstreamError, "the upstream MCP server's JSON answer holds no response to the call")
	case answerSSE:
		c.readCallStream(ctx, cl, resp)
	}
}

// answerFromError answers a call the upstream refused with an HTTP error:
// 508 Loop Detected (the upstream leads back to this process; package via)
// fails it with loop_detected; otherwise with the JSON-RPC response to the
// call its body holds, if any (MCP servers send a JSON-RPC error with the
// HTTP status), else with an upstream_error naming the status.
func (c *conn) answerFromError(ctx context.Context, cl *call, se *statusError) {
	if se.status == http.StatusLoopDetected {
		c.failCall(cl, replay.ReasonLoopDetected, "the upstream MCP server leads back to this gateway (it answered "+
			cl.method+" with 508 Loop Detected): point --upstream at the MCP server itself, not at a gateway in front of it")
		return
	}
	if msgs, err := wire.DecodeAnswer(se.body); err == nil {
		for _, m := range msgs {
			if r, ok := m.(*jsonrpc.Response); ok && r.ID == cl.id && c.take(cl.id) != nil {
				c.logger.Info("the upstream refused a call", "id", cl.id.Raw(), "method", cl.method, "status", se.status)
				c.send(ctx, r, r.ID)
				return
			}
		}
	}
	c.failCall(cl, replay.ReasonUpstreamError, se.Error())
}

// readCallStream reads a call's SSE answer, resuming it upstream while it
// is cut before the call's response.
func (c *conn) readCallStream(ctx context.Context, cl *call, resp *http.Response) {
	rs := &resume.Stream{HTTP: c.e.http, Policy: backoffPolicy(c.e.opts.ResumeTimeout)}
	var last string // the upstream's ID of the newest event read
	for {
		var answered bool
		var err error
		prev := last
		last, rs.Retry, answered, err = c.readStream(resp, last, rs.Retry, func(m jsonrpc.Message) bool {
			return c.relay(ctx, m, cl.id)
		})
		if last != prev {
			rs.Progressed()
		}
		if answered || ctx.Err() != nil || !c.inFlight(cl.id) {
			return
		}
		if errors.Is(err, sse.ErrEventTooLarge) {
			// A resume would send the same event again.
			c.failCall(cl, replay.ReasonUpstreamStreamCut, "the upstream MCP server sent the call's stream "+err.Error()+
				"; the call fails (resuming would send the same event again): the answer must be smaller")
			return
		}
		if resp = c.afterCut(ctx, cl, rs, last, err); resp == nil {
			return
		}
	}
}

// inFlight reports whether call id is still unanswered.
func (c *conn) inFlight(id jsonrpc.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id] != nil
}

// cancelled reports whether the client cancelled call cl.
func (c *conn) cancelled(cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cl.cancelled
}

// afterCut handles a call whose answer stream ended before its response
// (cause says how): a call the client cancelled is answered as such; a
// stream whose events carry IDs (last is the newest) is resumed upstream
// as rs decides (package resume: GET with Last-Event-ID, after the retry
// the upstream asked for, within Options.ResumeTimeout, trying again
// while the upstream cannot be reached, answers 409 without a reason, or
// another transient status) and the new stream returned; otherwise the
// upstream session is checked and the call fails. It returns nil when the
// call has been answered or failed, or its generation ended.
func (c *conn) afterCut(ctx context.Context, cl *call, rs *resume.Stream, last string, cause error) *http.Response {
	if c.cancelled(cl) {
		c.failCall(cl, replay.ReasonCancelled, "the call was cancelled, and the upstream MCP server ended its stream without answering")
		return nil
	}
	if last == "" {
		c.checkSession(ctx, cl, time.Now().Add(c.e.opts.ResumeTimeout), cause)
		return nil
	}
	res, err := rs.Resume(ctx, c.e.resumeRequest(c.target(cl.header), last), cause)
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil:
		c.failCall(cl, replay.ReasonUpstreamStreamCut, err.Error())
		return nil
	case res.Kind == resume.Resumed:
		c.logger.Debug("upstream stream resumed", "id", cl.id.Raw(), "upstream_cursor", last)
		return res.Response
	case res.Kind == resume.SessionLost:
		c.lose(fmt.Errorf("GET resume of %s: %w", cl.method, errSessionLost))
		return nil
	case res.Expired:
		c.resumeTimedOut(cl, res.Outcome)
		return nil
	}
	c.failCall(cl, replay.ReasonUpstreamStreamCut, "the call's upstream stream was cut and the upstream MCP server "+
		"refused to resume it: "+resumeRefusal(res.Outcome).Error())
	return nil
}

// resumeRefusal is the upstream's answer o to a resume GET as an error.
func resumeRefusal(o resume.Outcome) *statusError {
	return &statusError{method: "GET with Last-Event-ID", status: o.Status, body: o.Body}
}

// resumeTimedOut fails a call whose cut stream could not be resumed within
// Options.ResumeTimeout; last is the outcome of the last try:
// upstream_stream_cut when it reached the upstream, which refused it,
// upstream_unreachable when it did not reach it.
func (c *conn) resumeTimedOut(cl *call, last resume.Outcome) {
	if last.Status != 0 {
		c.failCall(cl, replay.ReasonUpstreamStreamCut, fmt.Sprintf("the call's upstream stream was cut and the upstream "+
			"MCP server refused every resume for %v (%v); send the call again", c.e.opts.ResumeTimeout, resumeRefusal(last)))
		return
	}
	c.failCall(cl, replay.ReasonUpstreamUnreachable, fmt.Sprintf("the call's upstream stream was cut and the "+
		"upstream MCP server could not be reached within %v to resume it: %v", c.e.opts.ResumeTimeout, last.Err))
}

// checkSession fails a call whose answer stream was cut and cannot be
// resumed (its events carry no IDs). First it asks the upstream whether its
// session survived, with ping, until deadline: 404 means it restarted, and
// the generation ends (upstream_session_lost); an answer means only the
// stream was lost (upstream_stream_cut); no answer by the deadline,
// upstream_unreachable. A stateless upstream has no session to check.
func (c *conn) checkSession(ctx context.Context, cl *call, deadline time.Time, cause error) {
	cut := fmt.Sprintf("the call's upstream stream ended before its answer, and the upstream MCP server cannot resume "+
		"it (its events carry no IDs): %v", cause)
	if errors.Is(cause, errBeforeFirstEvent) {
		cut = fmt.Sprintf("the call's upstream stream ended before its answer and before its first event, so there is no "+
			"event ID to resume it from: %v", cause)
	}
	if c.target(nil).session == "" {
		c.failCall(cl, replay.ReasonUpstreamStreamCut, cut)
		return
	}
	for attempt := 0; ; attempt++ {
		wait := time.Duration(0) // the first ping goes at once
		if attempt > 0 {
			wait = resume.Backoff(backoffPolicy(0), attempt-1, 0)
		}
		if !resume.Sleep(ctx, min(wait, time.Until(deadline))) {
			return
		}
		if time.Now().After(deadline) {
			c.failCall(cl, replay.ReasonUpstreamUnreachable, fmt.Sprintf("%s; then the upstream could not be reached "+
				"within %v", cut, c.e.opts.ResumeTimeout))
			return
		}
		_, err := c.ping(ctx, cl.header, time.Until(deadline))
		switch {
		case errors.Is(err, errSessionLost):
			c.lose(err)
			return
		case errors.Is(err, engine.ErrUnreachable):
			continue
		}
		c.failCall(cl, replay.ReasonUpstreamStreamCut, cut)
		return
	}
}
