// members.go holds the rule on members a JSON-RPC message repeats: the
// members that Tidemark, the go-sdk and intermediaries route on must
// appear once.

package transport

import (
	"bytes"
	"encoding/json"
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
	if name := repeatedOf(raw, routedMembers, func(name string, value []byte) {
		if name == "params" {
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
// for each member of names it reads before. It compares each member's
// name in place, decoding only a name written with escapes: an object of
// many members costs no allocation per member.
func repeatedOf(b []byte, names []string, visit func(name string, value []byte)) string {
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
		key := b[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			json.Unmarshal(b[i:end], &k) // valid JSON: it decodes
			key = []byte(k)
		}
		i = skipSpace(b, end) + 1 // past the colon
		i = skipSpace(b, i)
		end = skipValue(b, i)
		if k := indexOf(names, key); k >= 0 {
			if seen[k] {
				return names[k]
			}
			seen[k] = true
			if visit != nil {
				visit(names[k], b[i:end])
			}
		}
		i = end
	}
}

// indexOf returns the index of key in names, or -1.
func indexOf(names []string, key []byte) int {
	for k, name := range names {
		if string(key) == name { // compared without a copy
			return k
		}
	}
	return -1
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
			i = closingQuote(b, i)
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

// closingQuote returns the index of the quote that closes the JSON string
// whose opening quote is at b[i], or len(b) when none does. It reads the
// string byte by byte, a backslash escaping the byte after it, plainRun
// bytes at a time, as a short string or one dense with escapes needs; once
// such a run held no quote and no backslash, the string is taken for long
// text, and it looks for the next quote with bytes.IndexByte, a vector
// search: that quote is escaped when an odd number of backslashes
// precedes it, and the reading then goes on after it, byte by byte.
func closingQuote(b []byte, i int) int {
	for i++; i < len(b); {
		plain := true
		for end := min(i+plainRun, len(b)); i < end; i++ {
			switch b[i] {
			case '"':
				return i
			case '\\':
				i++ // the escaped byte
				plain = false
			}
		}
		if !plain || i >= len(b) {
			continue
		}
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			break
		}
		i += j
		n := 0
		for k := i - 1; b[k] == '\\'; k-- { // inside the string, which opens with a quote
			n++
		}
		if n%2 == 0 {
			return i
		}
		i++
	}
	return len(b)
}

// plainRun is how many bytes of a string closingQuote reads one by one
// before it may search for its closing quote: a string shorter than it
// (a member's name, most values) costs no search.
const plainRun = 16
