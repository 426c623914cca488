// delete.go holds the DELETE request kind: the client ends its session
// (MCP 2025-11-25, "Session Management"), whose token then answers 404.

package transport

import (
	"errors"
	"net/http"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// serveDELETE ends the session and answers 204. Its checks run in this
// order: Mcp-Session-Id well formed (400 session_id_invalid) and present
// (400 session_required), the session known to the registry (Registry.Status,
// which starts nothing: 503 when the store cannot say) and bound to this
// user, if to any (another user's session, live or ended, is 404
// session_not_found, as an unknown one), then live (404 session_not_found
// naming its state).
func (h *Handler) serveDELETE(w http.ResponseWriter, r *http.Request, hdr headers) *refusal {
	if hdr.tokenRef != nil {
		return hdr.tokenRef
	}
	token := hdr.token
	if token == "" {
		return refuse(replay.ReasonSessionRequired, "Mcp-Session-Id header is required on DELETE")
	}
	ctx := r.Context()
	status, rec, err := h.reg.Status(ctx, token)
	switch {
	case err != nil:
		return lookupRefusal(err)
	case rec.UserID != userID(r):
		return lookupRefusal(session.ErrForbidden)
	case status != replay.Live:
		return refuse(replay.ReasonSessionNotFound, status.NotFoundMessage())
	}
	if err := h.reg.End(ctx, token, store.EndDeleted); err != nil && !errors.Is(err, store.ErrEnded) {
		return lookupRefusal(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
