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
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/client"
	"github.com/tidemark-mcp/tidemark/replay"
)

// The tests of this file script a server that refuses a resume with 409
// and says, or does not say, in error.data.lostRequests which requests of
// the refused stream are lost. The calls are tools/call requests whose
// tool names (a, b, c, d) tell them apart.

// Session tokens the scripted server hands out, in order.
const (
	firstSession  = "scripted-session-1"
	secondSession = "scripted-session-2"
)

// atOnce bounds how long after the 409 a call it concerns may take to fail.
const atOnce = 2 * time.Second

// calls runs tools/call requests of a scripted server and records the ids
// and session tokens they were sent with.
type calls struct {
	mu   sync.Mutex
	ids  map[string]jsonrpc.ID // tool name → request id
	sess map[string]string     // tool name → Mcp-Session-Id of its POST
}

func newCalls() *calls {
	return &calls{ids: map[string]jsonrpc.ID{}, sess: map[string]string{}}
}

// note records req, the tools/call of r, and returns its tool name.
func (c *calls) note(r *http.Request, req *jsonrpc.Request) string {
	var p struct {
		Name string `json:"name"`
	}
	json.Unmarshal(req.Params, &p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids[p.Name] = req.ID
	c.sess[p.Name] = r.Header.Get("Mcp-Session-Id")
	return p.Name
}

func (c *calls) id(name string) jsonrpc.ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids[name]
}

func (c *calls) session(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess[name]
}

// start calls tool name on cs in the background; the channel receives the
// result text or the error.
func start(ctx context.Context, cs *mcp.ClientSession, name string) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		var text string
		if err == nil && len(res.Content) == 1 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok {
				text = tc.Text
			}
		}
		ch <- callResult{text, err}
	}()
	return ch
}

type callResult struct {
	text string
	err  error
}

// await returns what ch receives within d, or fails the test.
func await(t *testing.T, ch <-chan callResult, what string, d time.Duration) callResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("%s: no outcome within %v", what, d)
		return callResult{}
	}
}

// stillRunning fails the test if the call whose outcome ch receives has
// ended.
func stillRunning(t *testing.T, ch <-chan callResult, name string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Errorf("call %s ended (%q, %v), want it still running", name, r.text, r.err)
	default:
	}
}

// resultFrame renders event id carrying the response to req with text.
func resultFrame(id string, req *jsonrpc.Request, text string) string {
	res, _ := json.Marshal(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}})
	b, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Result: res})
	return fmt.Sprintf("id: %s\ndata: %s\n\n", id, b)
}

// conflict answers 409 with reason and, when lost is not nil, the
// error.data.lostRequests lost (ids as the client sent them).
func conflict(w http.ResponseWriter, reason replay.Reason, lost []jsonrpc.ID) {
	data := map[string]any{}
	if lost != nil {
		data["lostRequests"] = rawIDs(lost)
	}
	conflictData(w, reason, data)
}

// rawIDs renders ids as a JSON list holds them.
func rawIDs(ids []jsonrpc.ID) []any {
	raws := make([]any, len(ids))
	for i, id := range ids {
		raws[i] = id.Raw()
	}
	return raws
}

// conflictData answers 409 with reason and the other error.data members
// of data.
func conflictData(w http.ResponseWriter, reason replay.Reason, data map[string]any) {
	data["reason"] = reason
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32001, "message": "the stream cannot be resumed", "data": data}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusConflict)
	w.Write(body)
}

// wantLost checks that r is a failure with ErrSessionLost carrying the
// 409 and reason.
func wantLost(t *testing.T, name string, r callResult, reason replay.Reason) {
	t.Helper()
	var ce *client.CallError
	if !errors.Is(r.err, client.ErrSessionLost) || !errors.As(r.err, &ce) || ce.Status != http.StatusConflict || ce.Reason != string(reason) {
		t.Errorf("call %s = %q, %v; want ErrSessionLost with 409 %s", name, r.text, r.err, reason)
	}
}

// fencedEvents returns the EventFenced events rec saw.
func fencedEvents(rec *recorder) []client.Event {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []client.Event
	for _, e := range rec.events {
		if e.Kind == client.EventFenced {
			out = append(out, e)
		}
	}
	return out
}

// lostServer starts a scripted server on loopback, with the calls record
// its handlers use. The test's cleanup closes done (which handlers waiting
// on it watch) before it closes the server.
func lostServer(t *testing.T) (s *scripted, cl *calls, url string, done chan struct{}) {
	s, cl = &scripted{t: t}, newCalls()
	srv := httptest.NewServer(s)
	done = make(chan struct{})
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	t.Cleanup(func() { close(done) })
	return s, cl, srv.URL, done
}

// script sets s.call: each call's stream opens with a priming event whose
// id is the tool name and 0 (retry 10 ms), then then runs (nil: the stream
// ends there).
func script(s *scripted, cl *calls, then func(name string, w http.ResponseWriter, r *http.Request, req *jsonrpc.Request)) {
	s.call = func(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
		name := cl.note(r, req)
		write(w, fmt.Sprintf("id: %s0\nretry: 10\ndata:\n\n", name))
		if then != nil {
			then(name, w, r, req)
		}
	}
}

// until waits for ch (nil: never), the end of r or the test's end (done),
// and reports whether ch came first.
func until(ch <-chan struct{}, r *http.Request, done <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-r.Context().Done():
	case <-done:
	}
	return false
}

// holdB scripts s.call: b's stream stays open after its priming event
// until the client or the test ends it; the others end there.
func holdB(s *scripted, cl *calls, done <-chan struct{}) {
	script(s, cl, func(name string, w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
		if name == "b" {
			until(nil, r, done)
		}
	})
}

// TestLostRequestsFailExactlyThose: calls a, b and c stream on one
// session; a's stream breaks and its resume answers 409 listing a and b as
// lost. a and b fail at once with ErrSessionLost and the 409's status and
// reason, although b's stream is still open; c runs on: the server asks it
// something (ping) and the answer goes to the old session, then c
// completes. New calls go to a new session, and the old one is ended with
// DELETE once c has ended, not before.
func TestLostRequestsFailExactlyThose(t *testing.T) {
	s, cl, url, done := lostServer(t)
	askC := make(chan struct{})
	script(s, cl, func(name string, w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
		switch name {
		case "a": // the stream breaks
		case "b":
			until(nil, r, done)
		case "c":
			if !until(askC, r, done) {
				return
			}
			write(w, `id: c1`+"\n"+`data: {"jsonrpc":"2.0","id":"srv-ping","method":"ping"}`+"\n\n")
			for s.seenIndex("POST "+firstSession+" response srv-ping") < 0 {
				select {
				case <-time.After(5 * time.Millisecond):
				case <-done:
					return
				}
			}
			write(w, resultFrame("c2", req, "c done"))
		case "d":
			write(w, resultFrame("d1", req, "d done"))
		}
	})
	s.resume = func(w http.ResponseWriter, r *http.Request, cursor string) {
		if cursor != "a0" {
			t.Errorf("resume with cursor %q, want a0", cursor)
		}
		conflict(w, replay.ReasonGenerationMismatch, []jsonrpc.ID{cl.id("a"), cl.id("b")})
	}
	rec := newRecorder()
	cs := connect(t, url, rec, nil)
	ctx := t.Context()
	c := start(ctx, cs, "c")
	waitFor(t, func() bool { return cl.session("c") != "" })
	b := start(ctx, cs, "b")
	waitFor(t, func() bool { return cl.session("b") != "" })
	a := start(ctx, cs, "a")

	wantLost(t, "a", await(t, a, "call a", atOnce+time.Second), replay.ReasonGenerationMismatch)
	wantLost(t, "b", await(t, b, "call b", atOnce), replay.ReasonGenerationMismatch)
	stillRunning(t, c, "c")
	waitFor(t, func() bool { return len(fencedEvents(rec)) > 0 })
	fenced := fencedEvents(rec)
	if len(fenced) != 1 || fenced[0].Calls != 2 || fenced[0].Session != firstSession || fenced[0].Status != http.StatusConflict ||
		fenced[0].Reason != string(replay.ReasonGenerationMismatch) || fenced[0].Cursor != "a0" ||
		fenced[0].Stream != fmt.Sprintf("POST tools/call id %v", cl.id("a").Raw()) {
		t.Errorf("fenced events = %+v, want one for a's stream, cursor a0, 409 generation_mismatch, Calls 2", fenced)
	}

	waitFor(t, func() bool { return rec.count(client.EventReinitialized) == 1 })
	d := start(ctx, cs, "d")
	if r := await(t, d, "call d", 5*time.Second); r.err != nil || r.text != "d done" {
		t.Errorf("call d = %q, %v; want d done", r.text, r.err)
	}
	if got := cl.session("d"); got != secondSession {
		t.Errorf("call d sent on %q, want the new session %s", got, secondSession)
	}
	if i := s.seenIndex("DELETE " + firstSession); i >= 0 {
		t.Errorf("old session deleted while call c still ran on it (request %d of %v)", i, s.seen)
	}

	close(askC)
	if r := await(t, c, "call c", 5*time.Second); r.err != nil || r.text != "c done" {
		t.Errorf("call c = %q, %v; want c done", r.text, r.err)
	}
	waitFor(t, func() bool { return s.seenIndex("DELETE "+firstSession) >= 0 })
	if s.seenIndex("DELETE "+secondSession) >= 0 {
		t.Errorf("the new session was deleted: %v", s.seen)
	}
}

// TestCloseOpensNoSession: Close DELETEs the session. A server that ends
// the session's streams first, answering their resume 404 while the
// DELETE is still under way (a --stdio gateway whose server takes a
// second to stop), gets no second initialize: a session opened then would
// be left to the server's idle timeout.
func TestCloseOpensNoSession(t *testing.T) {
	s, _, url, done := lostServer(t)
	opened, ended := make(chan struct{}, 1), make(chan struct{})
	s.standalone = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		write(w, "id: g0\nretry: 10\ndata:\n\n")
		select {
		case opened <- struct{}{}:
		default:
		}
		select {
		case <-ended:
		case <-r.Context().Done():
		case <-done:
		}
	}
	s.resume = func(w http.ResponseWriter, r *http.Request, cursor string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"session not found","data":{"reason":"session_not_found"}}}`)
	}
	s.del = func(r *http.Request) {
		close(ended)
		time.Sleep(300 * time.Millisecond) // the server stops meanwhile
	}
	rec := newRecorder()
	cs := connect(t, url, rec, nil)
	select {
	case <-opened:
	case <-time.After(5 * time.Second):
		t.Fatal("no standalone GET within 5s")
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // what a late re-initialization would send
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions != 1 {
		t.Errorf("initialize answered %d times, want 1: requests %v", s.sessions, s.seen)
	}
}

// TestLostRequestsEmptyFailsNone: the standalone GET stream breaks and its
// resume answers 409 with an empty lostRequests while call a streams. No
// call fails: a completes on the old session, which is ended with DELETE
// only after a has ended; a new session replaces it for what follows.
func TestLostRequestsEmptyFailsNone(t *testing.T) {
	s, cl, url, done := lostServer(t)
	aStarted, finishA := make(chan struct{}), make(chan struct{})
	s.standalone = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if r.Header.Get("Mcp-Session-Id") != firstSession {
			write(w, ": open\n\n")
			select {
			case <-r.Context().Done():
			case <-done:
			}
			return
		}
		write(w, "id: g0\nretry: 10\ndata:\n\n")
		select {
		case <-aStarted: // the stream breaks while a streams
		case <-done:
		}
	}
	s.resume = func(w http.ResponseWriter, r *http.Request, cursor string) {
		if cursor != "g0" {
			t.Errorf("resume with cursor %q, want g0", cursor)
		}
		conflict(w, replay.ReasonCursorCompacted, []jsonrpc.ID{})
	}
	script(s, cl, func(name string, w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
		if name == "a" {
			close(aStarted)
			if !until(finishA, r, done) {
				return
			}
		}
		write(w, resultFrame(name+"1", req, name+" done"))
	})
	rec := newRecorder()
	cs := connect(t, url, rec, nil)
	a := start(t.Context(), cs, "a")

	waitFor(t, func() bool { return len(fencedEvents(rec)) == 1 })
	fenced := fencedEvents(rec)[0]
	if fenced.Calls != 0 || fenced.Stream != "GET standalone" || fenced.Cursor != "g0" || fenced.Reason != string(replay.ReasonCursorCompacted) {
		t.Errorf("fenced event = %+v, want GET standalone, cursor g0, cursor_compacted, Calls 0", fenced)
	}
	waitFor(t, func() bool { return rec.count(client.EventReinitialized) == 1 })
	stillRunning(t, a, "a")
	if i := s.seenIndex("DELETE " + firstSession); i >= 0 {
		t.Errorf("old session deleted while call a still ran on it: %v", s.seen)
	}
	close(finishA)
	if r := await(t, a, "call a", 5*time.Second); r.err != nil || r.text != "a done" {
		t.Errorf("call a = %q, %v; want a done", r.text, r.err)
	}
	waitFor(t, func() bool { return s.seenIndex("DELETE "+firstSession) >= 0 })
	e := start(t.Context(), cs, "e")
	if r := await(t, e, "call e", 5*time.Second); r.err != nil || r.text != "e done" || cl.session("e") != secondSession {
		t.Errorf("call e = %q, %v on %q; want e done on %s", r.text, r.err, cl.session("e"), secondSession)
	}
	if n := rec.count(client.EventStreamLost); n != 0 {
		t.Errorf("stream-lost events = %d, want 0 (kinds %v)", n, rec.kinds())
	}
}

// TestLostRequestsAbsentFailsAll: without error.data.lostRequests the 409
// says nothing of which requests are lost, and every call streaming on the
// session fails at once, as with any 409 before the server could tell: a,
// whose stream was refused, and b, whose stream is still open. The session
// is ended with DELETE at once and a new one replaces it.
func TestLostRequestsAbsentFailsAll(t *testing.T) {
	s, cl, url, done := lostServer(t)
	holdB(s, cl, done)
	s.resume = func(w http.ResponseWriter, r *http.Request, cursor string) {
		conflict(w, replay.ReasonGenerationMismatch, nil)
	}
	rec := newRecorder()
	cs := connect(t, url, rec, nil)
	b := start(t.Context(), cs, "b")
	waitFor(t, func() bool { return cl.session("b") != "" })
	a := start(t.Context(), cs, "a")

	wantLost(t, "a", await(t, a, "call a", atOnce+time.Second), replay.ReasonGenerationMismatch)
	wantLost(t, "b", await(t, b, "call b", atOnce), replay.ReasonGenerationMismatch)
	waitFor(t, func() bool { return len(fencedEvents(rec)) > 0 })
	if fenced := fencedEvents(rec); len(fenced) != 1 || fenced[0].Calls != 2 {
		t.Errorf("fenced events = %+v, want one with Calls 2", fenced)
	}
	waitFor(t, func() bool { return s.seenIndex("DELETE "+firstSession) >= 0 })
	waitFor(t, func() bool { return rec.count(client.EventReinitialized) == 1 })
	if got := slices.Index(rec.kinds(), client.EventStreamLost); got >= 0 {
		t.Errorf("events %v include stream_lost, want the calls failed as session lost", rec.kinds())
	}
}

// TestLostRequestsOmitStreamsCall: a 409 on a call's stream whose
// lostRequests does not list that call leaves the call no way to its
// answer: it fails with ErrStreamLost (status 409), not ErrSessionLost, and
// the other call runs on. So does a cursor_compacted 409 that has no
// lostRequests (a server that keeps no ledger of the stream): the
// session serves on (regression: every call of the session failed with
// ErrSessionLost, "may send again", though some had run).
func TestLostRequestsOmitStreamsCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost []jsonrpc.ID
	}{{"listed none", []jsonrpc.ID{}}, {"no list", nil}} {
		t.Run(tc.name, func(t *testing.T) { omitStreamsCall(t, tc.lost) })
	}
}

func omitStreamsCall(t *testing.T, lost []jsonrpc.ID) {
	s, cl, url, done := lostServer(t)
	finishB := make(chan struct{})
	script(s, cl, func(name string, w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
		if name == "b" && until(finishB, r, done) {
			write(w, resultFrame("b1", req, "b done"))
		}
	})
	s.resume = func(w http.ResponseWriter, r *http.Request, cursor string) {
		conflict(w, replay.ReasonCursorCompacted, lost)
	}
	rec := newRecorder()
	cs := connect(t, url, rec, nil)
	b := start(t.Context(), cs, "b")
	waitFor(t, func() bool { return cl.session("b") != "" })
	a := start(t.Context(), cs, "a")

	r := await(t, a, "call a", atOnce+time.Second)
	var ce *client.CallError
	if !errors.Is(r.err, client.ErrStreamLost) || errors.Is(r.err, client.ErrSessionLost) || !errors.As(r.err, &ce) ||
		ce.Status != http.StatusConflict || ce.Reason != string(replay.ReasonCursorCompacted) || ce.Cursor != "a0" {
		t.Errorf("call a = %v; want ErrStreamLost with 409 cursor_compacted at cursor a0", r.err)
	}
	stillRunning(t, b, "b")
	close(finishB)
	if r := await(t, b, "call b", 5*time.Second); r.err != nil || r.text != "b done" {
		t.Errorf("call b = %q, %v; want b done", r.text, r.err)
	}
	waitFor(t, func() bool { return len(fencedEvents(rec)) > 0 })
	if fenced := fencedEvents(rec); len(fenced) != 1 || fenced[0].Calls != 0 {
		t.Errorf("fenced events = %+v, want one with Calls 0", fenced)
	}
}

// TestStreamLostCallRan: a 409 cursor_compacted that lists the refused
// stream's call in error.data.answeredRequests or runningRequests, as
// Tidemark's does, fails it with ErrStreamLost and CallError.Ran, and the
// error says so: sending it again would run it twice. When the lists
// name another call only, Ran is false.
func TestStreamLostCallRan(t *testing.T) {
	for _, tc := range []struct {
		name, list string
		listed     bool
	}{
		{"answered", "answeredRequests", true},
		{"running", "runningRequests", true},
		{"another call answered", "answeredRequests", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cl, url, _ := lostServer(t)
			script(s, cl, nil)
			s.resume = func(w http.ResponseWriter, r *http.Request, cursor string) {
				ran := cl.id("a")
				if !tc.listed {
					ran, _ = jsonrpc.MakeID("not-a")
				}
				conflictData(w, replay.ReasonCursorCompacted, map[string]any{
					"lostRequests": []any{}, tc.list: rawIDs([]jsonrpc.ID{ran})})
			}
			cs := connect(t, url, newRecorder(), nil)
			r := await(t, start(t.Context(), cs, "a"), "call a", atOnce+time.Second)
			var ce *client.CallError
			if !errors.Is(r.err, client.ErrStreamLost) || !errors.As(r.err, &ce) || ce.Status != http.StatusConflict {
				t.Fatalf("call a = %v; want ErrStreamLost with 409", r.err)
			}
			if ce.Ran != tc.listed || strings.Contains(ce.Error(), "; the server says it ran") != tc.listed {
				t.Errorf("call a: Ran %v, error %q; want Ran %v, said in the error", ce.Ran, ce.Error(), tc.listed)
			}
		})
	}
}

// TestCancelledCallEndsRetiredSession: when the caller gives up the last
// call of a session retired by a 409 that listed its lost requests, the
// cancellation goes to that session, which is then ended with DELETE.
func TestCancelledCallEndsRetiredSession(t *testing.T) {
	s, cl, url, done := lostServer(t)
	holdB(s, cl, done)
	s.resume = func(w http.ResponseWriter, r *http.Request, cursor string) {
		conflict(w, replay.ReasonGenerationMismatch, []jsonrpc.ID{cl.id("a")})
	}
	rec := newRecorder()
	cs := connect(t, url, rec, nil)
	bctx, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	b := start(bctx, cs, "b")
	waitFor(t, func() bool { return cl.session("b") != "" })
	a := start(t.Context(), cs, "a")
	wantLost(t, "a", await(t, a, "call a", atOnce+time.Second), replay.ReasonGenerationMismatch)
	waitFor(t, func() bool { return rec.count(client.EventReinitialized) == 1 })
	stillRunning(t, b, "b")
	if s.seenIndex("DELETE "+firstSession) >= 0 {
		t.Fatalf("old session deleted while call b still ran on it: %v", s.seen)
	}
	cancelB()
	if r := await(t, b, "call b", 5*time.Second); !errors.Is(r.err, context.Canceled) {
		t.Errorf("call b = %q, %v after its context was cancelled, want context.Canceled", r.text, r.err)
	}
	waitFor(t, func() bool { return s.seenIndex("DELETE "+firstSession) >= 0 })
	if c, d := s.seenIndex("POST "+firstSession+" notifications/cancelled"), s.seenIndex("DELETE "+firstSession); c < 0 || c > d {
		t.Errorf("requests: %v; want notifications/cancelled on %s before its DELETE", s.seen, firstSession)
	}
	if n := rec.count(client.EventSessionNotFound); n != 0 {
		t.Errorf("session-not-found events = %d, want 0", n)
	}
}

// TestNextCallAfterFenceGoesToNewSession: a's resume answers 409 listing
// a, and the caller sends its next call, d, the moment it hears of the
// fence (here from OnEvent, before the transport has done anything else).
// d goes to the new session and completes; the old session is ended with
// DELETE. Regression: the session was retired only after its calls had
// failed and the fence was reported, so a call sent in between went to the
// old session, which was then ended under it (404 session_not_found).
func TestNextCallAfterFenceGoesToNewSession(t *testing.T) {
	s, cl, url, _ := lostServer(t)
	script(s, cl, func(name string, w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
		if name == "d" {
			write(w, resultFrame("d1", req, "d done"))
		}
	})
	s.resume = func(w http.ResponseWriter, r *http.Request, cursor string) {
		conflict(w, replay.ReasonGenerationMismatch, []jsonrpc.ID{cl.id("a")})
	}
	rec := newRecorder()
	ctx := t.Context()
	var session atomic.Pointer[mcp.ClientSession]
	d := make(chan (<-chan callResult), 1)
	cs := connect(t, url, rec, func(tr *client.Transport) {
		tr.OnEvent = func(e client.Event) {
			rec.onEvent(e)
			if e.Kind != client.EventFenced {
				return
			}
			d <- start(ctx, session.Load(), "d")
			for deadline := time.Now().Add(2 * time.Second); cl.session("d") == "" && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
	})
	session.Store(cs)
	wantLost(t, "a", await(t, start(ctx, cs, "a"), "call a", atOnce+time.Second), replay.ReasonGenerationMismatch)
	if r := await(t, <-d, "call d", 5*time.Second); r.err != nil || r.text != "d done" {
		t.Errorf("call d = %q, %v; want d done", r.text, r.err)
	}
	if got := cl.session("d"); got != secondSession {
		t.Errorf("call d sent on %q, want the new session %s", got, secondSession)
	}
	waitFor(t, func() bool { return s.seenIndex("DELETE "+firstSession) >= 0 })
}

// TestFenceWaitsForCallOnItsWay: call d's POST has reached the server,
// which has not answered it yet, when a's resume answers 409 listing a,
// the session's only other call. The old session is ended with DELETE
// only after d, which it accepted, has completed on it. Regression: a
// call counted on its session only once its answer's headers came, so the
// fence found no call left and sent the DELETE while d was on its way,
// ending d under it (404 session_not_found, "may have run").
func TestFenceWaitsForCallOnItsWay(t *testing.T) {
	s, cl, url, done := lostServer(t)
	fenced := make(chan struct{})
	var deletedEarly atomic.Bool
	s.call = func(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
		name := cl.note(r, req)
		if name != "d" {
			write(w, fmt.Sprintf("id: %s0\nretry: 10\ndata:\n\n", name))
			return
		}
		if !until(fenced, r, done) {
			return
		}
		time.Sleep(200 * time.Millisecond) // room for a DELETE sent too early
		deletedEarly.Store(s.seenIndex("DELETE "+firstSession) >= 0)
		write(w, "id: d0\ndata:\n\n", resultFrame("d1", req, "d done"))
	}
	s.resume = func(w http.ResponseWriter, r *http.Request, cursor string) {
		conflict(w, replay.ReasonGenerationMismatch, []jsonrpc.ID{cl.id("a")})
	}
	rec := newRecorder()
	ctx := t.Context()
	cs := connect(t, url, rec, func(tr *client.Transport) {
		tr.OnEvent = func(e client.Event) {
			rec.onEvent(e)
			if e.Kind == client.EventFenced {
				close(fenced)
			}
		}
	})
	d := start(ctx, cs, "d")
	waitFor(t, func() bool { return cl.session("d") != "" })
	wantLost(t, "a", await(t, start(ctx, cs, "a"), "call a", atOnce+time.Second), replay.ReasonGenerationMismatch)
	if r := await(t, d, "call d", 5*time.Second); r.err != nil || r.text != "d done" {
		t.Errorf("call d = %q, %v; want d done", r.text, r.err)
	}
	if deletedEarly.Load() {
		t.Error("the old session was deleted while call d's POST to it was on its way")
	}
	if got := cl.session("d"); got != firstSession {
		t.Errorf("call d sent on %q, want %s (sent before the fence)", got, firstSession)
	}
	waitFor(t, func() bool { return s.seenIndex("DELETE "+firstSession) >= 0 })
}
