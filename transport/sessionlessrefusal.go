// sessionlessrefusal.go holds the refusals that Options.Sessionless (the
// go-sdk's stateless handler) makes itself in the sessionless era: its
// error answers are held back, and those it writes without a reason
// become refusals of the catalogue, which ServeHTTP writes and counts as
// it does every other.

package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/replay"
)

// maxHeldError is the longest error answer heldError holds back, in
// bytes; a longer one goes out as the handler wrote it. The go-sdk's
// refusals are a line or a JSON-RPC error of a few hundred bytes.
const maxHeldError = 16 << 10

// heldError is an http.ResponseWriter that passes an answer through
// unless its status is 400 or more: such an answer is held back, for
// refusal to turn it into a refusal of the catalogue or, when it is none
// it knows, to send it on as it was written. It keeps http.Flusher and,
// through Unwrap, the rest of http.ResponseController.
type heldError struct {
	w      http.ResponseWriter
	status int    // the status the handler wrote; 0 until it writes
	held   bool   // the answer is an error being held back
	body   []byte // the held answer's body
}

func (e *heldError) Header() http.Header { return e.w.Header() }

func (e *heldError) WriteHeader(status int) {
	if e.status != 0 {
		return // net/http ignores a second status too
	}
	e.status = status
	if status >= http.StatusBadRequest {
		e.held = true
		return
	}
	e.w.WriteHeader(status)
}

func (e *heldError) Write(b []byte) (int, error) {
	if e.status == 0 {
		e.WriteHeader(http.StatusOK)
	}
	if !e.held {
		return e.w.Write(b)
	}
	if len(e.body)+len(b) > maxHeldError {
		if err := e.release(); err != nil {
			return 0, err
		}
		return e.w.Write(b)
	}
	e.body = append(e.body, b...)
	return len(b), nil
}

func (e *heldError) FlushError() error {
	if e.held {
		return nil // flushed when released
	}
	return http.NewResponseController(e.w).Flush()
}

func (e *heldError) Flush() { e.FlushError() }

// Unwrap gives http.ResponseController the writer underneath.
func (e *heldError) Unwrap() http.ResponseWriter { return e.w }

// release sends the held answer on as it was written.
func (e *heldError) release() error {
	if !e.held {
		return nil
	}
	e.held = false
	e.w.WriteHeader(e.status)
	body := e.body
	e.body = nil
	_, err := e.w.Write(body)
	return err
}

// refusal returns the refusal of the catalogue that the held answer is,
// once the handler has returned, or sends the answer on as it was written
// and returns nil when it is none it knows (nothing is held, its error
// has a reason already, or another code: an unknown tool's -32602, an
// unsupported version's -32022). id is the id of the request the body
// holds (null for a notification). The answers it knows:
//   - a JSON-RPC error -32020 (400 header_mismatch: Mcp-Method or
//     Mcp-Name missing or not the body's, MCP 2026-07-28,
//     basic/transports, "Server Validation"), or -32601 with status 404
//     (404 method_not_found, ibid., "Protocol Version Header"), with the
//     handler's message and error.data, and the reason added;
//   - a plain-text 400 (400 invalid_request with the handler's text: a
//     message the go-sdk's checks refuse after decodeMessages let it
//     through, such as a notification's method with an id, or a
//     request's without one).
func (e *heldError) refusal(id jsonrpc.ID) *refusal {
	if !e.held {
		return nil
	}
	if ref := heldRefusal(e.status, e.w.Header().Get("Content-Type"), e.body, id); ref != nil {
		e.held, e.body = false, nil
		// The held body's framing is not the refusal's: a proxy in front
		// of another server (engine/upstream) copies its Content-Length.
		h := e.w.Header()
		h.Del("Content-Length")
		h.Del("Content-Encoding")
		return ref
	}
	e.release()
	return nil
}

// heldRefusal is the refusal an error answer of the go-sdk's handler
// (status, Content-Type, body) is, or nil (heldError.refusal).
func heldRefusal(status int, contentType string, body []byte, id jsonrpc.ID) *refusal {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case mt == "text/plain" && status == http.StatusBadRequest:
		text := string(bytes.TrimSpace(body))
		if len(text) > maxHeldText {
			text = text[:maxHeldText] + "…"
		}
		ref := refuse(replay.ReasonInvalidRequest, text)
		ref.id = id
		return ref
	case mt != mediaJSON:
		return nil
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil
	}
	resp, ok := msg.(*jsonrpc.Response)
	var werr *jsonrpc.Error
	if !ok || !errors.As(resp.Error, &werr) {
		return nil
	}
	var data map[string]any
	if len(werr.Data) > 0 && json.Unmarshal(werr.Data, &data) != nil {
		return nil // error.data that is not an object: no room for a reason
	}
	if _, ok := data["reason"]; ok {
		return nil
	}
	var reason replay.Reason
	switch {
	case werr.Code == mcp.CodeHeaderMismatch && status == http.StatusBadRequest:
		reason = replay.ReasonHeaderMismatch
	case werr.Code == jsonrpc.CodeMethodNotFound && status == http.StatusNotFound:
		reason = replay.ReasonMethodNotFound
	default:
		return nil
	}
	ref := refuse(reason, werr.Message)
	ref.id = resp.ID
	ref.data = data
	return ref
}

// maxHeldText is the most of a plain-text refusal's text kept as the
// message of its invalid_request, in bytes.
const maxHeldText = 512
