// post.go holds the POST request kind: JSON-RPC messages sent to the
// server (MCP 2025-11-25, "Sending Messages to the Server"), from the
// headers to the session that takes them.

package transport

import (
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
)

// post is what a POST carries.
type post struct {
	msgs       []jsonrpc.Message
	batch      bool               // the body was a JSON array
	calls      []*jsonrpc.Request // the requests with an id
	initialize *jsonrpc.Request   // the initialize request, if any
	supersedes string             // with initialize: the token the client held, if any
}

func newPost(msgs []jsonrpc.Message, batch bool) post {
	p := post{msgs: msgs, batch: batch}
	for _, m := range msgs {
		if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
			p.calls = append(p.calls, req)
			if req.Method == methodInitialize {
				p.initialize = req
			}
		}
	}
	return p
}

// servePOST handles a POST of one JSON-RPC message, or of a batch under
// 2025-03-26. Its checks run in this order:
//  1. the header rules of a POST (postRules: 415, 406, 415, 400
//     last_event_id_on_post), and Mcp-Session-Id (400 session_id_invalid);
//  2. the body (readBody: 413, 408, 400 parse_error) and its messages
//     (decodeMessages: 400 parse_error, batch_not_allowed by the header's
//     version when no session is named, invalid_request, batch_too_large
//     for a batch of more messages than a session may have calls in
//     flight); initialize alone (400
//     invalid_request); with Options.Auth, the scope each tools/call's
//     tool needs (403 insufficient_scope);
//  3. new calls while the server drains (503 unavailable);
//  4. the session: created by initialize (initialize.go: 503 capacity,
//     unavailable), or named by Mcp-Session-Id (postSession: 400
//     session_required, the lookup's 404, 403, 503, then 400
//     batch_not_allowed by the version the session negotiated, and 400
//     protocol_version for a header naming another version than it);
//  5. notifications and responses alone are delivered (202, or the
//     delivery's 404, 503); calls get their stream and an answer
//     (answer.go: 400 duplicate_request_id, 429 too_many_calls, the
//     delivery's 404, 503).
func (h *Handler) servePOST(w http.ResponseWriter, r *http.Request, hdr headers) *refusal {
	if hdr.post != nil {
		return hdr.post
	}
	if hdr.tokenRef != nil {
		return hdr.tokenRef
	}
	version := hdr.version
	body, ref := h.readBody(w, r)
	if ref != nil {
		return ref
	}
	// A request that names a session is judged by the version the session
	// negotiated (postSession), not by its header: a batch the header's
	// version would not allow is refused there, after a header that
	// contradicts the session is (400 protocol_version).
	batchVersion := version
	if hdr.token != "" {
		batchVersion = ""
	}
	msgs, batch, ref := decodeMessages(body, batchVersion, h.reg.MaxCallsPerSession())
	if ref != nil {
		return ref
	}
	p := newPost(msgs, batch)
	if p.initialize != nil && (len(msgs) > 1 || batch) {
		// MCP 2025-03-26, lifecycle: initialize MUST NOT be part of a batch.
		return refuse(replay.ReasonInvalidRequest, "initialize must be sent alone, not in a batch")
	}
	if p.initialize != nil {
		if ref := checkInitialize(p.initialize); ref != nil {
			return ref
		}
	}
	if ref := h.toolScopes(r, p.calls); ref != nil {
		return ref
	}
	if ref := h.drainRefusal(p.calls); ref != nil {
		return ref
	}
	if len(p.calls) > 0 {
		held, ref := h.holdInflight(body)
		if ref != nil {
			return ref
		}
		defer h.releaseInflight(held)
	}
	var live *session.Live
	if p.initialize != nil {
		live, version, ref = h.initialize(w, r, p.initialize)
		p.supersedes = hdr.token
	} else {
		live, version, ref = h.postSession(w, r, hdr.token, body, version, batch, p.calls)
	}
	if live == nil {
		return ref // refused, or forwarded to the session's owner
	}
	req := engine.Request{Header: r.Header, TokenInfo: auth.TokenInfoFromContext(r.Context())}
	if len(p.calls) == 0 {
		// Only notifications and responses: 202 with no body.
		for _, m := range msgs {
			if err := h.deliverMessage(r.Context(), live, m, req); err != nil {
				return deliveryRefusal(live, err)
			}
		}
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
	return h.answer(w, r, live, p, req, version)
}

// postSession returns the live session a POST after initialize names in
// Mcp-Session-Id, and the protocol version that applies to the request:
// the one the session negotiated (sessionVersion). A session that
// negotiated 2025-06-18 or later takes no batch, whatever older version a
// request's header claims (400 batch_not_allowed); a header naming another
// version than the session's is then refused (400 protocol_version)
// (postVersion). It returns no session and no refusal when the request was
// forwarded to the session's owner, which answered it. A session whose
// live state is not held here is judged on its record first, by those
// rules and those of its calls (postCheck), and is not woken for a request
// they refuse.
func (h *Handler) postSession(w http.ResponseWriter, r *http.Request, token string, body []byte, version string, batch bool, calls []*jsonrpc.Request) (*session.Live, string, *refusal) {
	if token == "" {
		return nil, "", refuse(replay.ReasonSessionRequired, "Mcp-Session-Id header is required for requests after initialize")
	}
	live, forwarded, err := h.lookup(w, r, token, body, h.postCheck(version, batch, calls))
	switch {
	case forwarded:
		return nil, "", nil
	case err != nil:
		return nil, "", lookupRefusal(err)
	}
	version, ref := postVersion(live.ProtocolVersion(), version, batch)
	if ref != nil {
		return nil, "", ref
	}
	return live, version, nil
}

// postVersion returns the protocol version a POST on a session that
// negotiated negotiated ("" when it recorded none) is served by, as
// negotiatedVersion does, after the rule on batches: a session that
// negotiated 2025-06-18 or later takes none (400 batch_not_allowed).
// header is the request's MCP-Protocol-Version, batch whether its body is
// a batch.
func postVersion(negotiated, header string, batch bool) (string, *refusal) {
	if batch && negotiated >= V20250618 {
		return "", refuse(replay.ReasonBatchNotAllowed,
			"JSON-RPC batches are not allowed under protocol version "+negotiated+", which this session negotiated")
	}
	return negotiatedVersion(negotiated, header)
}

// sessionVersion returns the protocol version a request on live's session
// is served by: the one the session negotiated (MCP 2025-11-25, lifecycle,
// "Version Negotiation"), which shapes its streams (a priming event from
// 2025-11-25 on) for every request. header is the request's
// MCP-Protocol-Version ("" when absent), which the client sends as the
// negotiated version (basic/transports, "Protocol Version Header"): one
// naming another version contradicts the session and is refused with 400
// protocol_version, naming the session's version as the one supported,
// rather than served in a shape the session did not negotiate. A session
// that recorded no version is served by the header's.
func sessionVersion(live *session.Live, header string) (string, *refusal) {
	return negotiatedVersion(live.ProtocolVersion(), header)
}

// negotiatedVersion is sessionVersion for a session that negotiated
// negotiated ("" when it recorded none).
func negotiatedVersion(negotiated, header string) (string, *refusal) {
	switch {
	case negotiated == "":
		return header, nil
	case header == "" || header == negotiated:
		return negotiated, nil
	}
	return "", unsupportedVersion("MCP-Protocol-Version "+quote(header)+" contradicts this session, which negotiated "+negotiated+
		": send MCP-Protocol-Version: "+negotiated+", or initialize a new session to speak "+header, header, []string{negotiated})
}
