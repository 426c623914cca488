package connect_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/replay"
)

// confirming is a scripted MCP server of the stateful era whose sessions
// are S1, S2... in the order of the initializes it gets. Each tools/call
// is answered on an SSE stream that first asks the client
// elicitation/create, with id 1 on every session as a server that numbers
// its requests per session does, and the question the call's
// arguments.question; the call's result is then the action of the
// answer. The call's stream of a session in cut ends when the test closes
// closed, without the answer. Only session S1 has a standalone stream,
// when standalone is not nil: it sends a priming event (id S1-g1) and
// ends when the test closes standalone; other sessions have none (GET
// without Last-Event-ID: 405). Every resume (GET with Last-Event-ID) is
// answered refusal. It records every request it gets (log).
type confirming struct {
	t          *testing.T
	cut        map[string]bool
	refusal    func(w http.ResponseWriter, lastEventID string)
	closed     chan struct{} // closed by the test: the call streams of the sessions in cut end
	standalone chan struct{} // closed by the test: S1's standalone stream ends
	// withdraw: the server cancels its question right after asking it
	// (notifications/cancelled, reason "timed out"), and answers the call
	// "withdrawn" once the test closes closed.
	withdraw bool

	mu       sync.Mutex
	sessions int
	log      []string
	answers  map[string]chan string // by session: the actions of the answers it got
}

func newConfirming(t *testing.T, refusal func(w http.ResponseWriter, lastEventID string), cut ...string) (*confirming, *httptest.Server) {
	c := &confirming{t: t, cut: make(map[string]bool), refusal: refusal, closed: make(chan struct{}), answers: make(map[string]chan string)}
	for _, s := range cut {
		c.cut[s] = true
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return c, srv
}

// record notes one request the server got.
func (c *confirming) record(format string, args ...any) {
	c.mu.Lock()
	c.log = append(c.log, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

// seen returns the requests recorded so far whose text passes keep.
func (c *confirming) seen(keep func(string) bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.log {
		if keep(l) {
			out = append(out, l)
		}
	}
	return out
}

func (c *confirming) answered(sid string) chan string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.answers[sid]
	if ch == nil {
		ch = make(chan string, 4)
		c.answers[sid] = ch
	}
	return ch
}

func (c *confirming) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get("Mcp-Session-Id")
	switch r.Method {
	case http.MethodDelete:
		c.record("DELETE %s", sid)
		return
	case http.MethodGet:
		last := r.Header.Get("Last-Event-ID")
		if last == "" && sid == "S1" && c.standalone != nil {
			c.record("GET %s", sid)
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "id: S1-g1\ndata: \n\n")
			w.(http.Flusher).Flush()
			select {
			case <-c.standalone:
			case <-r.Context().Done():
			}
			return
		}
		if last == "" {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		c.record("GET %s %s", sid, last)
		c.refusal(w, last)
		return
	}
	body, _ := io.ReadAll(r.Body)
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if a, ok := msg.(*jsonrpc.Response); ok {
		var res struct {
			Action string `json:"action"`
		}
		json.Unmarshal(a.Result, &res)
		c.record("POST %s answer %v %s", sid, a.ID.Raw(), res.Action)
		c.answered(sid) <- res.Action
		w.WriteHeader(http.StatusAccepted)
		return
	}
	req := msg.(*jsonrpc.Request)
	id, _ := json.Marshal(req.ID.Raw())
	switch {
	case req.Method == "initialize":
		c.mu.Lock()
		c.sessions++
		sid = "S" + strconv.Itoa(c.sessions)
		c.mu.Unlock()
		c.record("POST - initialize -> %s", sid)
		w.Header().Set("Mcp-Session-Id", sid)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"confirming","version":"1"}}}`, id)
	case !req.IsCall():
		c.record("POST %s %s", sid, req.Method)
		w.WriteHeader(http.StatusAccepted)
	case req.Method == "tools/call":
		c.record("POST %s tools/call %s", sid, id)
		var p struct {
			Arguments struct {
				Question string `json:"question"`
			} `json:"arguments"`
		}
		json.Unmarshal(req.Params, &p)
		q, _ := json.Marshal(p.Arguments.Question)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "id: %s-1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"elicitation/create\",\"params\":{\"mode\":\"form\",\"message\":%s,\"requestedSchema\":{\"type\":\"object\",\"properties\":{}}}}\n\n", sid, q)
		w.(http.Flusher).Flush()
		if c.withdraw {
			fmt.Fprintf(w, "id: %s-c\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1,\"reason\":\"timed out\"}}\n\n", sid)
			w.(http.Flusher).Flush()
			select {
			case <-c.closed:
				fmt.Fprintf(w, "id: %s-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"withdrawn\"}]}}\n\n", sid, id)
			case <-r.Context().Done():
			}
			return
		}
		if c.cut[sid] {
			select {
			case <-c.closed:
			case <-r.Context().Done():
			}
			return
		}
		select {
		case action := <-c.answered(sid):
			fmt.Fprintf(w, "id: %s-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":%q}]}}\n\n", sid, id, action)
		case <-r.Context().Done():
		case <-time.After(hostTimeout):
		}
	default:
		c.record("POST %s %s %s", sid, req.Method, id)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, id)
	}
}

// refuse writes a refusal of the server's: status, and error.data as
// data.
func refuse(status int, data string) func(w http.ResponseWriter, lastEventID string) {
	return func(w http.ResponseWriter, _ string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"refused","data":%s}}`, data)
	}
}

// TestServerRequestIDsAcrossSessions: the server asks the host, through
// elicitation/create id 1, a question on session S1; S1 is then lost (a
// 409 listing the call, or a 404) and the host's next call asks another
// question on S2, again under the server's id 1. The host sees each
// question under an id of the bridge's own, "tidemark-1" then
// "tidemark-2"; it gets notifications/cancelled for the first (MCP
// 2025-11-25, "Cancellation") beside the lost call's request_lost error;
// its late answer to the first reaches no session, and its answer to the
// second reaches S2 under the server's id 1.
func TestServerRequestIDsAcrossSessions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refusal func(w http.ResponseWriter, lastEventID string)
		why     string
	}{
		{"409 lists the call", refuse(http.StatusConflict, `{"reason":"generation_mismatch","lostRequests":["c1"]}`),
			"the MCP session that sent this request has ended, so an answer would reach no one"},
		{"404", refuse(http.StatusNotFound, `{"reason":"session_not_found"}`),
			"the MCP session that sent this request was lost (HTTP 404 session_not_found), so an answer would reach no one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, url := newConfirming(t, tc.refusal, "S1")
			h := startBridge(t, url.URL, connect.Options{Protocol: connect.ProtocolStateful, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
			h.initialize(`{"elicitation":{}}`)
			h.send(`{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"confirm","arguments":{"question":"ok to READ the file?"}}}`)
			read := h.request()
			if want := `{"mode":"form","message":"ok to READ the file?","requestedSchema":{"type":"object","properties":{}}}`; read.Method != "elicitation/create" || read.ID.Raw() != "tidemark-1" || !sameJSON(t, read.Params, want) {
				t.Fatalf("the host got %s id %v %s, want elicitation/create id \"tidemark-1\" %s", read.Method, read.ID.Raw(), read.Params, want)
			}
			close(srv.closed) // S1's call stream ends; its resume is refused

			cancelled := h.next()
			if n, ok := cancelled.(*jsonrpc.Request); !ok || n.Method != "notifications/cancelled" || !sameJSON(t, n.Params, `{"requestId":"tidemark-1","reason":"`+tc.why+`"}`) {
				t.Fatalf("the host got %s, want notifications/cancelled of tidemark-1 with the reason %q", describe(cancelled), tc.why)
			}
			lost, before := h.answer("c1")
			if len(before) != 0 {
				t.Errorf("the host got %d messages between the cancellation and c1's answer: %v", len(before), before)
			}
			wantFailure(t, lost, replay.ReasonRequestLost, "lost this call with its session")

			h.send(`{"jsonrpc":"2.0","id":"c2","method":"tools/call","params":{"name":"confirm","arguments":{"question":"ok to DELETE everything?"}}}`)
			del := h.request()
			if del.Method != "elicitation/create" || del.ID.Raw() != "tidemark-2" || !sameJSON(t, del.Params, `{"mode":"form","message":"ok to DELETE everything?","requestedSchema":{"type":"object","properties":{}}}`) {
				t.Fatalf("the host got %s id %v %s, want elicitation/create id \"tidemark-2\" asking to DELETE", del.Method, del.ID.Raw(), del.Params)
			}
			h.reply(read, `{"action":"accept","content":{}}`) // the user's late answer to the READ question
			h.reply(del, `{"action":"decline"}`)
			r, _ := h.answer("c2")
			if got := toolText(t, r); got != "decline" {
				t.Errorf("c2's result: %q, want %q (the host's answer to the DELETE question)", got, "decline")
			}
			answers := srv.seen(func(l string) bool { f := strings.Fields(l); return len(f) > 2 && f[2] == "answer" })
			if want := []string{"POST S2 answer 1 decline"}; !slices.Equal(answers, want) {
				t.Errorf("the answers the server got: %q, want %q", answers, want)
			}
		})
	}
}

// describe returns a message for a test's failure.
func describe(m jsonrpc.Message) string {
	data, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		return fmt.Sprintf("%T", m)
	}
	return string(data)
}

// TestSecondInitializeEndsOldSession: a host that sends initialize again
// on the same bridge gets a new session (S2), and the old one (S1) is
// ended with DELETE once its last call ends (MCP 2025-11-25, "Session
// Management"), at once when it carries none. The call still running on
// S1 gets its answer: the host's answer to S1's question reaches S1.
func TestSecondInitializeEndsOldSession(t *testing.T) {
	t.Run("a call runs on the old session", func(t *testing.T) {
		srv, url := newConfirming(t, refuse(http.StatusNotFound, `{}`))
		h := startBridge(t, url.URL, connect.Options{Protocol: connect.ProtocolStateful})
		h.initialize(`{"elicitation":{}}`)
		h.send(`{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"confirm","arguments":{"question":"ok?"}}}`)
		ask := h.request()
		h.initialize(`{"elicitation":{}}`)
		h.reply(ask, `{"action":"accept","content":{}}`)
		r, _ := h.answer("c1")
		if got := toolText(t, r); got != "accept" {
			t.Errorf("c1's result: %q, want %q", got, "accept")
		}
		srv.wantLog(t, []string{"POST - initialize -> S1", "POST S1 notifications/initialized", `POST S1 tools/call "c1"`,
			"POST - initialize -> S2", "POST S2 notifications/initialized", "POST S1 answer 1 accept", "DELETE S1"})
	})
	t.Run("no call on the old session", func(t *testing.T) {
		srv, url := newConfirming(t, refuse(http.StatusNotFound, `{}`))
		h := startBridge(t, url.URL, connect.Options{Protocol: connect.ProtocolStateful})
		h.initialize(`{}`)
		h.send(`{"jsonrpc":"2.0","id":"again","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`)
		if r, _ := h.answer("again"); r.Error != nil {
			t.Fatalf("the second initialize: %v", r.Error)
		}
		srv.wantLog(t, []string{"POST - initialize -> S1", "POST S1 notifications/initialized", "POST - initialize -> S2", "DELETE S1"})
	})
}

// wantLog requires the requests the server got to become want within
// hostTimeout, and to stay so for a moment (no DELETE comes late).
func (c *confirming) wantLog(t *testing.T, want []string) {
	t.Helper()
	all := func(string) bool { return true }
	deadline := time.Now().Add(hostTimeout)
	for !slices.Equal(c.seen(all), want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if got := c.seen(all); !slices.Equal(got, want) {
		t.Errorf("the server got:\n%q\nwant:\n%q", got, want)
	}
}

// TestLostCallFailsBeforeListChanged: the server refuses the resume of
// S1's standalone stream with a 409 that lists no lost request (that
// stream carried none), so the bridge opens S2 while S1's call c1 is
// still in flight; c1's own stream is then refused with a 409 that lists
// it. The host gets the lost call's request_lost error (after the
// notifications/cancelled of its open question) before
// notifications/tools/list_changed, as docs/connect.md tells: the lost
// calls fail first, then the host hears of the new session.
func TestLostCallFailsBeforeListChanged(t *testing.T) {
	srv, url := newConfirming(t, func(w http.ResponseWriter, last string) {
		lost := `[]`
		if last == "S1-1" {
			lost = `["c1"]`
		}
		refuse(http.StatusConflict, `{"reason":"generation_mismatch","lostRequests":`+lost+`}`)(w, last)
	}, "S1")
	srv.standalone = make(chan struct{})
	h := startBridge(t, url.URL, connect.Options{Protocol: connect.ProtocolStateful, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	h.initialize(`{"elicitation":{}}`)
	h.send(`{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"confirm","arguments":{"question":"ok?"}}}`)
	h.request()
	close(srv.standalone)
	srv.wantLog(t, []string{"POST - initialize -> S1", "POST S1 notifications/initialized", "GET S1", `POST S1 tools/call "c1"`,
		"GET S1 S1-g1", "POST - initialize -> S2", "POST S2 notifications/initialized"})
	close(srv.closed) // c1's stream ends; its resume is refused, listing c1

	var got []string
	for len(got) < 3 {
		switch m := h.next().(type) {
		case *jsonrpc.Request:
			got = append(got, m.Method)
		case *jsonrpc.Response:
			got = append(got, fmt.Sprintf("answer %v", m.ID.Raw()))
			wantFailure(t, m, replay.ReasonRequestLost, "lost this call with its session")
		}
	}
	if want := []string{"notifications/cancelled", "answer c1", "notifications/tools/list_changed"}; !slices.Equal(got, want) {
		t.Errorf("the host got %q, want %q", got, want)
	}
}

// TestServerCancelsItsRequest: the server cancels its own question
// (notifications/cancelled of its request id 1); the host gets the
// cancellation under the id it saw the question under, tidemark-1, with
// the server's reason, and its answer that comes after it reaches the
// server not at all (MCP 2025-11-25, "Cancellation": the receiver of a
// cancellation does not answer the request).
func TestServerCancelsItsRequest(t *testing.T) {
	srv, url := newConfirming(t, refuse(http.StatusNotFound, `{}`))
	srv.withdraw = true
	h := startBridge(t, url.URL, connect.Options{Protocol: connect.ProtocolStateful})
	h.initialize(`{"elicitation":{}}`)
	h.send(`{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"confirm","arguments":{"question":"ok?"}}}`)
	ask := h.request()
	if ask.ID.Raw() != "tidemark-1" {
		t.Fatalf("the question's id: %v, want \"tidemark-1\"", ask.ID.Raw())
	}
	cancelled := h.next()
	if n, ok := cancelled.(*jsonrpc.Request); !ok || n.Method != "notifications/cancelled" || !sameJSON(t, n.Params, `{"requestId":"tidemark-1","reason":"timed out"}`) {
		t.Fatalf("the host got %s, want notifications/cancelled of tidemark-1, reason timed out", describe(cancelled))
	}
	h.reply(ask, `{"action":"accept","content":{}}`)
	h.send(`{"jsonrpc":"2.0","id":"p","method":"ping"}`) // sent after the answer, which is dropped first
	h.answer("p")
	close(srv.closed)
	r, _ := h.answer("c1")
	if got := toolText(t, r); got != "withdrawn" {
		t.Errorf("c1's result: %q, want %q", got, "withdrawn")
	}
	srv.wantLog(t, []string{"POST - initialize -> S1", "POST S1 notifications/initialized", `POST S1 tools/call "c1"`, `POST S1 ping "p"`})
}
