package transport

import (
	"strings"
	"testing"
)

// TestRepeatedMember: the routed members a message repeats are found
// however the JSON around them is written (white space, escapes in keys,
// quotes and backslashes escaped in strings, short or long, nesting), and members of the
// same names deeper in the message, or inside strings, are not routed.
func TestRepeatedMember(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, ""},
		{`{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, "id"},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}`, "method"},
		{` { "jsonrpc" : "2.0" , "id" : 1 , "jsonrpc" : "2.0" } `, "jsonrpc"},
		{`{"jsonrpc":"2.0","\u0069d":1,"id":2}`, "id"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}`, "params.name"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","n\u0061me":"b"}}`, "params.name"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"name":"b","name":"c"}}}`, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"text":"\"id\":2,\"id\":3"}}`, ""},
		{`{"jsonrpc":"2.0","id":"\\","method":"x","id":"\\\""}`, "id"},
		{`{"jsonrpc":"2.0","id":"a\\\\","method":"x","params":{"s":"\\\"}\\","name":"n"},"params":{}}`, "params"},
		{`{"jsonrpc":"2.0","method":"x","params":[{"id":1},{"id":2}],"id":[1,{"id":"}"}]}`, ""},
		{`{"jsonrpc":"2.0","method":"x","params":{"a":[1,2,{"b":"]"}],"name":"q"},"id":-1.5e3,"id":true}`, "id"},
		{`{"jsonrpc":"2.0","method":"x","params":{"text":"pppppppppppppppppppppppp\"id\":2,\"id\":3 pppppppppppppppppppp\\"},"id":1}`, ""},
		{`{"jsonrpc":"2.0","method":"x","params":{"text":"pppppppppppppppppppppppp\\\\"},"id":1,"params":{}}`, "params"},
		{`[{"id":1},{"id":2}]`, ""},
		{`"id"`, ""},
	} {
		if got := repeatedMember([]byte(tc.raw)); got != tc.want {
			t.Errorf("repeatedMember(%s) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// BenchmarkRepeatedMember measures the scan for repeated routed members
// (repeatedMember) over 4 MiB bodies: one string (an echo of text), one
// string of escaped quotes, an array of small numbers, and params of
// many members; its MB/s gives the cost per MiB of a body.
func BenchmarkRepeatedMember(b *testing.B) {
	const size = 4 << 20
	for _, bc := range []struct {
		name string
		body []byte
	}{
		{"string", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", size) + `"}}}`)},
		{"escapes", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat(`x\"`, size/3) + `"}}}`)},
		{"numbers", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"pad":[` + strings.Repeat("0,", size/2) + `0]}}}`)},
		{"members", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + strings.Repeat(`"pad":0,`, size/8) + `"name":"echo"}}`)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if name := repeatedMember(bc.body); name != "" {
					b.Fatalf("repeatedMember = %q, want none", name)
				}
			}
		})
	}
}
