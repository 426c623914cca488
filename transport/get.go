// get.go holds the GET request kind without Last-Event-ID: it opens the
// session's standalone stream (MCP 2025-11-25, "Listening for Messages from
// the Server"). A GET with Last-Event-ID is a resume (resume.go); both
// start with the header rules of a GET (getRules).

package transport

import (
	"net/http"

	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
)

// serveGET opens the session's standalone stream; a newer GET takes it over
// from an older one (attach.go). Its checks run in this order: the header
// rules of a GET (getRules: 406, 400 session_id_invalid, 400
// session_required), then the session lookup (404, 403, 503; a session
// another replica owns is served there), then the version (sessionVersion:
// 400 protocol_version for a header naming another version than the
// session negotiated), which a session whose live state is not held here
// gets from its record, without a wake (getCheck).
func (h *Handler) serveGET(w http.ResponseWriter, r *http.Request, hdr headers) *refusal {
	if hdr.get != nil {
		return hdr.get
	}
	live, forwarded, err := h.lookup(w, r, hdr.token, nil, getCheck(hdr.version))
	switch {
	case forwarded:
		return nil
	case err != nil:
		return lookupRefusal(err)
	}
	version, ref := sessionVersion(live, hdr.version)
	if ref != nil {
		return ref
	}
	// The stream's starting point is taken in serve once this connection
	// holds the stream, so that a connection it takes over never sees (and
	// writes) this one's priming event.
	s := stream{live: live, stream: replay.StandaloneStream, fresh: true, unprimed: version < V20251125, kind: metrics.StreamStandalone}
	return h.serve(r.Context(), w, s)
}
