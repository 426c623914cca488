// Package wire holds the HTTP details of MCP Streamable HTTP (MCP
// 2025-11-25, basic/transports) that every client of a server needs in the
// same form: the header names, the media types, the headers a request
// carries, the JSON-RPC error body of a refusal, the messages of a JSON
// answer, and draining an answer so that its connection can be reused.
//
// Tidemark's client (package client), the probe (internal/probe), the
// upstream gateway engine (engine/upstream) and the resumption of streams
// (internal/resume) use it. It holds no rule about sessions, streams or
// resumption: those are internal/resume's.
package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Header names of MCP Streamable HTTP (MCP 2025-11-25, basic/transports)
// and of SSE (WHATWG HTML, "Server-sent events").
const (
	// HeaderSession carries the session token.
	HeaderSession = "Mcp-Session-Id"
	// HeaderProtocolVersion carries the negotiated protocol version on
	// every request after initialize (since 2025-06-18).
	HeaderProtocolVersion = "Mcp-Protocol-Version"
	// HeaderLastEventID carries the cursor a GET resumes from.
	HeaderLastEventID = "Last-Event-ID"
	// HeaderMethod carries a request's JSON-RPC method, and HeaderName its
	// name-shaped param (the tool's name; a task's taskId) (SEP-2243,
	// "Standard Headers"; SEP-2663, "Streamable HTTP: Routing Headers").
	HeaderMethod = "Mcp-Method"
	HeaderName   = "Mcp-Name"
)

// Keys of params._meta by which a request of the sessionless era carries
// what a session once held (SEP-2575).
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// Object is a JSON object whose members stay as they were sent: the
// params and _meta that a layer reads a few members of and passes on
// untouched.
type Object map[string]json.RawMessage

// DecodeObject returns raw as an Object; nil for anything that is not a
// JSON object.
func DecodeObject(raw json.RawMessage) Object {
	var o Object
	if len(raw) == 0 || json.Unmarshal(raw, &o) != nil {
		return nil
	}
	return o
}

// Str returns member k of o as a string, "" when it is not one.
func (o Object) Str(k string) string {
	var s string
	if json.Unmarshal(o[k], &s) != nil {
		return ""
	}
	return s
}

// With returns a copy of o (an empty Object for nil) with member k set to
// v; o is unchanged.
func (o Object) With(k string, v json.RawMessage) Object {
	c := o.Clone()
	c[k] = v
	return c
}

// Clone returns a shallow copy of o (an empty Object for nil).
func (o Object) Clone() Object {
	c := make(Object, len(o)+1)
	for k, v := range o {
		c[k] = v
	}
	return c
}

// Media types of MCP Streamable HTTP (MCP 2025-11-25, "Sending Messages to
// the Server").
const (
	// MediaJSON is the type of a POST body and of a single JSON answer.
	MediaJSON = "application/json"
	// MediaSSE is the type of an SSE stream.
	MediaSSE = "text/event-stream"
)

// MaxRefusalBody bounds, in bytes, how much of an error answer
// ReadRefusal reads and how much Drain reads before it closes a body.
const MaxRefusalBody = 64 << 10

// maxMessage bounds, in bytes, the start of a non-JSON error body that
// Refusal.Message keeps.
const maxMessage = 200

// SetMedia sets on h the Content-Type and Accept headers a client sends
// with an HTTP request of method (MCP 2025-11-25, "Sending Messages to the
// Server" and "Listening for Messages from the Server"): for POST,
// Content-Type application/json and Accept listing application/json and
// text/event-stream; for GET, Accept text/event-stream; for any other
// method, nothing.
func SetMedia(h http.Header, method string) {
	switch method {
	case http.MethodPost:
		h.Set("Content-Type", MediaJSON)
		h.Set("Accept", MediaJSON+", "+MediaSSE)
	case http.MethodGet:
		h.Set("Accept", MediaSSE)
	}
}

// NewRequest returns a request of method to url with body (nil: none)
// whose headers are, in this order: every value of extra (for example
// Authorization), then SetMedia's, then Mcp-Session-Id set to session and
// Mcp-Protocol-Version set to version, each only when not "". Headers set
// later replace values of extra with the same name. The error is
// http.NewRequestWithContext's: an invalid method or URL.
func NewRequest(ctx context.Context, method, url string, body []byte, extra http.Header, session, version string) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range extra {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	SetMedia(req.Header, method)
	if session != "" {
		req.Header.Set(HeaderSession, session)
	}
	if version != "" {
		req.Header.Set(HeaderProtocolVersion, version)
	}
	return req, nil
}

// MediaType returns resp's Content-Type without its parameters, in lower
// case; "" when it is absent or does not parse.
func MediaType(resp *http.Response) string {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt
}

// Drain reads what is left of resp's body, up to MaxRefusalBody bytes, and
// closes it, so that a small answer's connection can be reused.
func Drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, MaxRefusalBody))
	resp.Body.Close()
}

// DecodeAnswer decodes the body of an application/json answer (MCP
// 2025-11-25, "Sending Messages to the Server"): one JSON-RPC message, or
// an array of them (the answer to a batch). Each message is decoded by the
// go-sdk's jsonrpc.DecodeMessage; the error is the first one's that fails,
// or the array's.
func DecodeAnswer(body []byte) ([]jsonrpc.Message, error) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, err
		}
		msgs := make([]jsonrpc.Message, 0, len(raws))
		for _, r := range raws {
			m, err := jsonrpc.DecodeMessage(r)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		}
		return msgs, nil
	}
	m, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil, err
	}
	return []jsonrpc.Message{m}, nil
}

// Refusal is an HTTP error answer as a client reads it. Servers that follow
// Tidemark's convention (DESIGN.md, "The replay decision") send a JSON-RPC
// error body with id null, error.message and error.data.reason.
type Refusal struct {
	// Status is the HTTP status code.
	Status int
	// Reason is error.data.reason of a JSON-RPC error body; "" when the
	// body has none.
	Reason string
	// Message is error.message of a JSON-RPC error body; otherwise the
	// start of the body, spaces trimmed, at most 200 bytes, ending in "…"
	// when clipped.
	Message string
	// LostRequests is error.data.lostRequests, which a server (Tidemark
	// does) adds to a 409 on a stream: the JSON-RPC ids, as the client sent
	// them, of the requests that stream carried whose responses the client
	// can no longer receive. Empty when the stream
	// carried none (the standalone GET stream carries none); meaningful
	// only when LostKnown.
	LostRequests []jsonrpc.ID
	// LostKnown reports whether the body held error.data.lostRequests as
	// an array. False when the key is absent (the server cannot tell), null
	// or not an array.
	LostKnown bool
	// RanRequests holds the ids of error.data.answeredRequests and then of
	// error.data.runningRequests, which Tidemark adds to a 409 beside
	// lostRequests: the refused stream's requests that finished in the
	// generation that ended, and those the live generation still runs.
	// Each has run, or runs, on the server, so sending it again runs it
	// twice. Nil when the body has neither.
	RanRequests []jsonrpc.ID
}

// String renders the refusal for an error message: "HTTP 404", then " "
// and the reason, and ": " and the message, each when not empty.
func (r Refusal) String() string {
	s := "HTTP " + strconv.Itoa(r.Status)
	if r.Reason != "" {
		s += " " + r.Reason
	}
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s
}

// ReadRefusal reads up to MaxRefusalBody bytes of resp's body, closes it,
// and returns the refusal it holds. It never fails: a body that cannot be
// read or is not a JSON-RPC error yields its start as Message. An element
// of a list of request ids that is neither a string nor a number is
// skipped.
func ReadRefusal(resp *http.Response) Refusal {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxRefusalBody))
	return ParseRefusal(resp.StatusCode, body)
}

// ParseRefusal returns the refusal an error answer of status with body
// holds, as ReadRefusal does once it has read the body.
func ParseRefusal(status int, body []byte) Refusal {
	r := Refusal{Status: status}
	var env struct {
		Error *struct {
			Message string `json:"message"`
			Data    struct {
				Reason           string          `json:"reason"`
				LostRequests     json.RawMessage `json:"lostRequests"`
				AnsweredRequests json.RawMessage `json:"answeredRequests"`
				RunningRequests  json.RawMessage `json:"runningRequests"`
			} `json:"data"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) != nil || env.Error == nil {
		r.Message = clip(strings.TrimSpace(string(body)))
		return r
	}
	r.Reason, r.Message = env.Error.Data.Reason, env.Error.Message
	d := env.Error.Data
	r.LostRequests, r.LostKnown = requestIDs(d.LostRequests)
	answered, _ := requestIDs(d.AnsweredRequests)
	running, _ := requestIDs(d.RunningRequests)
	if len(answered)+len(running) > 0 {
		r.RanRequests = append(answered, running...)
	}
	return r
}

// requestIDs decodes a list of request ids of error.data (lostRequests,
// answeredRequests, runningRequests): ok is false unless raw is a JSON
// array. Ids are decoded as the go-sdk decodes a message's id (a
// number becomes an integer id, a string a string id), so they compare
// equal to the ids of the requests sent.
func requestIDs(raw json.RawMessage) (ids []jsonrpc.ID, ok bool) {
	var vals []any
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &vals) != nil {
		return nil, false
	}
	ids = make([]jsonrpc.ID, 0, len(vals))
	for _, v := range vals {
		if id, err := jsonrpc.MakeID(v); err == nil && id.IsValid() {
			ids = append(ids, id)
		}
	}
	return ids, true
}

// clip returns s cut to maxMessage bytes at a character boundary, with "…"
// when it was longer.
func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// CancelOnClose returns body, closing which also calls cancel: an answer
// read after its request returned keeps the request's context alive until
// the reader is done with it, then releases it.
func CancelOnClose(body io.ReadCloser, cancel context.CancelFunc) io.ReadCloser {
	return &cancelBody{ReadCloser: body, cancel: cancel}
}

// cancelBody is CancelOnClose's body.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
