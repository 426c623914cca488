package wire

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
)

func TestNewRequestHeaders(t *testing.T) {
	extra := http.Header{"Authorization": {"Bearer x"}, "Accept": {"text/plain"}, "Mcp-Session-Id": {"stale"}}
	for _, tc := range []struct {
		method, session, version string
		want                     map[string][]string
	}{
		{http.MethodPost, "tok", "2025-11-25", map[string][]string{
			"Authorization": {"Bearer x"}, "Content-Type": {"application/json"},
			"Accept": {"application/json, text/event-stream"}, "Mcp-Session-Id": {"tok"}, "Mcp-Protocol-Version": {"2025-11-25"}}},
		{http.MethodGet, "tok", "", map[string][]string{
			"Authorization": {"Bearer x"}, "Accept": {"text/event-stream"}, "Mcp-Session-Id": {"tok"}}},
		{http.MethodDelete, "", "2025-06-18", map[string][]string{
			"Authorization": {"Bearer x"}, "Accept": {"text/plain"}, "Mcp-Session-Id": {"stale"}, "Mcp-Protocol-Version": {"2025-06-18"}}},
	} {
		req, err := NewRequest(t.Context(), tc.method, "http://127.0.0.1:1/mcp", nil, extra, tc.session, tc.version)
		if err != nil {
			t.Fatal(err)
		}
		if len(req.Header) != len(tc.want) {
			t.Errorf("%s headers = %v, want %v", tc.method, req.Header, tc.want)
		}
		for k, v := range tc.want {
			if got := req.Header.Values(k); !slices.Equal(got, v) {
				t.Errorf("%s %s = %q, want %q", tc.method, k, got, v)
			}
		}
		if req.Body != nil {
			t.Errorf("%s with nil body has a body", tc.method)
		}
	}
	req, err := NewRequest(t.Context(), http.MethodPost, "http://127.0.0.1:1/mcp", []byte(`{"x":1}`), nil, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(req.Body); string(b) != `{"x":1}` || req.ContentLength != 7 {
		t.Errorf("body = %q (length %d), want {\"x\":1} (7)", b, req.ContentLength)
	}
	if _, err := NewRequest(t.Context(), "BAD METHOD", "http://127.0.0.1:1/mcp", nil, nil, "", ""); err == nil {
		t.Error("NewRequest with an invalid method: nil error")
	}
}

func response(status int, contentType, body string) *http.Response {
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

func TestMediaType(t *testing.T) {
	for in, want := range map[string]string{
		"text/event-stream":               MediaSSE,
		"Application/JSON; charset=utf-8": MediaJSON,
		"":                                "",
		"not a media type;;":              "",
	} {
		if got := MediaType(response(200, in, "")); got != want {
			t.Errorf("MediaType(%q) = %q, want %q", in, got, want)
		}
	}
}

func id(v any) jsonrpc.ID {
	i, err := jsonrpc.MakeID(v)
	if err != nil {
		panic(err)
	}
	return i
}

// notFound is a reason word as a server sends it.
const notFound = string(replay.ReasonSessionNotFound)

func TestReadRefusal(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	for _, tc := range []struct {
		name string
		body string
		want Refusal
	}{
		{"reason and message", `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"gone","data":{"reason":"` + notFound + `"}}}`,
			Refusal{Status: 409, Reason: notFound, Message: "gone"}},
		{"lost ids of both kinds", `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"m","data":{"reason":"` + notFound + `","lostRequests":[3,"a-7",12.0]}}}`,
			Refusal{Status: 409, Reason: notFound, Message: "m", LostKnown: true,
				LostRequests: []jsonrpc.ID{id(float64(3)), id("a-7"), id(float64(12))}}},
		{"no lost requests", `{"error":{"message":"m","data":{"lostRequests":[]}}}`,
			Refusal{Status: 409, Message: "m", LostKnown: true, LostRequests: []jsonrpc.ID{}}},
		{"lost requests null", `{"error":{"message":"m","data":{"lostRequests":null}}}`,
			Refusal{Status: 409, Message: "m"}},
		{"lost requests not an array", `{"error":{"message":"m","data":{"lostRequests":3}}}`,
			Refusal{Status: 409, Message: "m"}},
		{"invalid ids skipped", `{"error":{"message":"m","data":{"lostRequests":[null,{"a":1},true,5]}}}`,
			Refusal{Status: 409, Message: "m", LostKnown: true, LostRequests: []jsonrpc.ID{id(float64(5))}}},
		{"answered and running", `{"error":{"message":"m","data":{"reason":"cursor_compacted","lostRequests":[],"answeredRequests":[8,"b"],"runningRequests":[7]}}}`,
			Refusal{Status: 409, Reason: "cursor_compacted", Message: "m", LostKnown: true, LostRequests: []jsonrpc.ID{},
				RanRequests: []jsonrpc.ID{id(float64(8)), id("b"), id(float64(7))}}},
		{"running only", `{"error":{"message":"m","data":{"runningRequests":[7],"answeredRequests":null}}}`,
			Refusal{Status: 409, Message: "m", RanRequests: []jsonrpc.ID{id(float64(7))}}},
		{"empty ran lists", `{"error":{"message":"m","data":{"answeredRequests":[],"runningRequests":[]}}}`,
			Refusal{Status: 409, Message: "m"}},
		{"plain text", "  Method Not Allowed\n", Refusal{Status: 409, Message: "Method Not Allowed"}},
		{"long text clipped at a character", long, Refusal{Status: 409, Message: strings.Repeat("é", 100) + "…"}},
		{"JSON without error", `{"result":{}}`, Refusal{Status: 409, Message: `{"result":{}}`}},
	} {
		got := ReadRefusal(response(409, MediaJSON, tc.body))
		if got.Status != tc.want.Status || got.Reason != tc.want.Reason || got.Message != tc.want.Message ||
			got.LostKnown != tc.want.LostKnown || !slices.Equal(got.LostRequests, tc.want.LostRequests) ||
			(got.LostRequests == nil) != (tc.want.LostRequests == nil) ||
			!slices.Equal(got.RanRequests, tc.want.RanRequests) || (got.RanRequests == nil) != (tc.want.RanRequests == nil) {
			t.Errorf("%s: ReadRefusal = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestReadRefusalBounded: a body larger than MaxRefusalBody is read up to
// the bound, and the body is closed.
func TestReadRefusalBounded(t *testing.T) {
	body := &countingBody{r: strings.NewReader(strings.Repeat("x", 3*MaxRefusalBody))}
	r := ReadRefusal(&http.Response{StatusCode: 500, Header: http.Header{}, Body: body})
	if body.read != MaxRefusalBody || !body.closed {
		t.Errorf("read %d bytes, closed %v; want %d, true", body.read, body.closed, MaxRefusalBody)
	}
	if r.Status != 500 || r.Message != strings.Repeat("x", maxMessage)+"…" {
		t.Errorf("ReadRefusal = %+v", r)
	}
	body = &countingBody{r: strings.NewReader(strings.Repeat("x", 3*MaxRefusalBody))}
	Drain(&http.Response{Body: body})
	if body.read != MaxRefusalBody || !body.closed {
		t.Errorf("Drain read %d bytes, closed %v; want %d, true", body.read, body.closed, MaxRefusalBody)
	}
}

type countingBody struct {
	r      io.Reader
	read   int
	closed bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *countingBody) Close() error { b.closed = true; return nil }

func TestRefusalString(t *testing.T) {
	for _, tc := range []struct {
		r    Refusal
		want string
	}{
		{Refusal{Status: 404}, "HTTP 404"},
		{Refusal{Status: 409, Reason: notFound}, "HTTP 409 " + notFound},
		{Refusal{Status: 400, Message: "bad"}, "HTTP 400: bad"},
		{Refusal{Status: 400, Reason: notFound, Message: "beyond 12"}, "HTTP 400 " + notFound + ": beyond 12"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.r, got, tc.want)
		}
	}
}

// TestDecodeAnswer: a JSON answer is one message or an array of them, in
// order; anything else is an error.
func TestDecodeAnswer(t *testing.T) {
	msgs, err := DecodeAnswer([]byte(` {"jsonrpc":"2.0","id":1,"result":{}} `))
	if err != nil || len(msgs) != 1 {
		t.Fatalf("one message: %v, %v", msgs, err)
	}
	if r, ok := msgs[0].(*jsonrpc.Response); !ok || r.ID.Raw() != int64(1) {
		t.Errorf("one message decoded as %#v, want the response to id 1", msgs[0])
	}
	msgs, err = DecodeAnswer([]byte(`[{"jsonrpc":"2.0","id":"a","result":{}},{"jsonrpc":"2.0","method":"notifications/message","params":{}}]`))
	if err != nil || len(msgs) != 2 {
		t.Fatalf("an array: %v, %v", msgs, err)
	}
	if r, ok := msgs[0].(*jsonrpc.Response); !ok || r.ID.Raw() != "a" {
		t.Errorf("first of the array %#v, want the response to id a", msgs[0])
	}
	if n, ok := msgs[1].(*jsonrpc.Request); !ok || n.Method != "notifications/message" {
		t.Errorf("second of the array %#v, want notifications/message", msgs[1])
	}
	for _, bad := range []string{``, `[1]`, `{"id":1}`, `[{"jsonrpc":"2.0","id":1,"result":{}},`} {
		if msgs, err := DecodeAnswer([]byte(bad)); err == nil {
			t.Errorf("DecodeAnswer(%q) = %v, want an error", bad, msgs)
		}
	}
}

// TestObject checks the members an Object keeps as sent, what DecodeObject
// refuses, and that With and Clone leave the original as it was.
func TestObject(t *testing.T) {
	for _, raw := range []string{``, `null`, `[1]`, `"x"`, `{`} {
		if o := DecodeObject(json.RawMessage(raw)); o != nil {
			t.Errorf("DecodeObject(%q) = %v, want nil", raw, o)
		}
	}
	o := DecodeObject(json.RawMessage(`{"name":"countdown","n":3,"meta":{"a": 1}}`))
	if got := o.Str("name"); got != "countdown" {
		t.Errorf(`Str("name") = %q, want "countdown"`, got)
	}
	if got := o.Str("n") + o.Str("missing"); got != "" {
		t.Errorf(`Str of a number and of a missing member = %q, want ""`, got)
	}
	if got := string(o["meta"]); got != `{"a": 1}` {
		t.Errorf("member kept as %s, want it as sent", got)
	}
	w := o.With("n", json.RawMessage(`4`))
	if string(w["n"]) != `4` || string(o["n"]) != `3` || len(w) != 3 {
		t.Errorf("With: copy n=%s (len %d), original n=%s; want 4 (len 3), 3", w["n"], len(w), o["n"])
	}
	var none Object
	if c := none.With("k", json.RawMessage(`true`)); len(c) != 1 || string(c["k"]) != `true` {
		t.Errorf("With on nil = %v, want {k: true}", c)
	}
}
