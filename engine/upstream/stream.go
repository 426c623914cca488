// This file holds the reading of what the upstream sends: SSE streams and
// JSON answers, each message handed to the outbox related to the call
// whose stream carried it, and the gateway's own exchanges with the
// upstream (notifications, pings, the restore's requests).

package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
)

// readStream reads resp, an SSE answer, handing each message to handle
// until handle reports true (the message the reader waited for), and closes
// resp. It returns the upstream's ID of the newest event and the newest
// retry field (starting from last and retry), whether handle reported true,
// and the error that ended the stream (io.EOF: the upstream ended it),
// which wraps errBeforeFirstEvent when the stream ended before any event,
// and sse.ErrEventTooLarge, with the limit, when an event was over
// maxMessageBytes. Events without data (priming events) and data that is
// not a JSON-RPC message are skipped.
func (c *conn) readStream(resp *http.Response, last string, retry time.Duration, handle func(jsonrpc.Message) bool) (string, time.Duration, bool, error) {
	defer resp.Body.Close()
	rd := sse.NewReader(resp.Body, maxMessageBytes)
	for events := 0; ; events++ {
		ev, err := rd.Next()
		switch {
		case errors.Is(err, sse.ErrEventTooLarge):
			return last, retry, false, fmt.Errorf("an event over %d bytes, the gateway's limit on one upstream message: %w", maxMessageBytes, err)
		case err != nil && events == 0:
			return last, retry, false, fmt.Errorf("%w: %w", errBeforeFirstEvent, err)
		case err != nil:
			return last, retry, false, err
		}
		if ev.HasID {
			last = ev.ID
		}
		if ev.Retry > 0 {
			retry = ev.Retry
		}
		if len(bytes.TrimSpace(ev.Data)) == 0 {
			continue
		}
		msg, err := jsonrpc.DecodeMessage(ev.Data)
		if err != nil {
			c.logger.Warn("the upstream sent an SSE event that is not a JSON-RPC message; dropped",
				"reason", replay.ReasonInvalidMessage, "error", err)
			continue
		}
		if wire.EndedByDelete(ev, msg) {
			// The upstream session was ended by DELETE: the stream ends
			// here, and its resume's 404 tells the session lost.
			return last, retry, false, io.EOF
		}
		if handle(msg) {
			return last, retry, true, nil
		}
	}
}

// errBeforeFirstEvent is wrapped by readStream's error when the stream
// ended before its first event: whether the upstream's events carry IDs is
// not known, and there is none to resume from.
var errBeforeFirstEvent = errors.New("the stream ended before its first event")

// relay hands a message of the upstream to the outbox and reports whether
// it is the response to via, the client call whose stream carried it (the
// zero ID: none, the standalone stream). The message is related and
// renamed by the generation's routing.Router: a message on a call's stream
// relates to that call, requests of the upstream get session-unique IDs. A
// response is related to its own call and handed over once: a response to
// no call in flight (already answered, or replayed on a stream it does not
// belong to) is dropped.
func (c *conn) relay(ctx context.Context, msg jsonrpc.Message, via jsonrpc.ID) bool {
	switch m := msg.(type) {
	case *jsonrpc.Response:
		cl := c.take(m.ID)
		if cl == nil {
			c.logger.Debug("dropping an upstream response to no call in flight", "id", m.ID.Raw(),
				"reason", replay.ReasonUnknownResponse)
			return m.ID == via
		}
		if cl.method == methodInitialize && m.Error == nil {
			c.noteVersion(m.Result)
		}
		c.send(ctx, coded(m), m.ID)
		return m.ID == via
	case *jsonrpc.Request:
		c.mu.Lock()
		out, related := c.routes.FromServer(m, via)
		c.mu.Unlock()
		c.send(ctx, out, related)
	}
	return false
}

// coded returns r, or, when r is an error whose code is 0, a copy of r
// whose error has the code -32603 (JSON-RPC 2.0, section 5.1: internal
// error) and r's message and data. Code 0 names no error class; the
// go-sdk writes it for a server's Go error that carries no JSON-RPC code.
func coded(r *jsonrpc.Response) *jsonrpc.Response {
	var we *jsonrpc.Error
	if !errors.As(r.Error, &we) || we.Code != 0 {
		return r
	}
	return &jsonrpc.Response{ID: r.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: we.Message, Data: we.Data}}
}

// noteSession records the upstream session ID of the answer to initialize.
func (c *conn) noteSession(resp *http.Response) {
	id := resp.Header.Get(wire.HeaderSession)
	if id == "" || resp.StatusCode/100 != 2 {
		return
	}
	c.mu.Lock()
	c.session = id
	c.mu.Unlock()
	c.logger.Info("upstream session opened", "upstream_session", redact.Token(id))
}

// noteVersion records the protocol version of a successful initialize
// result: requests after it carry it as MCP-Protocol-Version.
func (c *conn) noteVersion(result json.RawMessage) {
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if json.Unmarshal(result, &r) != nil {
		return
	}
	c.mu.Lock()
	c.version = r.ProtocolVersion
	c.mu.Unlock()
}

// bounded returns ctx bounded by d and ended with the generation.
func (c *conn) bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, d)
	stop := context.AfterFunc(c.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// notify sends msg, a notification or a response, upstream with the
// forwarded headers hdr and waits, at most Options.Timeout, until the
// upstream accepts it. Errors: one wrapping engine.ErrUnreachable, one
// wrapping errSessionLost (404), a *statusError (any other HTTP error).
func (c *conn) notify(ctx context.Context, msg jsonrpc.Message, hdr http.Header) error {
	body, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("upstream: encode: %w", err)
	}
	ctx, cancel := c.bounded(ctx, c.e.opts.Timeout)
	defer cancel()
	t := c.target(hdr)
	req, err := c.e.newRequest(ctx, http.MethodPost, body, t)
	if err != nil {
		return err
	}
	resp, err := c.e.do(req, nil)
	if err != nil {
		return err
	}
	switch kindOf(resp, t.session != "") {
	case answerLost:
		wire.Drain(resp)
		return fmt.Errorf("POST: %w", errSessionLost)
	case answerError:
		return readStatusError("POST", resp)
	}
	wire.Drain(resp)
	return nil
}

// exchange sends req, a request of the gateway's own, upstream with the
// forwarded headers hdr and returns the upstream's response to it, within
// Options.Timeout. Other messages on its answer go to the outbox, related
// to no call. The response to initialize opens the upstream session.
// Errors: as notify's, and one saying the upstream ended its answer
// without the response.
func (c *conn) exchange(ctx context.Context, req *jsonrpc.Request, hdr http.Header, bound time.Duration) (*jsonrpc.Response, error) {
	body, err := jsonrpc.EncodeMessage(req)
	if err != nil {
		return nil, fmt.Errorf("upstream: encode %s: %w", req.Method, err)
	}
	ctx, cancel := c.bounded(ctx, bound)
	defer cancel()
	t := c.target(hdr)
	hreq, err := c.e.newRequest(ctx, http.MethodPost, body, t)
	if err != nil {
		return nil, err
	}
	if req.Method == methodPing {
		// A ping is safe to send twice: net/http sends a request marked
		// this way again on a new connection when a reused one turns out
		// closed before any answer (an upstream that restarted), and
		// writes no such header.
		hreq.Header["Idempotency-Key"] = nil
	}
	resp, err := c.e.do(hreq, nil)
	if err != nil {
		return nil, err
	}
	if req.Method == methodInitialize {
		c.noteSession(resp)
	}
	var answer *jsonrpc.Response
	mine := func(m jsonrpc.Message) bool {
		if r, ok := m.(*jsonrpc.Response); ok && r.ID == req.ID {
			answer = r
			return true
		}
		c.relay(ctx, m, jsonrpc.ID{})
		return false
	}
	switch kindOf(resp, t.session != "") {
	case answerLost:
		wire.Drain(resp)
		return nil, fmt.Errorf("POST %s: %w", req.Method, errSessionLost)
	case answerError:
		se := readStatusError(req.Method, resp)
		if msgs, derr := wire.DecodeAnswer(se.body); derr == nil {
			for _, m := range msgs {
				mine(m)
			}
		}
		if answer == nil {
			return nil, se
		}
	case answerAccepted:
		return nil, errors.New("the upstream MCP server " + readNoAnswer(resp, req.Method))
	case answerJSON:
		var msgs []jsonrpc.Message
		if msgs, err = readJSON(resp); err == nil {
			for _, m := range msgs {
				if mine(m) {
					break
				}
			}
		}
	case answerSSE:
		_, _, _, err = c.readStream(resp, "", 0, mine)
	}
	switch {
	case answer == nil && err != nil:
		return nil, fmt.Errorf("the upstream answered %s without its response: %v", req.Method, err)
	case answer == nil:
		return nil, fmt.Errorf("the upstream answered %s without its response", req.Method)
	}
	return answer, nil
}

// ping asks the upstream session whether it is alive (MCP 2025-11-25,
// basic/utilities/ping), within bound (at most Options.Timeout). Errors:
// as exchange's; errSessionLost means the upstream no longer knows it.
func (c *conn) ping(ctx context.Context, hdr http.Header, bound time.Duration) (*jsonrpc.Response, error) {
	c.mu.Lock()
	c.pings++
	id := stringID(fmt.Sprintf("tidemark-ping-%d-%d", c.gen, c.pings))
	c.mu.Unlock()
	resp, err := c.exchange(ctx, &jsonrpc.Request{ID: id, Method: methodPing}, hdr, min(bound, c.e.opts.Timeout))
	if err == nil && resp.Error != nil {
		// An error answer is still an answer from a live session.
		return resp, nil
	}
	if err != nil && !errors.Is(err, errSessionLost) {
		c.logger.Debug("ping of the upstream session failed", "error", err)
	}
	return resp, err
}

// stringID returns the string request ID v.
func stringID(v string) jsonrpc.ID {
	id, _ := jsonrpc.MakeID(v) // a string is always a valid ID
	return id
}
