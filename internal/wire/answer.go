// answer.go reads one request's response out of a POST's answer, JSON or
// SSE, for the callers that wait for that response alone (a handshake, a
// probe) and never resume the stream.

package wire

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/replay"
)

// ReadResponse returns the response to request id in resp's body: from
// an SSE stream (MCP 2025-11-25, "Sending Messages to the Server"),
// skipping events without data (priming) and the messages before it, or
// from an application/json body (DecodeAnswer). max bounds an event, or
// the JSON body, in bytes. Errors: a message that does not decode, a
// stream that ends first (io.ErrUnexpectedEOF), a body without the
// response. It does not close the body.
func ReadResponse(resp *http.Response, id jsonrpc.ID, max int) (*jsonrpc.Response, error) {
	if MediaType(resp) == MediaSSE {
		rd := sse.NewReader(resp.Body, max)
		for {
			ev, err := rd.Next()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return nil, err
			}
			if len(ev.Data) == 0 {
				continue
			}
			m, err := jsonrpc.DecodeMessage(ev.Data)
			if err != nil {
				return nil, err
			}
			if r, ok := m.(*jsonrpc.Response); ok && r.ID == id {
				return r, nil
			}
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(max)))
	if err != nil {
		return nil, err
	}
	msgs, err := DecodeAnswer(body)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if r, ok := m.(*jsonrpc.Response); ok && r.ID == id {
			return r, nil
		}
	}
	return nil, errors.New("the answer holds no response to the request")
}

// EndedByDelete reports whether msg, the message of ev, is the answer a
// Tidemark server ends a request's stream with when the request's session
// ended before the request was answered, by DELETE or by a new initialize
// that named its token: a JSON-RPC error response whose error.data.reason
// is replay.ReasonDeleted or replay.ReasonSuperseded, in an event with no
// id (it is not stored, and a resume of the stream answers 404
// session_not_found). A reader that resumes streams takes it for the
// stream's end: its resume then reports the session lost, as any other
// end of an ended session's stream does.
func EndedByDelete(ev sse.Event, msg jsonrpc.Message) bool {
	r, ok := msg.(*jsonrpc.Response)
	if !ok || ev.HasID || r.Error == nil {
		return false
	}
	var we *jsonrpc.Error
	if !errors.As(r.Error, &we) || len(we.Data) == 0 {
		return false
	}
	var data struct {
		Reason replay.Reason `json:"reason"`
	}
	return json.Unmarshal(we.Data, &data) == nil && (data.Reason == replay.ReasonDeleted || data.Reason == replay.ReasonSuperseded)
}
