// delete.go holds the DELETE request kind: the client ends its session
// (MCP 2025-11-25, "Session Management"), whose token then answers 404,
// and the answers the requests still in flight then get.

package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

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
// naming its state), then MCP-Protocol-Version, when present, the one the
// session negotiated (400 protocol_version, as on POST and GET).
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
	if _, ref := negotiatedVersion(session.ProtocolVersion(rec), hdr.version); ref != nil {
		// A header that contradicts the session ends nothing, as it
		// serves nothing on POST and GET.
		return ref
	}
	if err := h.reg.End(ctx, token, store.EndDeleted); err != nil && !errors.Is(err, store.ErrEnded) {
		return lookupRefusal(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deletedMessage is the error message that answers a request whose session
// its client ended with DELETE before the request was answered.
const deletedMessage = "the client ended the session (DELETE) before this request was answered: its answer will not come; send initialize to start a new session"

// supersededMessage is the error message that answers a request whose
// session its client replaced with a new initialize (naming the session's
// token) before the request was answered.
const supersededMessage = "the client initialized a new session in place of this one before this request was answered: its answer will not come; send it on the new session"

// deletedAnswers returns the answers of the requests of stream, a stream
// of live's generation whose reader stopped with an error after sequence
// after, when the registry says the session ended by DELETE, or by a new
// initialize that named its token, whatever error the reader saw (the
// session's end, or a read of a log being removed): one JSON-RPC error
// per request of the stream whose answer comes after that sequence or
// never came (session.Live.Undelivered), code -32001 with reason deleted
// (replay.ReasonDeleted) or superseded (replay.ReasonSuperseded), each an
// encoded message. When the session keeps no ledger of the stream (its answers
// were lost with the generation the DELETE ended) it answers fallback,
// the calls the caller knows are unanswered (nil: none). It returns nil
// for any other end, and for the standalone stream, which carries no
// request. The answers are never stored: the session's log is gone, and a
// resume of the stream answers 404 session_not_found. The client asked
// for the end, so a request of the stream still in flight then gets its
// answer, which the stream may carry before it ends (MCP 2025-11-25,
// basic/transports, "Sending Messages to the Server": the stream ends
// once every request of it is answered).
func (h *Handler) deletedAnswers(live *session.Live, stream, after uint64, fallback session.RequestIDs) []json.RawMessage {
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.WriteTimeout)
	defer cancel()
	status, _, serr := h.reg.Status(ctx, live.Token())
	reason, message := replay.ReasonDeleted, deletedMessage
	switch {
	case serr != nil:
		return nil
	case status == replay.Superseded:
		reason, message = replay.ReasonSuperseded, supersededMessage
	case status != replay.Deleted:
		return nil
	}
	ids, ok := live.Undelivered(replay.Cursor{Generation: live.Generation(), Stream: stream, Sequence: after})
	if !ok {
		ids = fallback
	}
	if len(ids) == 0 {
		return nil
	}
	data, _ := json.Marshal(map[string]any{"reason": reason})
	out := make([]json.RawMessage, 0, len(ids))
	for _, id := range ids {
		b, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{
			Code: codeSessionNotFound, Message: message, Data: data,
		}})
		if err == nil {
			out = append(out, b)
		}
	}
	return out
}
