// decode.go holds the decoding of a POST body into JSON-RPC messages
// (JSON-RPC 2.0; MCP 2025-11-25, basic): the nesting limit, the batch
// rules, the shape of each message and the rules for its id.

package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
)

// maxNesting is the deepest nesting of arrays and objects in one message
// that the go-sdk's decoder (jsonrpc.DecodeMessage, v1.8.0) accepts.
const maxNesting = 1000

// maxExactID is the largest integer id magnitude that survives decoding as
// a JSON number into a float64 (2^53): the go-sdk decodes ids that way, and
// an id it rounds would come back to the client as another id.
const maxExactID = 1 << 53

// decodeMessages decodes a POST body: one JSON-RPC message, or a non-empty
// array of at most maxBatch of them when the protocol version allows
// batches (2025-03-26, which is also the version assumed when the header
// is absent). It reports whether the body was a batch. Refusals, in this
// order: 400 parse_error for an empty body, one nested deeper than
// maxNesting, or one that is not JSON; 400 batch_not_allowed; 400
// invalid_request for an empty batch; 400 batch_too_large for a batch of
// more than maxBatch messages; 400 invalid_request for a message that is
// not JSON-RPC 2.0, or an id MCP forbids.
//
// The batch is counted before any of its messages is decoded: the go-sdk
// decoder (jsonrpc.DecodeMessage, v1.8.0) allocates a 32 KiB read buffer
// for each JSON value it decodes, two for a request or notification,
// whatever the message's size: a body of small messages costs far more to
// decode than its length says, and only a bound on their number bounds
// that work.
func decodeMessages(body []byte, version string, maxBatch int) ([]jsonrpc.Message, bool, *refusal) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, false, refuse(replay.ReasonParseError, "request body is empty")
	}
	batch := trimmed[0] == '['
	// The depth is the body's, whatever its top level: a batch's own array
	// counts, so that a body too deep is a parse error before anything
	// judges it as a batch or a message.
	if depth := nesting(trimmed); depth > maxNesting {
		what := "message"
		if batch {
			what = "body"
		}
		return nil, false, refuse(replay.ReasonParseError, fmt.Sprintf(
			"the %s nests arrays and objects %d levels deep; at most %d are accepted (the MCP SDK decoder's limit)", what, depth, maxNesting))
	}
	if !json.Valid(trimmed) {
		return nil, false, refuse(replay.ReasonParseError, "request body is not valid JSON")
	}
	if !batch {
		m, ref := decodeMessage(trimmed)
		if ref != nil {
			return nil, false, ref
		}
		return []jsonrpc.Message{m}, false, nil
	}
	if version >= V20250618 {
		return nil, false, refuse(replay.ReasonBatchNotAllowed, "JSON-RPC batches are not allowed under protocol version "+version)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(trimmed, &raws); err != nil || len(raws) == 0 {
		return nil, false, refuse(replay.ReasonInvalidRequest, "a batch must be a non-empty array of messages")
	}
	if len(raws) > maxBatch {
		return nil, false, refuse(replay.ReasonBatchTooLarge, fmt.Sprintf(
			"a batch of %d messages is more than the %d one batch may hold: it can never be accepted; send at most %d messages per batch",
			len(raws), maxBatch, maxBatch))
	}
	msgs := make([]jsonrpc.Message, 0, len(raws))
	for _, raw := range raws {
		m, ref := decodeMessage(raw)
		if ref != nil {
			return nil, false, ref
		}
		msgs = append(msgs, m)
	}
	return msgs, batch, nil
}

// decodeMessage decodes one JSON-RPC message (jsonrpc.DecodeMessage) and
// checks what the decoder lets through, each a 400 invalid_request: a
// request with an empty method; initialize without an id, which is a
// request (MCP 2025-11-25, lifecycle); a response with no id, with neither
// a result nor an error, or with both (JSON-RPC 2.0, section 5); an id MCP
// forbids (checkID). Before it decodes, a routed member that appears twice
// (repeatedMember: jsonrpc, id, method, params, params.name). A message the decoder refuses is refused with what
// invalidMessage finds wrong in it.
func decodeMessage(raw json.RawMessage) (jsonrpc.Message, *refusal) {
	if name := repeatedMember(raw); name != "" {
		return nil, refuse(replay.ReasonInvalidRequest, "the member "+quote(name)+
			" appears more than once: parsers keep different ones, so send it once")
	}
	m, err := jsonrpc.DecodeMessage(raw)
	if err != nil {
		return nil, refuse(replay.ReasonInvalidRequest, invalidMessage(raw))
	}
	var id jsonrpc.ID
	switch m := m.(type) {
	case *jsonrpc.Request:
		switch {
		case m.Method == "":
			return nil, refuse(replay.ReasonInvalidRequest, "a request must have a method")
		case m.Method == methodInitialize && !m.IsCall():
			return nil, refuse(replay.ReasonInvalidRequest, `initialize is a request: send it with an "id" (MCP 2025-11-25, lifecycle)`)
		}
		id = m.ID
	case *jsonrpc.Response:
		switch {
		case m.Result == nil && m.Error == nil:
			return nil, refuse(replay.ReasonInvalidRequest, `the message has no "method" (a request or notification) and no "result" or "error" (a response)`)
		case m.Result != nil && m.Error != nil:
			return nil, refuse(replay.ReasonInvalidRequest, `a response has a "result" or an "error", never both (JSON-RPC 2.0, section 5)`)
		}
		id = m.ID
	}
	if !idSurvived(raw, id) {
		if err := checkID(raw); err != nil {
			return nil, refuse(replay.ReasonInvalidRequest, err.Error())
		}
	}
	return m, nil
}

// methodInitialize is the method of the request that opens a session (MCP
// 2025-11-25, lifecycle).
const methodInitialize = "initialize"

// invalidMessage says, in the terms of JSON-RPC 2.0 (sections 4 and 5),
// why raw, a JSON value the go-sdk decoder refused, is not a JSON-RPC 2.0
// message: the member that is missing or of the wrong type, with the type
// it must have. It reads only the JSON types of the members (the decoding
// stays the go-sdk's), so that the client reads what to change rather
// than the decoder's Go types.
func invalidMessage(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if kind := jsonKind(raw); kind != "an object" {
		return "a JSON-RPC message is a JSON object, not " + kind
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return "not a JSON-RPC 2.0 message"
	}
	version, hasVersion := members["jsonrpc"]
	var tag string
	switch {
	case !hasVersion:
		return `the member "jsonrpc" is missing: it must be "2.0"`
	case json.Unmarshal(version, &tag) != nil:
		return `the member "jsonrpc" must be "2.0", not ` + jsonKind(version)
	case tag != "2.0":
		return `the member "jsonrpc" must be "2.0", not ` + quote(tag)
	}
	if id, ok := members["id"]; ok {
		if kind := jsonKind(id); kind != "a string" && kind != "a number" && kind != "null" {
			return `the member "id" must be a string or an integer, not ` + kind
		}
	}
	if method, ok := members["method"]; ok {
		if kind := jsonKind(method); kind != "a string" {
			return `the member "method" must be a string, not ` + kind
		}
	}
	if e, ok := members["error"]; ok && !isErrorObject(e) {
		return `the member "error" must be an object with an integer "code" and a string "message"`
	}
	if _, ok := members["method"]; !ok {
		if id, ok := members["id"]; !ok || jsonKind(id) == "null" {
			return `a response needs the "id" of the request it answers`
		}
	}
	return "not a JSON-RPC 2.0 message"
}

// isErrorObject reports whether raw is a JSON-RPC error object as far as
// its members' types go: an object whose code, when present, is an
// integer and whose message, when present, is a string (JSON-RPC 2.0,
// section 5.1).
func isErrorObject(raw json.RawMessage) bool {
	var e map[string]json.RawMessage
	if jsonKind(raw) != "an object" || json.Unmarshal(raw, &e) != nil {
		return false
	}
	if code, ok := e["code"]; ok && !isInteger(bytes.TrimSpace(code)) {
		return false
	}
	if msg, ok := e["message"]; ok && jsonKind(msg) != "a string" {
		return false
	}
	return true
}

// jsonKind names the JSON type of the valid JSON value raw as a message
// to a client says it: "an object", "an array", "a string", "a number",
// "a boolean" or "null".
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// nesting returns the deepest nesting of arrays and objects in b, not
// counting brackets inside strings. b need not be valid JSON.
func nesting(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			// Skip the string: to the next quote not escaped.
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// idSurvived reports, without decoding raw again, whether id (as the
// go-sdk decoded it) is plainly the id the client sent: a string, an
// integer within ±2^53 that appears as `"id":N` in raw, the only "id" in
// it, or no id where raw has no "id" at all. Anything else (white space
// around the colon, an exponent, a fraction, null, an "id" inside params)
// goes to checkID, which decodes the id exactly.
func idSurvived(raw []byte, id jsonrpc.ID) bool {
	switch v := id.Raw().(type) {
	case string:
		return true
	case int64:
		if v > maxExactID || v < -maxExactID {
			return false
		}
		var buf [32]byte
		key := strconv.AppendInt(append(buf[:0], `"id":`...), v, 10)
		i := bytes.Index(raw, key)
		if i < 0 || i+len(key) >= len(raw) || bytes.Count(raw, []byte(`"id"`)) != 1 {
			return false // absent, or maybe not the top-level key
		}
		switch raw[i+len(key)] {
		case ',', '}', ' ', '\t', '\r', '\n':
			return true
		}
		return false
	case nil:
		return !bytes.Contains(raw, []byte(`"id"`))
	}
	return false
}

// checkID refuses the ids MCP forbids or the decoder would alter: MCP
// 2025-11-25 (basic, "Requests") requires a string or integer id that is
// not null; a fractional number, or an integer beyond ±2^53, would be
// answered under a different id.
func checkID(raw json.RawMessage) error {
	var env struct {
		ID json.RawMessage `json:"id"` // "null" when null, empty when absent
	}
	if json.Unmarshal(raw, &env) != nil {
		return nil // not an object: the decoder judges it
	}
	id := bytes.TrimSpace(env.ID)
	switch {
	case len(id) == 0:
		return nil // no id: a notification
	case string(id) == "null":
		return fmt.Errorf("the id is null: MCP requires a string or an integer id")
	case id[0] == '"':
		return nil
	}
	if !isInteger(id) {
		return fmt.Errorf("the id %s is not a string or an integer", quote(string(id)))
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil || n > maxExactID || n < -maxExactID {
		return fmt.Errorf("the id %s is beyond ±2^53: send large ids as strings", quote(string(id)))
	}
	return nil
}

// isInteger reports whether b is a JSON number written as an integer: an
// optional minus sign and digits, no fraction and no exponent.
func isInteger(b []byte) bool {
	b = bytes.TrimPrefix(b, []byte("-"))
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
