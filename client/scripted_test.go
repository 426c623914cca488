package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/client"
)

// scripted is a Streamable HTTP server whose answers to tools/call and to
// resumes a test writes, to produce what Tidemark never does (repeated
// events, a resume that never answers). It handles initialize (session
// tokens scripted-session-1, -2, ...), notifications, responses and
// DELETE itself, and the standalone GET unless standalone is set.
type scripted struct {
	t *testing.T
	// call writes the SSE answer of a tools/call whose request is req.
	call func(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request)
	// resume answers a GET with Last-Event-ID.
	resume func(w http.ResponseWriter, r *http.Request, cursor string)
	// standalone, when set, answers a GET without Last-Event-ID; nil: 405.
	standalone func(w http.ResponseWriter, r *http.Request)
	// del, when set, runs before a DELETE is answered 204.
	del func(r *http.Request)

	mu       sync.Mutex
	token    any        // the progress token of the last tools/call
	id       jsonrpc.ID // the ID of the last tools/call
	sessions int        // initialize requests answered
	// seen lists the requests handled, in order: "DELETE token", or "POST
	// token what" where what is a request's method or "response" and the
	// response's id.
	seen []string
}

// saw records one request in s.seen.
func (s *scripted) saw(entry string) {
	s.mu.Lock()
	s.seen = append(s.seen, entry)
	s.mu.Unlock()
}

// seenIndex returns the index in s.seen of entry, -1 if absent.
func (s *scripted) seenIndex(entry string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Index(s.seen, entry)
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		if c := r.Header.Get("Last-Event-ID"); c != "" {
			s.resume(w, r, c)
			return
		}
		if s.standalone != nil {
			s.standalone(w, r)
			return
		}
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	case http.MethodDelete:
		s.saw("DELETE " + r.Header.Get("Mcp-Session-Id"))
		if s.del != nil {
			s.del(r)
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	body, _ := io.ReadAll(r.Body)
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	token := r.Header.Get("Mcp-Session-Id")
	req, ok := msg.(*jsonrpc.Request)
	switch {
	case !ok:
		s.saw(fmt.Sprintf("POST %s response %v", token, msg.(*jsonrpc.Response).ID.Raw()))
	default:
		s.saw("POST " + token + " " + req.Method)
	}
	if !ok || !req.IsCall() {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	switch req.Method {
	case "initialize":
		res, _ := json.Marshal(&mcp.InitializeResult{ProtocolVersion: "2025-11-25",
			ServerInfo: &mcp.Implementation{Name: "scripted", Version: "1"}, Capabilities: &mcp.ServerCapabilities{}})
		out, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Result: res})
		s.mu.Lock()
		s.sessions++
		n := s.sessions
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", fmt.Sprintf("scripted-session-%d", n))
		w.Write(out)
	case "tools/call":
		var p struct {
			Meta struct {
				Token any `json:"progressToken"`
			} `json:"_meta"`
		}
		json.Unmarshal(req.Params, &p)
		s.mu.Lock()
		s.token, s.id = p.Meta.Token, req.ID
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		s.call(w, r, req)
	default:
		out, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Result: json.RawMessage("{}")})
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
	}
}

// progress renders event id carrying progress step of the last call.
func (s *scripted) progress(id string, step int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	params, _ := json.Marshal(map[string]any{"progressToken": s.token, "progress": step, "total": 4})
	b, _ := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/progress", Params: params})
	return fmt.Sprintf("id: %s\ndata: %s\n\n", id, b)
}

// result renders event id carrying the last call's result.
func (s *scripted) result(id, text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	res, _ := json.Marshal(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}})
	b, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: s.id, Result: res})
	return fmt.Sprintf("id: %s\ndata: %s\n\n", id, b)
}

func write(w http.ResponseWriter, frames ...string) {
	for _, f := range frames {
		io.WriteString(w, f)
	}
	w.(http.Flusher).Flush()
}

// TestRepeatedEventsDroppedAndRetryHonoured: the server closes the call's
// stream after a priming event with retry 300 ms and three progress events;
// the resume must come no sooner than 300 ms later. The server then
// replays from the start (events a1..a3 again) before a4 and the result:
// the SDK sees progress 1..4 once each, and the transport reports three
// duplicates.
func TestRepeatedEventsDroppedAndRetryHonoured(t *testing.T) {
	var (
		mu       sync.Mutex
		closedAt time.Time
		resumeAt time.Time
		cursor   string
	)
	s := &scripted{t: t}
	s.call = func(w http.ResponseWriter, _ *http.Request, req *jsonrpc.Request) {
		write(w, "id: a0\nretry: 300\ndata:\n\n", s.progress("a1", 1), s.progress("a2", 2), s.progress("a3", 3))
		mu.Lock()
		closedAt = time.Now()
		mu.Unlock()
	}
	s.resume = func(w http.ResponseWriter, r *http.Request, c string) {
		mu.Lock()
		resumeAt, cursor = time.Now(), c
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		write(w, s.progress("a1", 1), s.progress("a2", 2), s.progress("a3", 3), s.progress("a4", 4), s.result("a5", "done"))
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	rec := newRecorder()
	// A default backoff far above the server's retry: a transport that
	// ignored retry would wait at least 5 s.
	cs := connect(t, srv.URL, rec, func(tr *client.Transport) { tr.InitialBackoff = 5 * time.Second })
	params := &mcp.CallToolParams{Name: "x", Arguments: map[string]any{}}
	params.SetProgressToken("tok")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "done" {
		t.Errorf("result = %q, want done", text)
	}
	if got := rec.settled("tok", 4); !slices.Equal(got, steps(4)) {
		t.Errorf("progress = %v, want %v", got, steps(4))
	}
	mu.Lock()
	wait := resumeAt.Sub(closedAt)
	mu.Unlock()
	if cursor != "a3" {
		t.Errorf("Last-Event-ID = %q, want a3", cursor)
	}
	// The delay is retry plus up to half of it in jitter.
	if wait < 300*time.Millisecond || wait > 2*time.Second {
		t.Errorf("resumed %v after the stream closed, want 300ms to 450ms (+ scheduling, at most 2s)", wait)
	}
	var dups []string
	rec.mu.Lock()
	for _, e := range rec.events {
		if e.Kind == client.EventDuplicate {
			dups = append(dups, e.Cursor)
		}
	}
	rec.mu.Unlock()
	if !slices.Equal(dups, []string{"a1", "a2", "a3"}) {
		t.Errorf("duplicate events = %v, want [a1 a2 a3]", dups)
	}
	if n := rec.count(client.EventResumed); n != 1 {
		t.Errorf("resumed events = %d, want 1", n)
	}
}

// TestSilentResumeBounded: the server accepts the resume's connection and
// never answers it. The call fails with ErrStreamLost once ResumeTimeout
// (500 ms here) has passed since the break, and well before anything else
// would end it.
func TestSilentResumeBounded(t *testing.T) {
	var (
		mu       sync.Mutex
		closedAt time.Time
	)
	s := &scripted{t: t}
	s.call = func(w http.ResponseWriter, _ *http.Request, req *jsonrpc.Request) {
		write(w, "id: b0\nretry: 10\ndata:\n\n", s.progress("b1", 1))
		mu.Lock()
		closedAt = time.Now()
		mu.Unlock()
	}
	s.resume = func(w http.ResponseWriter, r *http.Request, c string) {
		<-r.Context().Done() // never answer
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer srv.CloseClientConnections()
	rec := newRecorder()
	cs := connect(t, srv.URL, rec, func(tr *client.Transport) { tr.ResumeTimeout = 500 * time.Millisecond })
	params := &mcp.CallToolParams{Name: "x", Arguments: map[string]any{}}
	params.SetProgressToken("tok")
	_, err := cs.CallTool(t.Context(), params)
	mu.Lock()
	took := time.Since(closedAt)
	mu.Unlock()
	if !errors.Is(err, client.ErrStreamLost) {
		t.Fatalf("err = %v, want ErrStreamLost", err)
	}
	var ce *client.CallError
	if !errors.As(err, &ce) || ce.Cursor != "b1" {
		t.Errorf("CallError = %+v, want cursor b1", ce)
	}
	// Unbounded, the call would wait for the test's own deadline; the
	// upper bound leaves room for a loaded machine's scheduling.
	if took < 500*time.Millisecond || took > 5*time.Second {
		t.Errorf("call failed %v after the break, want 500ms to 5s", took)
	}
}

// TestResumeRetryAfterHonoured: the first resume of a cut call is answered
// 503 owner_unreachable with Retry-After 1; the next resume comes no
// sooner than a second later (RFC 9110, section 10.2.3), although the
// server's SSE retry (10 ms) and the backoff would allow it after 20 ms,
// and completes the call.
func TestResumeRetryAfterHonoured(t *testing.T) {
	var (
		mu      sync.Mutex
		resumes []time.Time
	)
	s := &scripted{t: t}
	s.call = func(w http.ResponseWriter, _ *http.Request, req *jsonrpc.Request) {
		write(w, "id: r0\nretry: 10\ndata:\n\n", s.progress("r1", 1))
	}
	s.resume = func(w http.ResponseWriter, r *http.Request, c string) {
		mu.Lock()
		resumes = append(resumes, time.Now())
		n := len(resumes)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"the session's owner cannot be reached","data":{"reason":"owner_unreachable"}}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		write(w, s.result("r2", "done"))
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	cs := connect(t, srv.URL, newRecorder(), nil)
	params := &mcp.CallToolParams{Name: "x", Arguments: map[string]any{}}
	params.SetProgressToken("tok")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "done" {
		t.Errorf("result = %q, want done", text)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resumes) != 2 {
		t.Fatalf("%d resumes, want 2", len(resumes))
	}
	if d := resumes[1].Sub(resumes[0]); d < time.Second {
		t.Errorf("second resume %v after the 503 with Retry-After 1, want at least 1s", d)
	}
}

// TestResumeRetryAfterPastTimeout: a resume answered 503 with a
// Retry-After (an hour) that reaches past ResumeTimeout (5 s) fails the
// call with ErrStreamLost at once, not at the deadline: no resume may come
// before it. The cause names the 503.
func TestResumeRetryAfterPastTimeout(t *testing.T) {
	var resumes atomicCount
	s := &scripted{t: t}
	s.call = func(w http.ResponseWriter, _ *http.Request, req *jsonrpc.Request) {
		write(w, "id: q0\nretry: 10\ndata:\n\n", s.progress("q1", 1))
	}
	s.resume = func(w http.ResponseWriter, r *http.Request, c string) {
		resumes.add()
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	cs := connect(t, srv.URL, newRecorder(), nil)
	params := &mcp.CallToolParams{Name: "x", Arguments: map[string]any{}}
	params.SetProgressToken("tok")
	start := time.Now()
	_, err := cs.CallTool(t.Context(), params)
	took := time.Since(start)
	if !errors.Is(err, client.ErrStreamLost) {
		t.Fatalf("err = %v, want ErrStreamLost", err)
	}
	var ce *client.CallError
	var se *client.StatusError
	if !errors.As(err, &ce) || !errors.As(ce.Cause, &se) || se.Status != http.StatusServiceUnavailable {
		t.Errorf("CallError %+v, want a cause with status 503", ce)
	}
	if n := resumes.get(); n != 1 {
		t.Errorf("%d resumes, want 1", n)
	}
	// At once: the 5 s ResumeTimeout is not waited out (the bound leaves
	// room for a loaded machine).
	if took >= 4*time.Second {
		t.Errorf("call failed %v after it began, want well under the 5s ResumeTimeout", took)
	}
}

// atomicCount counts under a mutex.
type atomicCount struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCount) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *atomicCount) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestStoppedKeepAlivesResume: a server that has sent keep-alive comments
// on a call's stream and then falls silent (a stopped process, a dead
// network path) has the stream resumed once the silence passes
// max(ResumeTimeout, 3 × the keep-alives' gap), and the call completes
// from the resume; a server that never sent a keep-alive may stay silent
// longer than ResumeTimeout without its stream being cut.
func TestStoppedKeepAlivesResume(t *testing.T) {
	for _, keepAlives := range []bool{true, false} {
		t.Run(fmt.Sprintf("keep-alives=%v", keepAlives), func(t *testing.T) {
			var (
				mu      sync.Mutex
				cursors []string
			)
			s := &scripted{t: t}
			s.call = func(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
				write(w, "id: c0\ndata:\n\n", s.progress("c1", 1))
				if !keepAlives {
					time.Sleep(time.Second) // a slow tool, over ResumeTimeout
					write(w, s.result("c2", "slow"))
					return
				}
				for range 4 {
					time.Sleep(50 * time.Millisecond)
					write(w, ": keep-alive\n\n")
				}
				<-r.Context().Done() // stopped: the connection stays open, silent
			}
			s.resume = func(w http.ResponseWriter, r *http.Request, c string) {
				mu.Lock()
				cursors = append(cursors, c)
				mu.Unlock()
				w.Header().Set("Content-Type", "text/event-stream")
				write(w, s.result("c2", "resumed"))
			}
			srv := httptest.NewServer(s)
			defer srv.Close()
			defer srv.CloseClientConnections()
			rec := newRecorder()
			cs := connect(t, srv.URL, rec, func(tr *client.Transport) { tr.ResumeTimeout = 300 * time.Millisecond })
			params := &mcp.CallToolParams{Name: "x", Arguments: map[string]any{}}
			params.SetProgressToken("tok")
			res, err := cs.CallTool(t.Context(), params)
			if err != nil {
				t.Fatalf("CallTool: %v", err)
			}
			want, wantCursors := "resumed", []string{"c1"}
			if !keepAlives {
				want, wantCursors = "slow", nil
			}
			if text := res.Content[0].(*mcp.TextContent).Text; text != want {
				t.Errorf("result = %q, want %q", text, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(cursors, wantCursors) {
				t.Errorf("resumes with Last-Event-ID %v, want %v", cursors, wantCursors)
			}
		})
	}
}

// TestDuplicateCallIDRefused: a second call with the id of a call still
// in flight is refused by Write at once and never sent; the first call's
// answer still arrives. The failing input (a host behind tidemark
// connect): tools/call id 2 twice; the server refused the second
// (duplicate_request_id) and the first call's result never reached the
// host.
func TestDuplicateCallIDRefused(t *testing.T) {
	release := make(chan struct{})
	s := &scripted{t: t}
	s.call = func(w http.ResponseWriter, _ *http.Request, req *jsonrpc.Request) {
		write(w, "id: d0\ndata:\n\n")
		<-release
		write(w, s.result("d1", "first"))
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer srv.CloseClientConnections()
	tr := &client.Transport{Endpoint: srv.URL, ResumeTimeout: 5 * time.Second, Logger: testLogger(t)}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conn, err := tr.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(id int64, method string, params any) *jsonrpc.Request {
		raw, _ := json.Marshal(params)
		jid, _ := jsonrpc.MakeID(float64(id))
		return &jsonrpc.Request{ID: jid, Method: method, Params: raw}
	}
	if err := conn.Write(ctx, call(1, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(ctx); err != nil {
		t.Fatal(err)
	}
	tool := map[string]any{"name": "x", "arguments": map[string]any{}}
	if err := conn.Write(ctx, call(2, "tools/call", tool)); err != nil {
		t.Fatal(err)
	}
	for s.seenIndex("POST scripted-session-1 tools/call") < 0 {
		time.Sleep(5 * time.Millisecond)
	}
	err = conn.Write(ctx, call(2, "tools/call", tool))
	if want := "client: tools/call id 2: a call with that id is in flight: give each call its own id"; err == nil || err.Error() != want {
		t.Fatalf("second call with id 2: %v, want %q", err, want)
	}
	close(release)
	msg, err := conn.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := msg.(*jsonrpc.Response)
	if !ok || r.Error != nil || !strings.Contains(string(r.Result), `"first"`) {
		t.Fatalf("answer: %+v, want the first call's result", msg)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := strings.Count(strings.Join(s.seen, "\n"), "tools/call"); n != 1 {
		t.Fatalf("tools/call POSTs: %d, want 1 (%q)", n, s.seen)
	}
}

// TestPostRetryAfter429: a tools/call POST answered 429 too_many_calls
// with Retry-After 1 (the server did not take it: its session has the
// most calls in flight it allows) is sent again no sooner than a second
// later (RFC 6585, section 4; RFC 9110, section 10.2.3), and its answer
// completes the call.
func TestPostRetryAfter429(t *testing.T) {
	var (
		mu    sync.Mutex
		posts []time.Time
	)
	s := &scripted{t: t}
	s.call = func(w http.ResponseWriter, _ *http.Request, req *jsonrpc.Request) {
		mu.Lock()
		posts = append(posts, time.Now())
		n := len(posts)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"session: too many calls in flight","data":{"reason":"too_many_calls"}}}`)
			return
		}
		write(w, s.result("p1", "done"))
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	cs := connect(t, srv.URL, newRecorder(), nil)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "x", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "done" {
		t.Errorf("result = %q, want done", text)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 2 {
		t.Fatalf("%d tools/call POSTs, want 2", len(posts))
	}
	if d := posts[1].Sub(posts[0]); d < time.Second {
		t.Errorf("second POST %v after the 429 with Retry-After 1, want at least 1s", d)
	}
}
