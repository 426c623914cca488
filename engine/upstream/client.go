// This file holds the HTTP side of the gateway: the requests it sends the
// upstream (MCP 2025-11-25, basic/transports, as a client sends them) and
// the kinds of answer it tells apart.

package upstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/resume"
	"github.com/tidemark-mcp/tidemark/internal/via"
	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// versionHeaderSince is the first protocol version whose clients send
// MCP-Protocol-Version (MCP 2025-06-18, "Protocol Version Header").
const versionHeaderSince = "2025-06-18"

// target is what an upstream request carries besides its method and body.
type target struct {
	session string      // Mcp-Session-Id; "" none
	version string      // the negotiated protocol version; "" none yet
	header  http.Header // the client request whose Forward headers it carries; nil none
}

// newRequest returns a request to the upstream (wire.NewRequest): the
// headers of t (extraHeader), then the media types of method, the session
// and the protocol version (from 2025-06-18 on).
func (e *Engine) newRequest(ctx context.Context, method string, body []byte, t target) (*http.Request, error) {
	req, err := wire.NewRequest(ctx, method, e.url, body, e.extraHeader(t), t.session, versionHeader(t.version))
	if err != nil {
		return nil, fmt.Errorf("upstream: %s %s: %w", method, e.url, err)
	}
	return req, nil
}

// resumeRequest returns the GET of t that resumes a stream from the
// upstream's event ID last ("": opens the standalone stream), with the
// headers newRequest gives.
func (e *Engine) resumeRequest(t target, last string) resume.Request {
	return resume.Request{URL: e.url, Header: e.extraHeader(t), Session: t.session, Version: versionHeader(t.version), LastEventID: last}
}

// extraHeader returns the headers of an upstream request for t besides
// those of MCP: the forwarded headers of t.header, Options.Header, and a
// Via of t.header's entries and this process's (package via), by which a
// loop back to a process it passed is refused.
func (e *Engine) extraHeader(t target) http.Header {
	extra := make(http.Header, len(e.forward)+len(e.opts.Header)+1)
	for _, name := range e.forward {
		if vs := t.header.Values(name); len(vs) > 0 {
			extra[name] = vs
		}
	}
	for name, vs := range e.opts.Header {
		extra[http.CanonicalHeaderKey(name)] = vs
	}
	via.Append(extra, t.header)
	return extra
}

// versionHeader returns the MCP-Protocol-Version a request of a session
// at protocol version carries: none before 2025-06-18.
func versionHeader(version string) string {
	if version < versionHeaderSince {
		return ""
	}
	return version
}

// written reports, once, whether an upstream request reached the wire: nil
// once it is written whole, or the error that stopped it before. A request
// that never reached the wire was not handed over (engine.ErrUnreachable).
type written struct {
	once sync.Once
	ch   chan error // buffered: one value
	ok   atomic.Bool
}

func newWritten() *written { return &written{ch: make(chan error, 1)} }

func (w *written) report(err error) {
	w.once.Do(func() {
		w.ok.Store(err == nil)
		w.ch <- err
	})
}

// do sends req and returns the upstream's answer, reporting to w (when
// non-nil) as soon as req is written whole or has failed before.
func (e *Engine) do(req *http.Request, w *written) (*http.Response, error) {
	if w != nil {
		trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
			// A failed write on a reused connection may be retried on a
			// new one: only the call's result says it failed.
			if info.Err == nil {
				w.report(nil)
			}
		}}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	}
	resp, err := e.http.Do(req)
	if err != nil {
		err = e.unreachable(req.Method, err)
	}
	if w != nil {
		w.report(err)
	}
	return resp, err
}

// unreachable wraps engine.ErrUnreachable with what failed.
func (e *Engine) unreachable(method string, err error) error {
	return fmt.Errorf("upstream %s %s: %w: %w", method, e.url, engine.ErrUnreachable, err)
}

// answerKind is what an upstream HTTP answer holds.
type answerKind int

const (
	answerAccepted answerKind = iota // 202, or another 2xx without a body
	answerJSON                       // 2xx application/json: one message or a batch
	answerSSE                        // 2xx text/event-stream
	answerLost                       // 404 to a request that carried a session ID
	answerError                      // any other status
)

// kindOf classifies resp, the answer to a request that carried a session
// ID when withSession is true (MCP 2025-11-25, "Session Management": the
// server answers 404 to a session ID it no longer knows).
func kindOf(resp *http.Response, withSession bool) answerKind {
	switch {
	case resp.StatusCode == http.StatusNotFound && withSession:
		return answerLost
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return answerError
	}
	switch mt := wire.MediaType(resp); {
	case mt == wire.MediaSSE:
		return answerSSE
	case mt == wire.MediaJSON && resp.StatusCode != http.StatusAccepted:
		return answerJSON
	}
	return answerAccepted
}

// readNoAnswer reads (at most wire.MaxRefusalBody bytes) and closes resp,
// a 2xx answer to a request that holds no answer (answerAccepted), and
// says what came instead of application/json or text/event-stream, the two
// answers a server gives a request (MCP 2025-11-25, "Sending Messages to
// the Server"): the status, the Content-Type and the body's size, e.g.
// "answered the call with HTTP 200 with Content-Type text/html, 19
// bytes, not JSON or SSE: ...", then what to check. what names the
// request: "the call", or the method of the gateway's own request.
func readNoAnswer(resp *http.Response, what string) string {
	n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, wire.MaxRefusalBody+1))
	resp.Body.Close()
	const check = ": an MCP server answers a request with application/json or text/event-stream " +
		"(MCP 2025-11-25, basic/transports); check that --upstream names the MCP endpoint of a running server"
	if n == 0 {
		return fmt.Sprintf("accepted %s without answering it (HTTP %d, no body)%s", what, resp.StatusCode, check)
	}
	ctype := "no Content-Type"
	if raw := resp.Header.Get("Content-Type"); raw != "" {
		ctype = "Content-Type " + cmp.Or(wire.MediaType(resp), strconv.Quote(raw))
	}
	size := fmt.Sprintf("%d bytes", n)
	switch {
	case n > wire.MaxRefusalBody:
		size = fmt.Sprintf("over %d bytes", wire.MaxRefusalBody)
	case n == 1:
		size = "1 byte"
	}
	if resp.StatusCode == http.StatusAccepted {
		return fmt.Sprintf("accepted %s without answering it (HTTP 202 with %s, %s)%s", what, ctype, size, check)
	}
	return fmt.Sprintf("answered %s with HTTP %d with %s, %s, not JSON or SSE%s", what, resp.StatusCode, ctype, size, check)
}

// statusError is an upstream HTTP error answer.
type statusError struct {
	method string
	status int
	body   []byte // its start, at most maxErrorBody bytes
}

func (s *statusError) Error() string {
	text := strings.TrimSpace(string(s.body))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	if text == "" {
		return fmt.Sprintf("upstream answered %s with HTTP %d", s.method, s.status)
	}
	return fmt.Sprintf("upstream answered %s with HTTP %d: %s", s.method, s.status, text)
}

// readStatusError reads resp, an error answer, and closes it.
func readStatusError(method string, resp *http.Response) *statusError {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, wire.MaxRefusalBody))
	return &statusError{method: method, status: resp.StatusCode, body: body}
}

// errSessionLost is wrapped by the errors of upstream requests answered 404
// to the session ID they carried.
var errSessionLost = errors.New("upstream session not found (404)")

// readJSON reads and decodes a JSON answer, at most maxMessageBytes, and
// closes it.
func readJSON(resp *http.Response) ([]jsonrpc.Message, error) {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMessageBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxMessageBytes {
		return nil, fmt.Errorf("JSON answer over %d bytes", maxMessageBytes)
	}
	return wire.DecodeAnswer(body)
}
