// Package mcptest speaks raw MCP Streamable HTTP (MCP 2025-11-25,
// basic/transports) to a server, for tests: it initializes a session, POSTs
// JSON-RPC messages and reads the SSE events of the answer (with package
// internal/sse), resumes a stream with GET and Last-Event-ID, DELETEs the
// session, and parses the JSON-RPC error bodies of refusals with their
// `error.data.reason`. For the sessionless era (MCP 2026-07-28) it builds
// request bodies with their _meta and opens listen streams up to their
// acknowledgment (sessionless.go).
//
// It is deliberately thin: every request is an ordinary *http.Request the
// test may alter before sending (NewRequest, then Do), every refusal comes
// back as a *StatusError holding the exact status, headers and body, and
// nothing is retried. It works against any base URL with any *http.Client:
// an httptest server, a `tidemark serve` process, or a proxy in between.
//
// JSON-RPC messages are the go-sdk's jsonrpc types, encoded and decoded by
// the go-sdk; only the error envelope of an HTTP refusal, whose id is null
// (which jsonrpc.DecodeMessage rejects), is decoded here.
package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
)

// DefaultProtocolVersion is the protocol version Initialize offers when
// given "".
const DefaultProtocolVersion = "2025-11-25"

// maxErrorBody bounds, in bytes, how much of a refusal's body is read.
const maxErrorBody = 1 << 20

// Client sends requests to one MCP endpoint.
type Client struct {
	// URL is the endpoint, e.g. "http://127.0.0.1:8080/mcp".
	URL string
	// HTTP sends the requests. Nil: http.DefaultClient. Give each test its
	// own client (and close its idle connections) when checking for leaks.
	HTTP *http.Client
	// Header is added to every request, e.g. Authorization. Nil: nothing.
	Header http.Header
	// Capabilities are the client capabilities Initialize declares, e.g.
	// elicitation for a server that asks the client. Nil: none.
	Capabilities *mcp.ClientCapabilities
}

// NewRequest returns a request to c.URL carrying the headers a conforming
// client sends (MCP 2025-11-25, basic/transports): for POST, Content-Type
// application/json and Accept listing application/json and
// text/event-stream; for GET, Accept text/event-stream; and c.Header. body
// may be nil. Tests change or delete headers before calling Do to send
// what a conforming client would not.
func (c *Client) NewRequest(ctx context.Context, method string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL, rd)
	if err != nil {
		return nil, fmt.Errorf("mcptest: new %s request: %w", method, err)
	}
	wire.SetMedia(req.Header, method)
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return req, nil
}

// Do sends req with c.HTTP.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("mcptest: %s: %w", req.Method, err)
	}
	return resp, nil
}

// Initialize starts a session: it POSTs initialize offering version (""
// means DefaultProtocolVersion), reads the response from the SSE stream or
// JSON body of the answer, then POSTs notifications/initialized and
// expects 202. The returned Session carries the Mcp-Session-Id of the
// answer and the version the server chose; it sends that version as
// MCP-Protocol-Version except for 2025-03-26, whose clients send none.
// Errors: a *StatusError when the server refuses either POST, or when the
// answer carries no Mcp-Session-Id; an error when the response is a
// JSON-RPC error.
func (c *Client) Initialize(ctx context.Context, version string) (*Session, error) {
	if version == "" {
		version = DefaultProtocolVersion
	}
	caps := c.Capabilities
	if caps == nil {
		caps = &mcp.ClientCapabilities{}
	}
	init := MustCall(1, "initialize", &mcp.InitializeParams{
		ProtocolVersion: version,
		ClientInfo:      &mcp.Implementation{Name: "mcptest", Version: "1.0.0"},
		Capabilities:    caps,
	})
	body, err := jsonrpc.EncodeMessage(init)
	if err != nil {
		return nil, fmt.Errorf("mcptest: encode initialize: %w", err)
	}
	req, err := c.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	msgs, err := ReadAnswer(resp)
	if err != nil {
		return nil, fmt.Errorf("mcptest: initialize: %w", err)
	}
	token := resp.Header.Get(wire.HeaderSession)
	if token == "" {
		return nil, &StatusError{Method: http.MethodPost, Status: resp.StatusCode, Header: resp.Header,
			Detail: "initialize answer has no Mcp-Session-Id"}
	}
	var result *jsonrpc.Response
	for _, m := range msgs {
		if r, ok := m.(*jsonrpc.Response); ok && r.ID == init.ID {
			result = r
		}
	}
	if result == nil {
		return nil, fmt.Errorf("mcptest: initialize: no response among %d messages", len(msgs))
	}
	if result.Error != nil {
		return nil, fmt.Errorf("mcptest: initialize: %w", result.Error)
	}
	var res mcp.InitializeResult
	if err := json.Unmarshal(result.Result, &res); err != nil {
		return nil, fmt.Errorf("mcptest: initialize result: %w", err)
	}
	s := c.SessionFor(token, res.ProtocolVersion)
	s.Result = result.Result
	resp, err = s.Post(ctx, MustNotify("notifications/initialized", nil))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusAccepted {
		return nil, ReadStatusError(resp)
	}
	resp.Body.Close()
	return s, nil
}

// SessionFor returns a Session of c for an existing session token, as a
// client that kept the token (across its own or the server's restart)
// would hold it: MCP-Protocol-Version is sent as version, except for
// 2025-03-26 and "", which send none.
func (c *Client) SessionFor(token, version string) *Session {
	s := &Session{Client: c, Token: token, ProtocolVersion: version}
	if version != "2025-03-26" {
		s.VersionHeader = version
	}
	return s
}

// Session is one MCP session of a Client.
type Session struct {
	// Client sends the session's requests.
	Client *Client
	// Token is the session token, sent as Mcp-Session-Id.
	Token string
	// ProtocolVersion is the version the server chose in its initialize
	// result.
	ProtocolVersion string
	// VersionHeader is the MCP-Protocol-Version header value sent with
	// every request; "" sends none. Initialize sets it to ProtocolVersion,
	// except for 2025-03-26 (the header appeared in 2025-06-18).
	VersionHeader string
	// Result is the initialize result, as JSON.
	Result json.RawMessage
}

// NewRequest is Client.NewRequest plus the session's Mcp-Session-Id and
// MCP-Protocol-Version headers.
func (s *Session) NewRequest(ctx context.Context, method string, body []byte) (*http.Request, error) {
	req, err := s.Client.NewRequest(ctx, method, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set(wire.HeaderSession, s.Token)
	if s.VersionHeader != "" {
		req.Header.Set(wire.HeaderProtocolVersion, s.VersionHeader)
	}
	return req, nil
}

// Post POSTs msgs on the session: one message as a JSON object, several as
// a JSON array (a batch, allowed by 2025-03-26 only). It returns the
// response whatever its status; the caller closes its body.
func (s *Session) Post(ctx context.Context, msgs ...jsonrpc.Message) (*http.Response, error) {
	body, err := Encode(msgs...)
	if err != nil {
		return nil, err
	}
	req, err := s.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		return nil, err
	}
	return s.Client.Do(req)
}

// Call POSTs one request and returns the SSE stream that answers it. It
// fails with a *StatusError unless the answer is 200 text/event-stream.
// The stream ends after the response, or earlier if the server closes it
// (SEP-1699); the caller closes it.
func (s *Session) Call(ctx context.Context, call *jsonrpc.Request) (*Stream, error) {
	resp, err := s.Post(ctx, call)
	if err != nil {
		return nil, err
	}
	return OpenStream(resp)
}

// Get opens the session's standalone SSE stream (GET without
// Last-Event-ID). It fails with a *StatusError unless the answer is 200
// text/event-stream.
func (s *Session) Get(ctx context.Context) (*Stream, error) {
	req, err := s.NewRequest(ctx, http.MethodGet, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, err
	}
	return OpenStream(resp)
}

// Resume resumes the stream a cursor belongs to: GET with Last-Event-ID
// set to lastEventID (sent as given, even empty). It fails with a
// *StatusError unless the answer is 200 text/event-stream.
func (s *Session) Resume(ctx context.Context, lastEventID string) (*Stream, error) {
	req, err := s.NewRequest(ctx, http.MethodGet, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(wire.HeaderLastEventID, lastEventID)
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, err
	}
	return OpenStream(resp)
}

// Delete ends the session with DELETE. It returns nil on 204 No Content,
// else a *StatusError.
func (s *Session) Delete(ctx context.Context) error {
	req, err := s.NewRequest(ctx, http.MethodDelete, nil)
	if err != nil {
		return err
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent {
		return ReadStatusError(resp)
	}
	resp.Body.Close()
	return nil
}

// Stream reads the SSE events of one response. Reads block until the
// server writes, ends the response, or the request's context ends: give
// requests a context with a deadline.
type Stream struct {
	// Resp is the HTTP response; its body is the event stream.
	Resp *http.Response
	r    *sse.Reader
}

// OpenStream returns a Stream over resp if resp is 200 with Content-Type
// text/event-stream; otherwise it reads and closes the body and returns a
// *StatusError.
func OpenStream(resp *http.Response) (*Stream, error) {
	if resp.StatusCode != http.StatusOK || wire.MediaType(resp) != wire.MediaSSE {
		return nil, ReadStatusError(resp)
	}
	return &Stream{Resp: resp, r: sse.NewReader(resp.Body, 0)}, nil
}

// Next returns the next event. At the end of the stream it returns io.EOF
// (clean end) or io.ErrUnexpectedEOF (cut inside an event); an event whose
// data is not a JSON-RPC message is an error.
func (s *Stream) Next() (Event, error) {
	ev, err := s.r.Next()
	if err != nil {
		return Event{}, err
	}
	e := Event{Event: ev}
	if len(ev.Data) > 0 {
		m, err := jsonrpc.DecodeMessage(ev.Data)
		if err != nil {
			return e, fmt.Errorf("mcptest: event %s: data is not a JSON-RPC message: %w", ev, err)
		}
		e.Message = m
	}
	return e, nil
}

// Collect reads events until the server ends the stream and returns them.
// The error is nil at a clean end, else the error that stopped the
// reading, with the events read before it.
func (s *Stream) Collect() ([]Event, error) {
	var out []Event
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

// Until reads events up to and including the first one for which stop
// returns true, and returns them. It fails if the stream ends first.
func (s *Stream) Until(stop func(Event) bool) ([]Event, error) {
	var out []Event
	for {
		ev, err := s.Next()
		if err != nil {
			return out, fmt.Errorf("mcptest: stream ended before the awaited event after %d events: %w", len(out), err)
		}
		out = append(out, ev)
		if stop(ev) {
			return out, nil
		}
	}
}

// Close closes the response body, ending the connection's stream.
func (s *Stream) Close() error { return s.Resp.Body.Close() }

// Event is one SSE event with its data decoded.
type Event struct {
	sse.Event
	// Message is the JSON-RPC message in Data; nil when Data is empty
	// (priming events, a server-initiated close, a shutdown notice).
	Message jsonrpc.Message
}

// IsPriming reports whether e is a priming event: an id and empty data
// (MCP 2025-11-25, basic/transports).
func (e Event) IsPriming() bool { return e.HasID && e.ID != "" && len(e.Data) == 0 }

// ResumesFrom reports whether e is the priming event that Tidemark opens a
// stream resumed from cursor with: its id names cursor's position with a
// resume part (replay.Cursor), so it is an id the session never sent
// before, and resuming with it continues from the same place.
func (e Event) ResumesFrom(cursor string) bool {
	if !e.IsPriming() {
		return false
	}
	got, err := replay.Parse(e.ID)
	if err != nil || got.Resume == 0 {
		return false
	}
	want, err := replay.Parse(cursor)
	if err != nil {
		return false
	}
	want.Resume = got.Resume
	return got == want
}

// Response returns e's message if it is a JSON-RPC response.
func (e Event) Response() (*jsonrpc.Response, bool) {
	r, ok := e.Message.(*jsonrpc.Response)
	return r, ok
}

// Request returns e's message if it is a JSON-RPC request or notification.
func (e Event) Request() (*jsonrpc.Request, bool) {
	r, ok := e.Message.(*jsonrpc.Request)
	return r, ok
}

// IsResponseTo reports whether e is the response to the request with id.
func (e Event) IsResponseTo(id jsonrpc.ID) bool {
	r, ok := e.Response()
	return ok && r.ID == id
}

// ReadAnswer reads the JSON-RPC messages of a POST's answer: the events of
// an SSE stream until it ends, or an application/json body (one message or
// an array). It closes the body. A status other than 200 is a
// *StatusError.
func ReadAnswer(resp *http.Response) ([]jsonrpc.Message, error) {
	if resp.StatusCode != http.StatusOK {
		return nil, ReadStatusError(resp)
	}
	switch wire.MediaType(resp) {
	case wire.MediaSSE:
		st := &Stream{Resp: resp, r: sse.NewReader(resp.Body, 0)}
		defer st.Close()
		evs, err := st.Collect()
		var out []jsonrpc.Message
		for _, e := range evs {
			if e.Message != nil {
				out = append(out, e.Message)
			}
		}
		return out, err
	case wire.MediaJSON:
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("mcptest: read JSON answer: %w", err)
		}
		return DecodeJSON(body)
	}
	return nil, ReadStatusError(resp)
}

// DecodeJSON decodes an application/json answer: one JSON-RPC message, or
// an array of them.
func DecodeJSON(body []byte) ([]jsonrpc.Message, error) {
	raws := []json.RawMessage{body}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		raws = nil
		if err := json.Unmarshal(t, &raws); err != nil {
			return nil, fmt.Errorf("mcptest: JSON answer: %w", err)
		}
	}
	out := make([]jsonrpc.Message, 0, len(raws))
	for _, raw := range raws {
		m, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return nil, fmt.Errorf("mcptest: JSON answer %s: %w", raw, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// Encode renders msgs as a POST body: one message as an object, several as
// an array.
func Encode(msgs ...jsonrpc.Message) ([]byte, error) {
	raws := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		b, err := jsonrpc.EncodeMessage(m)
		if err != nil {
			return nil, fmt.Errorf("mcptest: encode message %d: %w", i, err)
		}
		raws[i] = b
	}
	if len(raws) == 1 {
		return raws[0], nil
	}
	return json.Marshal(raws)
}

// MustCall returns a JSON-RPC request with integer id. It panics if params
// cannot be marshaled to JSON, which is a bug in the test.
func MustCall(id int64, method string, params any) *jsonrpc.Request {
	rid, err := jsonrpc.MakeID(float64(id))
	if err != nil {
		panic(err)
	}
	return &jsonrpc.Request{ID: rid, Method: method, Params: mustJSON(params)}
}

// MustNotify returns a JSON-RPC notification. It panics if params cannot
// be marshaled to JSON.
func MustNotify(method string, params any) *jsonrpc.Request {
	return &jsonrpc.Request{Method: method, Params: mustJSON(params)}
}

// ToolCall returns a tools/call request with integer id for tool name with
// args; a non-nil progressToken is sent as _meta.progressToken (MCP
// 2025-11-25, utilities/progress).
func ToolCall(id int64, name string, args any, progressToken any) *jsonrpc.Request {
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if progressToken != nil {
		p.Meta = mcp.Meta{"progressToken": progressToken}
	}
	return MustCall(id, "tools/call", p)
}

// ID returns the JSON-RPC ID of integer n, as MustCall makes it.
func ID(n int64) jsonrpc.ID {
	id, _ := jsonrpc.MakeID(float64(n))
	return id
}

func mustJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("mcptest: marshal params: %v", err))
	}
	return b
}

// ErrorBody is the JSON-RPC error object of an HTTP refusal:
// {"jsonrpc":"2.0","id":null,"error":{"code":…,"message":…,"data":{"reason":…}}}.
type ErrorBody struct {
	// ID is the raw id member: `null` when the request's id is unknown.
	ID json.RawMessage
	// Code is error.code (e.g. -32700 parse error, -32001 session not found).
	Code int64
	// Message is error.message.
	Message string
	// Reason is error.data.reason, the stable machine-readable cause; ""
	// when absent.
	Reason string
	// Data is error.data; numbers are json.Number, so tests compare them
	// exactly (e.g. Data["hwm"] == json.Number("12")).
	Data map[string]any
}

// ParseError decodes a JSON-RPC error body. It fails if body is not a JSON
// object with jsonrpc "2.0" and an error member.
func ParseError(body []byte) (*ErrorBody, error) {
	var env struct {
		JSONRPC string           `json:"jsonrpc"`
		ID      json.RawMessage  `json:"id"`
		Error   *json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("mcptest: error body %q: %w", clip(body), err)
	}
	if env.JSONRPC != "2.0" || env.Error == nil {
		return nil, fmt.Errorf("mcptest: error body %q: not a JSON-RPC 2.0 error", clip(body))
	}
	var werr jsonrpc.Error
	if err := json.Unmarshal(*env.Error, &werr); err != nil {
		return nil, fmt.Errorf("mcptest: error object %q: %w", clip(body), err)
	}
	eb := &ErrorBody{ID: env.ID, Code: werr.Code, Message: werr.Message}
	if len(werr.Data) > 0 && string(werr.Data) != "null" {
		dec := json.NewDecoder(bytes.NewReader(werr.Data))
		dec.UseNumber()
		if err := dec.Decode(&eb.Data); err != nil {
			return nil, fmt.Errorf("mcptest: error.data %q: %w", clip(werr.Data), err)
		}
		eb.Reason, _ = eb.Data["reason"].(string)
	}
	return eb, nil
}

// StatusError is an HTTP answer other than the one a helper expected.
type StatusError struct {
	// Method is the HTTP method of the request.
	Method string
	// Status is the HTTP status code.
	Status int
	// Header is the response's header.
	Header http.Header
	// RawBody is the response body (at most 1 MiB).
	RawBody []byte
	// Body is RawBody parsed as a JSON-RPC error; nil when it is not one.
	Body *ErrorBody
	// Detail says what was unexpected besides the status, if anything.
	Detail string
}

// ReadStatusError reads (at most 1 MiB of) resp's body, closes it, and
// returns it as a *StatusError.
func ReadStatusError(resp *http.Response) *StatusError {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &StatusError{Status: resp.StatusCode, Header: resp.Header, RawBody: body}
	if resp.Request != nil {
		e.Method = resp.Request.Method
	}
	if eb, err := ParseError(body); err == nil {
		e.Body = eb
	}
	return e
}

// Reason returns error.data.reason of the body, or "" when there is none.
func (e *StatusError) Reason() string {
	if e.Body == nil {
		return ""
	}
	return e.Body.Reason
}

// Error gives the method, the HTTP status, and the detail or reason.
func (e *StatusError) Error() string {
	s := "mcptest: " + e.Method + ": HTTP " + strconv.Itoa(e.Status)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Body != nil {
		return s + ": " + e.Body.Reason + ": " + e.Body.Message
	}
	if len(e.RawBody) > 0 {
		return fmt.Sprintf("%s: body %q", s, clip(e.RawBody))
	}
	return s
}

// AsStatusError returns err's *StatusError, if it wraps one.
func AsStatusError(err error) (*StatusError, bool) {
	var se *StatusError
	ok := errors.As(err, &se)
	return se, ok
}

func clip(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}
