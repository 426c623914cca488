// members.go holds the rule on members a JSON-RPC message repeats: the
// members that Tidemark, the go-sdk and intermediaries route on must
// appear once.

package transport

import (
	"encoding/json"
	"slices"
)

// routedMembers are the members of a message that something routes on:
// the JSON-RPC envelope (jsonrpc, id, method, params) and the name a
// tools/call or prompts/get names in params (MCP 2026-07-28,
// basic/transports, "Standard Request Headers": Mcp-Name repeats it).
var (
	routedMembers = []string{"jsonrpc", "id", "method", "params"}
	routedParams  = []string{"name"}
)

// repeatedMember returns the name of a routed member that raw, a valid
// JSON value, holds more than once ("params.name" for params' name), or
// "". JSON leaves repeated names to the parser (RFC 8259, section 4): the
// go-sdk's decoder keeps the last, another parser the first, and a
// gateway routing on the first while the server acts on the last is what
// the rule on repeated Mcp-Method and Mcp-Name headers forbids (MCP
// 2026-07-28, basic/transports, "Server Validation").
func repeatedMember(raw []byte) string {
	var params []byte
	if name := repeatedOf(raw, routedMembers, func(key string, value []byte) {
		if key == "params" {
			params = value
		}
	}); name != "" {
		return name
	}
	if name := repeatedOf(params, routedParams, nil); name != "" {
		return "params." + name
	}
	return ""
}

// repeatedOf returns the first of names that the object b (valid JSON;
// anything else has no members) holds twice, calling visit, when not nil,
// for each member it reads before.
func repeatedOf(b []byte, names []string, visit func(key string, value []byte)) string {
	seen := make([]bool, len(names))
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return ""
	}
	for i++; ; {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] == '}' {
			return ""
		}
		if b[i] == ',' {
			i++
			continue
		}
		end := skipValue(b, i)
		key := string(b[i+1 : end-1])
		if slices.Contains([]byte(key), '\\') {
			json.Unmarshal(b[i:end], &key) // valid JSON: it decodes
		}
		i = skipSpace(b, end) + 1 // past the colon
		i = skipSpace(b, i)
		end = skipValue(b, i)
		if k := slices.Index(names, key); k >= 0 {
			if seen[k] {
				return key
			}
			seen[k] = true
		}
		if visit != nil {
			visit(key, b[i:end])
		}
		i = end
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value of valid JSON b
// that starts at i.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i
			}
		case ',', ' ', '\t', '\r', '\n', ':':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}
