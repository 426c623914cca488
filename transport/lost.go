// lost.go holds the answer to calls handed to the engine whose stream's
// events could not be stored: the generation that ran them ended before
// their answers were, so they may have run, and the client must not be
// told to send them again (the seed's rule: a replay never duplicates a
// side effect; neither may a retry Tidemark asks for).

package transport

import (
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// The messages of lostAnswers' errors, by error.data.reason.
const (
	lostGenerationMessage = "the call was handed to the server, but the session's store could not keep its stream, " +
		"so its answer is lost and it may have run: check its effect before sending it again; " +
		"the session's next request continues at a new generation"
	lostFencedMessage = "the call was handed to the server, but another replica took the session over before its answer " +
		"was stored, so its answer is lost and it may have run: check its effect before sending it again"
	lostEndedMessage = "the call was handed to the server, but the session ended before its answer was stored, " +
		"so it may have run: check its effect before sending it again, on a new session"
)

// lostAnswers returns the JSON-RPC error responses (code -32603, as the
// stdio gateway answers the calls of a server that exited) of calls ids,
// handed to live's engine, whose generation ended with err before their
// answers were stored, and logs them. error.data.reason is fenced when a
// newer owner took the session over (store.ErrFenced),
// session_not_found when the session ended, else generation_lost;
// error.data.generation is the generation that ran them. The errors are
// never stored: a resume of the stream gets the generation's 409 (or 404).
func (h *Handler) lostAnswers(live *session.Live, ids session.RequestIDs, err error) []json.RawMessage {
	reason, message := replay.ReasonGenerationLost, lostGenerationMessage
	switch {
	case errors.Is(err, store.ErrFenced):
		reason, message = replay.ReasonFenced, lostFencedMessage
	case errors.Is(err, store.ErrEnded) || errors.Is(err, store.ErrNotFound):
		reason, message = replay.ReasonSessionNotFound, lostEndedMessage
	}
	live.Logger().Warn("calls lost with their stream", "reason", reason, "ids", ids, "error", err)
	data, _ := json.Marshal(map[string]any{"reason": reason, "generation": live.Generation()})
	out := make([]json.RawMessage, 0, len(ids))
	for _, id := range ids {
		b, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{
			Code: jsonrpc.CodeInternalError, Message: message, Data: data,
		}})
		if err == nil {
			out = append(out, b)
		}
	}
	return out
}

// answerUnstored ends the SSE stream of calls ids, none of whose events
// could be stored (err), with their lostAnswers: the status is 200, since
// the calls were taken, and each error is an event without an id.
func (h *Handler) answerUnstored(live *session.Live, ids session.RequestIDs, err error, sw *sseWriter) {
	sw.writeFinal(dataFrames(h.lostAnswers(live, ids, err)))
}

// dataFrames renders msgs as SSE events without ids, one message each.
func dataFrames(msgs []json.RawMessage) []byte {
	var b []byte
	for _, m := range msgs {
		b = append(b, "data: "...)
		b = append(b, m...)
		b = append(b, '\n', '\n')
	}
	return b
}

// callIDs returns the ids of calls.
func callIDs(calls []*jsonrpc.Request) session.RequestIDs {
	ids := make(session.RequestIDs, len(calls))
	for i, c := range calls {
		ids[i] = c.ID
	}
	return ids
}
