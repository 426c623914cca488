// The probe's side of MCP Streamable HTTP (MCP 2025-11-25,
// basic/transports): the server under test and the sessions the probe
// opens on it, whose requests it sends raw so that it sees every status,
// header and event as the server sends them: nothing is retried, resumed
// or deduplicated behind its back.

package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/resume"
	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// peer is the server under test.
type peer struct {
	url     string
	http    *http.Client
	header  http.Header
	version string // the protocol version offered in initialize
	ids     atomic.Int64

	mu       sync.Mutex
	sessions []*session // every session opened, ended by cleanup
}

// cleanupWorkers bounds the DELETEs cleanup has in flight at once: a storm
// leaves thousands of sessions, and as many DELETEs at once would meet a
// server still busy with the storm's cut streams.
const cleanupWorkers = 16

// cleanupTime bounds the whole cleanup, also when a check failed or timed
// out: the probe never hangs on a server that stopped answering.
const cleanupTime = 60 * time.Second

// cleanupRetry is the pause before a session's DELETE is sent again.
const cleanupRetry = 100 * time.Millisecond

// cleanup ends every session the probe opened (DELETE, at most
// cleanupWorkers at once, within cleanupTime), whatever the checks' outcome,
// so that a probe leaves nothing behind on the server (docs/probe.md).
func (p *peer) cleanup() {
	p.mu.Lock()
	ss := p.sessions
	p.sessions = nil
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTime)
	defer cancel()
	queue := make(chan *session)
	var wg sync.WaitGroup
	for range cleanupWorkers {
		wg.Go(func() {
			for s := range queue {
				s.end(ctx)
			}
		})
	}
	for _, s := range ss {
		if s.id != "" {
			queue <- s
		}
	}
	close(queue)
	wg.Wait()
}

// end sends DELETE for s until the server settles it, or ctx ends: any
// answer but a 5xx or 429 settles it (2xx ended, 404 already gone, 405 the
// server does not let clients end sessions); a failed connection, a 5xx or
// a 429 is tried again after cleanupRetry.
func (s *session) end(ctx context.Context) {
	for {
		status, err := s.delete(ctx)
		if err == nil && status < 500 && status != http.StatusTooManyRequests {
			return
		}
		if !sleep(ctx, cleanupRetry) {
			return
		}
	}
}

func (p *peer) nextID() jsonrpc.ID {
	id, _ := jsonrpc.MakeID(float64(p.ids.Add(1)))
	return id
}

// session is one MCP session opened by the probe.
type session struct {
	p       *peer
	id      string // Mcp-Session-Id; "" if the server sent none
	version string // negotiated protocol version
	server  string // serverInfo "name version"
}

// statusError is an HTTP refusal of the request what ("GET", "POST
// tools/call"): its status, and error.data.reason of a JSON-RPC error body
// when there is one.
type statusError struct {
	what string
	wire.Refusal
}

func (e *statusError) Error() string { return e.what + ": " + e.Refusal.String() }

// readRefusal reads an error response's status, reason and message, and
// closes its body.
func readRefusal(what string, resp *http.Response) *statusError {
	return &statusError{what: what, Refusal: wire.ReadRefusal(resp)}
}

// request builds a request carrying the session's headers.
func (s *session) request(ctx context.Context, method string, body []byte) (*http.Request, error) {
	return wire.NewRequest(ctx, method, s.p.url, body, s.p.header, s.id, s.version)
}

// post sends msg and returns the raw response.
func (s *session) post(ctx context.Context, msg jsonrpc.Message) (*http.Response, error) {
	body, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return nil, err
	}
	req, err := s.request(ctx, http.MethodPost, body)
	if err != nil {
		return nil, err
	}
	return s.p.http.Do(req)
}

// initialize opens a session: initialize, then notifications/initialized
// (MCP 2025-11-25, "Lifecycle").
func (p *peer) initialize(ctx context.Context) (*session, error) {
	s := &session{p: p}
	params, err := json.Marshal(&mcp.InitializeParams{
		ProtocolVersion: p.version,
		ClientInfo:      &mcp.Implementation{Name: "tidemark-probe", Version: "1.0.0"},
		Capabilities:    &mcp.ClientCapabilities{},
	})
	if err != nil {
		return nil, err
	}
	id := p.nextID()
	resp, err := s.post(ctx, &jsonrpc.Request{ID: id, Method: "initialize", Params: params})
	if err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, readRefusal("initialize", resp)
	}
	s.id = resp.Header.Get(wire.HeaderSession)
	p.mu.Lock()
	p.sessions = append(p.sessions, s)
	p.mu.Unlock()
	st := openStream(resp)
	ans, err := st.answer(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	if ans.Error != nil {
		return nil, fmt.Errorf("initialize: %w", ans.Error)
	}
	var res mcp.InitializeResult
	if err := json.Unmarshal(ans.Result, &res); err != nil {
		return nil, fmt.Errorf("initialize result: %w", err)
	}
	s.version = res.ProtocolVersion
	if res.ServerInfo != nil {
		s.server = strings.TrimSpace(res.ServerInfo.Name + " " + res.ServerInfo.Version)
	}
	resp, err = s.post(ctx, &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage("{}")})
	if err != nil {
		return nil, fmt.Errorf("notifications/initialized: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, readRefusal("notifications/initialized", resp)
	}
	wire.Drain(resp)
	return s, nil
}

// callRequest returns a tools/call request for tool with args and a
// progress token.
func (p *peer) callRequest(tool string, args json.RawMessage, token string) (*jsonrpc.Request, error) {
	params := map[string]any{"name": tool, "arguments": args, "_meta": map[string]any{"progressToken": token}}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	return &jsonrpc.Request{ID: p.nextID(), Method: "tools/call", Params: raw}, nil
}

// call POSTs a tools/call and returns its answer as a stream (an SSE
// stream, or the messages of a JSON body), with the POST's status.
func (s *session) call(ctx context.Context, req *jsonrpc.Request) (*stream, error) {
	resp, err := s.post(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("POST tools/call: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, readRefusal("POST tools/call", resp)
	}
	return openStream(resp), nil
}

// resume sends one GET with Last-Event-ID (MCP 2025-11-25, "Resumability
// and Redelivery"; resume.Get), and retries nothing: the probe judges each
// answer as it comes. A 200 SSE answer is returned as a stream; any other
// answer as a *statusError.
func (s *session) resume(ctx context.Context, cursor string) (*stream, error) {
	resp, o, err := resume.Get(ctx, s.p.http, resume.Request{URL: s.p.url, Header: s.p.header, Session: s.id, Version: s.version, LastEventID: cursor})
	switch {
	case err != nil:
		return nil, err
	case o.Kind == resume.Resumed:
		return openStream(resp), nil
	case o.Status == 0:
		return nil, fmt.Errorf("GET: %w", o.Err)
	}
	return nil, &statusError{what: "GET", Refusal: o.Refusal}
}

// delete ends the session and returns the status.
func (s *session) delete(ctx context.Context) (int, error) {
	req, err := s.request(ctx, http.MethodDelete, nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.p.http.Do(req)
	if err != nil {
		return 0, err
	}
	wire.Drain(resp)
	return resp.StatusCode, nil
}

// statusOf returns the HTTP status an error carries, 0 if none.
func statusOf(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

func reasonOf(err error) string {
	var se *statusError
	if errors.As(err, &se) {
		return se.Reason
	}
	return ""
}
