// sessionless.go holds the sessionless request kind: requests of the era
// that starts with MCP-Protocol-Version 2026-07-28, which Options.Sessionless
// serves (DESIGN.md, "Eras"), and how a request is found to belong to it.

package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
)

// isSessionless reports whether r, with the headers hdr, belongs to the
// sessionless era: its MCP-Protocol-Version header names 2026-07-28, the
// era's one version served, or it is a POST without the header whose
// params carry the era's per-request version; that POST's handler judges
// the version in its params. A header that names any other version, a
// later date included, is the route's to refuse (protocolVersion): a
// request is routed only to a revision served (MCP 2026-07-28,
// basic/transports, "Protocol Version Header": 400 with the versions
// supported).
func (h *Handler) isSessionless(r *http.Request, hdr headers) bool {
	if hdr.version == VSessionless {
		return true
	}
	return !hdr.hasVersion && r.Method == http.MethodPost && h.sessionlessBody(r)
}

// serveSessionless hands r to Options.Sessionless. Its checks run in this
// order: a handler is set (400 protocol_version), the method is POST (405
// method_not_allowed with Allow: POST: the revision has no standalone
// stream and no session to end), the media rules (postMedia: 415
// content_type, 406 not_acceptable), the body and its message, with the
// stateful era's rules and answers (sessionlessMessage: 413, 408, 400
// parse_error, batch_not_allowed, invalid_request), with Options.Auth the
// scope a tools/call's tool needs (403 insufficient_scope), a routing
// header sent twice (400 header_mismatch), a subscriptions/listen beyond
// Options.MaxListens open streams (503 capacity: capacityRefusal), a call
// while the server drains (drainRefusal: 503 unavailable, as in the
// stateful era, before the call reaches the Tasks extension or a tool),
// and a call whose body would take the bytes held by calls being
// answered, of either era, over Options.MaxInflightBytes (holdInflight:
// 503 inflight_bytes), which it holds until the handler has answered it.
// The request goes on
// without Mcp-Session-Id and Last-Event-ID, which a server of the revision
// ignores, and no session ID is minted or echoed (MCP 2026-07-28,
// basic/transports, "Earlier Streamable HTTP Revisions"). The handler's
// own answers are its, but for the refusals it makes without a reason
// (heldError.refusal: 400 header_mismatch, 404 method_not_found, 400
// invalid_request), which are returned with theirs.
func (h *Handler) serveSessionless(w http.ResponseWriter, r *http.Request, hdr headers) *refusal {
	version := hdr.version
	if h.opts.Sessionless == nil {
		return refuse(replay.ReasonProtocolVersion, "protocol version "+version+" (sessionless era) is not served here")
	}
	if r.Method != http.MethodPost {
		ref := refuse(replay.ReasonMethodNotAllowed, "method "+r.Method+" is not allowed under protocol version "+version+
			", which has no standalone stream and no sessions: send each request with POST")
		ref.allow = allowSessionless
		return ref
	}
	if hdr.media != nil {
		return hdr.media
	}
	msg, body, ref := h.sessionlessMessage(w, r)
	if ref != nil {
		return ref
	}
	if a := h.opts.Auth; a != nil && len(a.ToolScopes) > 0 {
		if ref := h.sessionlessToolScopes(r); ref != nil {
			return ref
		}
	}
	if ref := repeatedRoutingHeader(r); ref != nil {
		if call := h.sessionlessCall(r, `"id"`); call != nil {
			ref.id = call.ID
		}
		return ref
	}
	// Counted (or, a listen stream, registered) before the drain check: a
	// POST that passes it is one Drain, which closes draining before it
	// counts and ends listens, waits for or ends.
	listen := h.isListen(r, hdr)
	if listen {
		if ref := checkListen(msg); ref != nil {
			return ref
		}
		// A listen stream is no call in flight: Drain ends it at once
		// (the handler then answers it and returns), and its client
		// listens again, elsewhere or after the restart.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		remove, ok := h.listens.add(cancel, h.opts.MaxListens)
		if !ok {
			return capacityRefusal(h.opts.MaxListens, messageID(msg))
		}
		defer remove()
		r = r.WithContext(ctx)
		h.opts.Metrics.StreamOpened(metrics.StreamListen)
		defer h.opts.Metrics.StreamClosed(metrics.StreamListen)
	} else {
		h.sessionless.Add(1)
		defer h.sessionless.Add(-1)
	}
	if h.isDraining() {
		if call := h.sessionlessCall(r, `"id"`); call != nil {
			return h.drainRefusal([]*jsonrpc.Request{call})
		}
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		// Its body and decoded copy are held until it is answered (a
		// listen stream: until it ends), as a stateful POST's are.
		held, ref := h.holdInflight(body)
		if ref != nil {
			return ref
		}
		defer h.releaseInflight(held)
	}
	if len(r.Header.Values(wire.HeaderSession)) > 0 || len(r.Header.Values(wire.HeaderLastEventID)) > 0 {
		r = r.Clone(r.Context())
		r.Header.Del(wire.HeaderSession)
		r.Header.Del(wire.HeaderLastEventID)
	}
	// The handler's writes get the bound of Tidemark's own
	// (Options.WriteTimeout): without it a listen stream whose client
	// stops reading holds its connection, and the notifier writing to it,
	// for ever.
	dw := newDeadlineWriter(w, h.opts.WriteTimeout)
	answer := &answerWatcher{w: dw}
	held := &heldError{w: answer}
	start := time.Now()
	serveKeptAlive(dw, h.opts.KeepAlive, h.opts.Sessionless, held, r)
	if listen && dw.cutByDeadline() {
		// The reason of a listen stream cut for its full queue (fanout):
		// either way its client stopped reading.
		h.opts.Logger.Warn("a subscriptions/listen stream took no write for the write timeout, its client having stopped reading; it is cut, and its client listens again: if many are, look at the clients' network path",
			"write_timeout", h.opts.WriteTimeout, "reason", replay.ReasonListenerStalled)
	}
	if ref := held.refusal(messageID(msg)); ref != nil {
		return ref
	}
	// The go-sdk serves a request only when Mcp-Method names its method
	// (MCP 2026-07-28, basic/transports, "Routing Headers").
	if method := r.Header.Get(wire.HeaderMethod); method != "" {
		h.opts.Metrics.Operation(method, answer.errorType(method), time.Since(start))
	}
	return nil
}

// serveKeptAlive serves r with handler, writing to w, while dw's
// keep-alive runs every interval. The keep-alive stops however handler
// ends, a panic included: httputil.ReverseProxy aborts an answer its
// upstream cut with http.ErrAbortHandler, which net/http recovers.
func serveKeptAlive(dw *deadlineWriter, interval time.Duration, handler http.Handler, w http.ResponseWriter, r *http.Request) {
	defer dw.keepAlive(interval)()
	handler.ServeHTTP(w, r)
}

// refuseStateful refuses r, a request of the stateful era, when
// Options.SessionlessOnly: 400 protocol_version with the JSON-RPC error
// -32022 (UnsupportedProtocolVersionError: a server answers a version it
// chose not to support with the versions it supports, MCP 2026-07-28,
// basic/versioning, "Protocol Version Negotiation"), whose error.data
// holds, besides reason, supported (["2026-07-28"]) and requested: an
// initialize's params.protocolVersion, else the MCP-Protocol-Version
// header, else 2025-03-26, the version a request without that header is
// taken for (MCP 2025-11-25, basic/transports, "Protocol Version
// Header"). An initialize is never answered with a version of its own
// era, which would start a session this server does not serve. The
// error carries the request's id when the body is one request.
func (h *Handler) refuseStateful(r *http.Request, hdr headers) *refusal {
	requested := hdr.version
	switch {
	case hdr.versionRef != nil:
		requested = r.Header.Get(wire.HeaderProtocolVersion)
	case requested == "":
		requested = V20250326
	}
	var id jsonrpc.ID
	if r.Method == http.MethodPost {
		if call := h.sessionlessCall(r, `"id"`); call != nil {
			id = call.ID
			var p struct {
				ProtocolVersion string `json:"protocolVersion"`
			}
			if call.Method == "initialize" && json.Unmarshal(call.Params, &p) == nil && p.ProtocolVersion != "" {
				requested = p.ProtocolVersion
			}
		}
	}
	ref := unsupportedVersion("protocol version "+quote(requested)+" is not served here: this server serves "+VSessionless+
		" alone, which has no initialize and no sessions; send each request with its version in params._meta and in MCP-Protocol-Version",
		requested, []string{VSessionless})
	ref.id = id
	return ref
}

// sessionlessMessage reads r's body within its limits (readBody: 413
// body_too_large, 408 body_timeout, 400 parse_error) and decodes it as the
// stateful era decodes a POST under a version without batches
// (decodeMessages: 400 parse_error, batch_not_allowed, invalid_request),
// so that a body either era refuses gets the same answer, and an id the
// go-sdk's decoder would round or clamp (1.5, 1e3, beyond ±2^53) is
// refused before anything runs rather than answered under another id. It
// returns the one message the body holds and the body, which it puts back
// for Options.Sessionless to read.
func (h *Handler) sessionlessMessage(w http.ResponseWriter, r *http.Request) (jsonrpc.Message, []byte, *refusal) {
	body, ref := h.readBody(w, r)
	if ref != nil {
		return nil, nil, ref
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	msgs, _, ref := decodeMessages(body, VSessionless, 1)
	if ref != nil {
		return nil, nil, ref
	}
	return msgs[0], body, nil
}

// messageID returns the id of msg, a request or a response; the zero ID
// (null) for a notification.
func messageID(msg jsonrpc.Message) jsonrpc.ID {
	switch m := msg.(type) {
	case *jsonrpc.Request:
		return m.ID
	case *jsonrpc.Response:
		return m.ID
	}
	return jsonrpc.ID{}
}

// sessionlessBody reports whether a POST body's params carry the
// sessionless era's per-request protocol version, restoring the body for the
// next reader. A body it cannot read or parse is left to the stateful path,
// which refuses it precisely.
func (h *Handler) sessionlessBody(r *http.Request) bool {
	body, err := h.peekBody(r)
	if err != nil || !bytes.Contains(body, []byte(wire.MetaProtocolVersion)) {
		return false
	}
	var msg struct {
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return false
	}
	_, ok := msg.Params.Meta[wire.MetaProtocolVersion]
	return ok
}

// peekBody reads r's body, up to one byte over MaxBodyBytes, and puts it
// back for the next reader.
func (h *Handler) peekBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, h.opts.MaxBodyBytes+1))
	// The body is put back for its handler to read again, with the read
	// error, if any, after the bytes that came: a truncated or stalled body
	// must fail there too, not pass as a shorter message.
	rest := r.Body
	if err != nil {
		rest = io.NopCloser(errReader{err})
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), rest), r.Body}
	return body, err
}

// sessionlessToolScopes refuses a sessionless tools/call whose tool needs
// a scope the token lacks (toolScopes). A body it cannot read or decode
// is left to the handler, which refuses it precisely.
func (h *Handler) sessionlessToolScopes(r *http.Request) *refusal {
	req := h.sessionlessCall(r, "tools/call")
	if req == nil {
		return nil
	}
	return h.toolScopes(r, []*jsonrpc.Request{req})
}

// withRequestID returns ref, refusing r before its body was read, with
// the id of the request r's body holds when it is one request (a POST):
// every error answer carries the id of the request it answers (JSON-RPC
// 2.0, section 5; the MCP conformance suite's server-stateless scenario
// checks it of the 400 protocol_version answer).
func (h *Handler) withRequestID(r *http.Request, ref *refusal) *refusal {
	if r.Method != http.MethodPost {
		return ref
	}
	if call := h.sessionlessCall(r, `"id"`); call != nil {
		ref.id = call.ID
	}
	return ref
}

// sessionlessCall returns the request with an id that r's body holds,
// putting the body back for the next reader, when the body contains mark
// (a cheap test before decoding). It returns nil for a notification, a
// response, and a body it cannot read or decode, which the handler refuses
// precisely.
func (h *Handler) sessionlessCall(r *http.Request, mark string) *jsonrpc.Request {
	body, err := h.peekBody(r)
	if err != nil || !bytes.Contains(body, []byte(mark)) {
		return nil
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return nil
	}
	return req
}

// errReader fails every Read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
