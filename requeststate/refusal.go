package requeststate

// This file holds the JSON-RPC errors Open refuses a state with.

import (
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
)

// retryAdvice ends the message of every refusal the client can recover from
// by starting over (MCP 2026-07-28, basic/patterns/mrtr: a client retries
// the original request; without a state the server asks again).
const retryAdvice = "; send the request again without requestState and inputResponses"

// refuse returns the JSON-RPC error of a refused state: code, message and
// error.data holding reason and the extra fields.
func refuse(code int64, reason replay.Reason, message string, extra map[string]any) error {
	data := map[string]any{"reason": reason}
	for k, v := range extra {
		data[k] = v
	}
	raw, err := json.Marshal(data)
	if err != nil {
		raw = nil // the fields are strings; this does not happen
	}
	return &jsonrpc.Error{Code: code, Message: message, Data: raw}
}

// invalid is a refusal with code -32602 (invalid params).
func invalid(reason replay.Reason, message string, extra map[string]any) error {
	return refuse(jsonrpc.CodeInvalidParams, reason, message+retryAdvice, extra)
}

// ReasonOf returns the reason word of a refusal that Open returned (its
// error.data.reason), or "" when err is not such a refusal. It looks
// through wrapping (errors.As).
func ReasonOf(err error) replay.Reason {
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || len(wire.Data) == 0 {
		return ""
	}
	var data struct {
		Reason replay.Reason `json:"reason"`
	}
	if json.Unmarshal(wire.Data, &data) != nil {
		return ""
	}
	return data.Reason
}
