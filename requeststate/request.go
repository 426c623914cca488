package requeststate

// This file holds what a state is bound to: the request that received it,
// identified by its principal, method, target and arguments.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// digestSize is the length, in bytes, of the principal and request digests a
// sealed state carries: 128 bits, so that finding another request with the
// same digest costs 2^128 tries.
const digestSize = 16

// Request identifies the request a state is sealed for and may be opened
// with: a retry must carry the same principal, method, target and
// arguments as the request that received the state (MCP 2026-07-28,
// basic/patterns/mrtr: the client retries the original request).
// ToolCall, PromptGet and ResourceRead build it from go-sdk requests.
type Request struct {
	// Principal is who sent the request: the go-sdk auth.TokenInfo.UserID
	// of the authenticated caller, "" when it is not authenticated.
	Principal string
	// Method is the JSON-RPC method: "tools/call", "prompts/get" or
	// "resources/read".
	Method string
	// Target is what the request names: the tool's or the prompt's name,
	// or the resource's URI.
	Target string
	// Arguments is the request's arguments as JSON. Its canonical form is
	// compared (object keys sorted, insignificant white space removed, each
	// number as written), so a client that re-encodes the same arguments
	// matches; absent, null and {} are the same.
	Arguments json.RawMessage
}

// ToolCall returns the Request of a tools/call: its principal, its tool name
// and its arguments.
func ToolCall(req *mcp.CallToolRequest) Request {
	r := Request{Principal: principal(req.Extra), Method: "tools/call"}
	if req.Params != nil {
		r.Target, r.Arguments = req.Params.Name, req.Params.Arguments
	}
	return r
}

// PromptGet returns the Request of a prompts/get: its principal, its prompt
// name and its arguments.
func PromptGet(req *mcp.GetPromptRequest) Request {
	r := Request{Principal: principal(req.Extra), Method: "prompts/get"}
	if req.Params != nil {
		r.Target = req.Params.Name
		if len(req.Params.Arguments) > 0 {
			r.Arguments, _ = json.Marshal(req.Params.Arguments) // a map of strings always marshals
		}
	}
	return r
}

// ResourceRead returns the Request of a resources/read: its principal and
// its URI.
func ResourceRead(req *mcp.ReadResourceRequest) Request {
	r := Request{Principal: principal(req.Extra), Method: "resources/read"}
	if req.Params != nil {
		r.Target = req.Params.URI
	}
	return r
}

func principal(extra *mcp.RequestExtra) string {
	if extra == nil || extra.TokenInfo == nil {
		return ""
	}
	return extra.TokenInfo.UserID
}

// principalDigest is what a state carries of its principal.
func (r Request) principalDigest() []byte {
	return digest("principal", []byte(r.Principal))
}

// requestDigest is what a state carries of its request: method, target and
// canonical arguments, each length-prefixed so no two requests encode alike.
func (r Request) requestDigest() []byte {
	return digest("request", []byte(r.Method), []byte(r.Target), canonicalJSON(r.Arguments))
}

func digest(domain string, parts ...[]byte) []byte {
	h := sha256.New()
	h.Write([]byte("tidemark requeststate " + domain + "\x00"))
	for _, p := range parts {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(p))))
		h.Write(p)
	}
	return h.Sum(nil)[:digestSize]
}

// canonicalJSON re-encodes raw with encoding/json: object keys sorted,
// white space removed, numbers kept as written. Absent and null arguments
// are the empty object. Text that is not JSON is compared as it is.
func canonicalJSON(raw json.RawMessage) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}
