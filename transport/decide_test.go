// decide_test.go walks the table (DESIGN.md, "The replay decision") row by row
// through the real stack over HTTP.

package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
)

// The tests in this file walk the replay decision table (DESIGN.md, "The
// replay decision") row by row, through the real stack over HTTP.
//
// Event layout of a fresh 2025-11-25 session used throughout: a stream's
// number is the sequence of its opening (priming) event, so initialize is
// stream 1 (seq 1 priming, seq 2 response), the first call after it is
// stream 3 (seq 3 priming, then its messages), and so on. The standalone
// GET stream is stream 0.

// Row 1: no Mcp-Session-Id.
func TestDecideNoSessionID(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	countdown(t, ctx, s, 2, 3, "p")
	before := st.bounds(t, s.Token)

	req, _ := s.NewRequest(ctx, http.MethodGet, nil)
	req.Header.Del("Mcp-Session-Id")
	req.Header.Set("Last-Event-ID", cursorOf(s, 1, 3, 4))
	resp, err := st.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	se := refusalOf(t, resp, http.StatusBadRequest, "session_required")
	if se.Body.Code != -32600 {
		t.Fatalf("code = %d, want -32600", se.Body.Code)
	}
	if after := st.bounds(t, s.Token); after != before {
		t.Fatalf("bounds changed by a refused resume: %+v → %+v", before, after)
	}
}

// Row 2: unknown token.
func TestDecideUnknownToken(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	countdown(t, ctx, s, 2, 3, "p")

	// A token never issued, and a cursor that would be valid for it.
	ghost := st.client.SessionFor("NEVERISSUEDTOKEN0000000000", "2025-11-25")
	_, err := ghost.Resume(ctx, cursorOf(ghost, 1, 3, 4))
	se := wantRefusal(t, err, http.StatusNotFound, "session_not_found")
	if se.Body.Code != -32001 {
		t.Fatalf("code = %d, want -32001", se.Body.Code)
	}
	// The live session's own cursor under the unknown token: still 404.
	_, err = ghost.Resume(ctx, cursorOf(s, 1, 3, 4))
	wantRefusal(t, err, http.StatusNotFound, "session_not_found")
}

// Row 2: a deleted token.
func TestDecideDeletedToken(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	countdown(t, ctx, s, 2, 3, "p")
	if err := s.Delete(ctx); err != nil {
		t.Fatalf("DELETE: %v", err)
	}
	_, err := s.Resume(ctx, cursorOf(s, 1, 3, 4))
	wantRefusal(t, err, http.StatusNotFound, "session_not_found")
}

// Row 2: a superseded token (the client initialized again while holding
// it).
func TestDecideSupersededToken(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	old := st.initialize(t, ctx, "")
	countdown(t, ctx, old, 2, 3, "p")

	// Initialize again, presenting the old token.
	c := st.clientWith(http.Header{"Mcp-Session-Id": {old.Token}})
	s2, err := c.Initialize(ctx, "")
	if err != nil {
		t.Fatalf("second initialize: %v", err)
	}
	if s2.Token == old.Token {
		t.Fatal("the second initialize reissued the old token")
	}
	status, _, err := st.h.Registry().Status(ctx, old.Token)
	if err != nil || status != replay.Superseded {
		t.Fatalf("old token status = %v, %v; want superseded", status, err)
	}
	_, err = old.Resume(ctx, cursorOf(old, 1, 3, 4))
	wantRefusal(t, err, http.StatusNotFound, "session_not_found")
	resp, err := old.Post(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	refusalOf(t, resp, http.StatusNotFound, "session_not_found")
	// The new session works (the Mcp-Session-Id it sent was the old one;
	// it uses its own from now on).
	s2.Client = st.client
	countdown(t, ctx, s2, 2, 2, "q")
}

// Row 4, a generation the session never had: a cursor of generation 3
// on a session at generation 1 (a store restored from a backup behind a
// session that went on, or a made-up cursor) is refused 409 with no
// lists, and ends generation 1: the session continues above generation
// 3, so that no id of a generation a client may hold is issued again
// (regression, nc16 N1: the restored generation went on and reused the
// ids of a call the client had read).
func TestDecideGenerationAbove(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	countdown(t, ctx, s, 2, 3, "p") // gen 1, stream 3, seq 3..7
	above := cursorOf(s, 3, 3, 7)
	req, _ := s.NewRequest(ctx, http.MethodGet, nil)
	req.Header.Set("Last-Event-ID", above)
	resp, err := st.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	se := refusalOf(t, resp, http.StatusConflict, "generation_mismatch")
	d := replay.Decision{Outcome: replay.GenerationMismatch, Cursor: parseCursor(t, above), Session: replay.Session{Generation: 1}}
	if se.Body.Message != d.Message() || len(se.Body.Data) != 3 {
		t.Fatalf("409 %q, data %v; want %q with reason, generation and cursorGeneration only", se.Body.Message, se.Body.Data, d.Message())
	}
	// The standalone stream's cursor of a generation above gets no lists
	// either (regression, nc17 F4: its 409 said lostRequests [] and "no
	// request of that stream is lost").
	s2 := st.initialize(t, ctx, "")
	countdown(t, ctx, s2, 2, 3, "p")
	standalone := cursorOf(s2, 3, 0, 7)
	_, err = s2.Resume(ctx, standalone)
	se2 := wantRefusal(t, err, http.StatusConflict, "generation_mismatch")
	d2 := replay.Decision{Outcome: replay.GenerationMismatch, Cursor: parseCursor(t, standalone), Session: replay.Session{Generation: 1}}
	if se2.Body.Message != d2.Message() || len(se2.Body.Data) != 3 {
		t.Fatalf("standalone stream: 409 %q, data %v; want %q with reason, generation and cursorGeneration only", se2.Body.Message, se2.Body.Data, d2.Message())
	}
	evs := countdown(t, ctx, s, 3, 2, "q")
	if c := parseCursor(t, evs[0].ID); c.Generation != 4 {
		t.Fatalf("the next call's priming cursor %s is of generation %d, want 4: above the generation the resume named", evs[0].ID, c.Generation)
	}
	_, err = s.Resume(ctx, above)
	if se := wantRefusal(t, err, http.StatusConflict, "generation_mismatch"); !strings.Contains(se.Body.Message, "cursor generation 3 != live generation 4") {
		t.Fatalf("the same cursor once the session is at generation 4: %q, want generation 3 != live generation 4", se.Body.Message)
	}
}

// Row 3: a cursor that does not parse.
func TestDecideCursorMalformed(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	countdown(t, ctx, s, 2, 3, "p")
	before := st.bounds(t, s.Token)
	_, err := s.Resume(ctx, "not-a-cursor")
	se := wantRefusal(t, err, http.StatusBadRequest, "cursor_malformed")
	if se.Body.Code != -32600 {
		t.Fatalf("code = %d, want -32600", se.Body.Code)
	}
	if after := st.bounds(t, s.Token); after != before {
		t.Fatalf("bounds changed by a refused resume: %+v → %+v", before, after)
	}
}

// Row 4, the case the rule comes from (DESIGN.md, "Where the rule comes
// from"): the session was re-created (generation 2) and has
// new events; a generation-1 cursor whose sequence is numerically within
// the log is refused with 409 and nothing is replayed.
func TestDecideGenerationMismatch(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	evs := countdown(t, ctx, s, 2, 3, "p") // seq 3..7, stream 3, gen 1
	old := evs[1].ID                       // first progress: seq 4
	if c := parseCursor(t, old); c != (replay.Cursor{Tag: replay.Tag(s.Token), Generation: 1, Stream: 3, Sequence: 4}) {
		t.Fatalf("first progress cursor = %s, want gen 1 stream 3 seq 4", old)
	}

	live, err := st.h.Registry().Recreate(ctx, s.Token)
	if err != nil {
		t.Fatalf("Recreate: %v", err)
	}
	if live.Generation() != 2 {
		t.Fatalf("generation after Recreate = %d, want 2", live.Generation())
	}
	// Generation 2 serves without a new initialize, and its sequences
	// continue: the second countdown is gen 2, stream 8, seq 8..12.
	evs2 := countdown(t, ctx, s, 3, 3, "q")
	if c := parseCursor(t, evs2[0].ID); c.Generation != 2 || c.Stream != 8 || c.Sequence != 8 {
		t.Fatalf("generation 2 priming cursor = %s, want gen 2 stream 8 seq 8", evs2[0].ID)
	}
	b := st.bounds(t, s.Token)
	if b.Generation != 2 || b.Floor != 8 || b.HWM != 12 {
		t.Fatalf("bounds = %+v, want gen 2 floor 8 HWM 12", b)
	}

	// lost is error.data.lostRequests as JSON: the countdown (id 2)
	// finished, its response stored after the old cursor, so no request
	// of that stream is lost (sending it again would run it twice), and
	// answered, error.data.answeredRequests, lists it: the client never
	// receives its response. No stream of generation 1 is known at the
	// other cursors, so both keys are absent ("").
	for _, tc := range []struct{ name, cursor, lost, answered string }{
		{"old cursor", old, `[]`, `[2]`},
		// Same stream and sequence as a live generation-2 event: in range
		// of the live log, still another generation.
		{"gen 1 cursor inside the gen 2 range", cursorOf(s, 1, 8, 9), "", ""},
		{"gen 1 cursor at the gen 2 HWM", cursorOf(s, 1, 8, 12), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := s.NewRequest(ctx, http.MethodGet, nil)
			req.Header.Set("Last-Event-ID", tc.cursor)
			resp, err := st.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			se := refusalOf(t, resp, http.StatusConflict, "generation_mismatch")
			c := parseCursor(t, tc.cursor)
			keys := 3
			if tc.lost != "" {
				keys++
				if lost, _ := json.Marshal(se.Body.Data["lostRequests"]); string(lost) != tc.lost {
					t.Fatalf("error.data.lostRequests = %s, want %s", lost, tc.lost)
				}
			} else {
				// No ledger of the stream: the session cannot tell which
				// requests it carried; of a generation never issued, the
				// decision's own message says so.
				d := replay.Decision{Outcome: replay.GenerationMismatch, Cursor: c, Session: replay.Session{Generation: 2}}
				want := d.Message()
				if c.Generation <= 2 {
					want = d.Cause() + unknownRequests
				}
				if se.Body.Message != want {
					t.Errorf("error.message = %q, want %q", se.Body.Message, want)
				}
			}
			if tc.answered != "" {
				keys++
				if answered, _ := json.Marshal(se.Body.Data["answeredRequests"]); string(answered) != tc.answered {
					t.Fatalf("error.data.answeredRequests = %s, want %s", answered, tc.answered)
				}
				// Nothing is lost: the message sends nothing again,
				// and says why the answered request must not be.
				if want := "cursor generation 1 != live generation 2: the session's state was re-created, refusing cross-generation replay; " +
					"no request of that stream is lost: send none of them again; the requests " + tc.answered +
					" of that stream finished, but their responses come after the cursor and cannot be sent: do not send them again, since they ran"; se.Body.Message != want {
					t.Errorf("error.message = %q, want %q", se.Body.Message, want)
				}
			}
			if se.Body.Data["generation"] != json.Number("2") ||
				se.Body.Data["cursorGeneration"] != json.Number(jsonUint(c.Generation)) || len(se.Body.Data) != keys {
				t.Fatalf("error.data = %v, want reason, generation 2, cursorGeneration %d, lostRequests %q", se.Body.Data, c.Generation, tc.lost)
			}
			if after := st.bounds(t, s.Token); after != b {
				t.Fatalf("a refused resume changed the log: %+v → %+v", b, after)
			}
		})
	}
	// The re-created session still works and still resumes its own streams.
	st2, err := s.Resume(ctx, evs2[1].ID)
	if err != nil {
		t.Fatalf("resume in generation 2: %v", err)
	}
	defer st2.Close()
	got, err := st2.Collect()
	if err != nil {
		t.Fatal(err)
	}
	wantResumePriming(t, got[0], evs2[1].ID, time.Second)
	if want := []string{evs2[2].ID, evs2[3].ID, evs2[4].ID}; !equal(ids(got[1:]), want) {
		t.Fatalf("resumed ids = %v, want a priming event then %v", ids(got), want)
	}
}

// echoStreams calls echo on s with the ids from to to, one after the
// other, and returns each call's stream: its priming event and response.
func echoStreams(t *testing.T, ctx context.Context, s *mcptest.Session, from, to int64) [][]mcptest.Event {
	t.Helper()
	var streams [][]mcptest.Event
	for i := from; i <= to; i++ {
		cs, err := s.Call(ctx, mcptest.ToolCall(i, "echo", map[string]any{"text": "e"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := cs.Collect()
		cs.Close()
		if err != nil || len(evs) != 2 {
			t.Fatalf("echo %d: %v, %v", i, evs, err)
		}
		streams = append(streams, evs)
	}
	return streams
}

// Row 5: a cursor below the replay floor, and the floor itself (accepted).
func TestDecideCursorCompacted(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{Retention: eventlog.Options{MaxEvents: 4}}, nil)
	s := st.initialize(t, ctx, "")
	// Three echo calls: streams 3, 5, 7 with seq (3,4), (5,6), (7,8).
	streams := echoStreams(t, ctx, s, 2, 4)
	// Retention runs right after each append, so the client may read the
	// last response before its append has trimmed the log: wait for it.
	b := st.bounds(t, s.Token)
	for deadline := time.Now().Add(5 * time.Second); b.Floor < 5 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		b = st.bounds(t, s.Token)
	}
	if b.Floor != 5 || b.HWM != 8 || b.Events != 4 {
		t.Fatalf("bounds = %+v, want floor 5 HWM 8, 4 events", b)
	}

	// At seq 3 (the first echo's priming) its call had finished with its
	// response at seq 4, which the client has not read and no resume can
	// send: answeredRequests lists it (none is lost). At seq 4 the client
	// read that response: nothing is listed.
	// Either way the message sends nothing again.
	for _, tc := range []struct{ cursor, answered, message string }{
		{streams[0][0].ID, "[2]", "cursor sequence 3 is below the replay floor 5: events were compacted; the stream cannot be resumed; " +
			"no request of that stream is lost: send none of them again; the requests [2] of that stream finished, " +
			"but their responses come after the cursor and cannot be sent: do not send them again, since they ran"},
		{streams[0][1].ID, "null", "cursor sequence 4 is below the replay floor 5: events were compacted; the stream cannot be resumed; " +
			"no request of that stream is lost: send none of them again"},
	} {
		_, err := s.Resume(ctx, tc.cursor)
		se := wantRefusal(t, err, http.StatusConflict, "cursor_compacted")
		if se.Body.Message != tc.message {
			t.Errorf("error.message = %q, want %q", se.Body.Message, tc.message)
		}
		c := parseCursor(t, tc.cursor)
		if se.Body.Data["floor"] != json.Number("5") || se.Body.Data["cursorSequence"] != json.Number(jsonUint(c.Sequence)) {
			t.Fatalf("error.data = %v, want floor 5, cursorSequence %d", se.Body.Data, c.Sequence)
		}
		lost, _ := json.Marshal(se.Body.Data["lostRequests"])
		answered, _ := json.Marshal(se.Body.Data["answeredRequests"])
		if string(lost) != "[]" || string(answered) != tc.answered {
			t.Errorf("cursor seq %d: lostRequests %s, answeredRequests %s; want [] and %s", c.Sequence, lost, answered, tc.answered)
		}
	}
	if after := st.bounds(t, s.Token); after != b {
		t.Fatalf("refused resumes changed the log: %+v → %+v", b, after)
	}

	// cursor = floor (seq 5, stream 5's priming): accepted; replays the
	// rest of stream 5 (its response) and closes.
	floor := streams[1][0].ID
	if c := parseCursor(t, floor); c.Sequence != 5 {
		t.Fatalf("second echo's priming at seq %d, want 5", c.Sequence)
	}
	rs, err := s.Resume(ctx, floor)
	if err != nil {
		t.Fatalf("resume at the floor: %v", err)
	}
	defer rs.Close()
	got, err := rs.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("resume at the floor: %v, want priming and the response", got)
	}
	wantResumePriming(t, got[0], floor, time.Second)
	if got[1].ID != streams[1][1].ID || !got[1].IsResponseTo(mcptest.ID(3)) {
		t.Fatalf("resume at the floor: %v, want the response to 3 as %s", got[1].Event, streams[1][1].ID)
	}
}

// Row 6: a cursor above the high-water mark is refused, never clamped,
// and its generation ends: no event above the high-water mark was ever
// sent, so the store went back (a restored backup) or the cursor was made
// up, and the ids above it are issued in no generation that has them. The
// refusal leaves the log as it was; the next request claims generation+1,
// so the same cursor then answers 409 generation_mismatch.
func TestDecideCursorAhead(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	for _, seq := range []uint64{8, 1000, replay.MaxSequence} {
		s := st.initialize(t, ctx, "")
		countdown(t, ctx, s, 2, 3, "p") // HWM 7
		b := st.bounds(t, s.Token)
		if b.HWM != 7 {
			t.Fatalf("HWM = %d, want 7", b.HWM)
		}
		resume := func() *http.Response {
			req, _ := s.NewRequest(ctx, http.MethodGet, nil)
			req.Header.Set("Last-Event-ID", cursorOf(s, 1, 3, seq))
			resp, err := st.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		se := refusalOf(t, resume(), http.StatusBadRequest, "cursor_ahead")
		if se.Body.Data["hwm"] != json.Number("7") || se.Body.Data["cursorSequence"] != json.Number(jsonUint(seq)) {
			t.Fatalf("seq %d: error.data = %v, want hwm 7, cursorSequence %d", seq, se.Body.Data, seq)
		}
		if !strings.HasSuffix(se.Body.Message, "restored from a backup?) or the cursor was not issued here; "+
			"generation 1 ends, and the session continues at the next generation: the stream cannot be resumed") {
			t.Fatalf("seq %d: error.message %q does not say that generation 1 ends", seq, se.Body.Message)
		}
		// The body is the error and nothing else: no stream.
		var env map[string]json.RawMessage
		if err := json.Unmarshal(se.RawBody, &env); err != nil || len(env) != 3 {
			t.Fatalf("seq %d: body %q is not exactly one JSON-RPC error object", seq, se.RawBody)
		}
		if after := st.bounds(t, s.Token); after != b {
			t.Fatalf("seq %d: the refused resume changed the log: %+v → %+v", seq, b, after)
		}
		refusalOf(t, resume(), http.StatusConflict, "generation_mismatch")
		if after := st.bounds(t, s.Token); after.Generation != 2 || after.HWM != 7 {
			t.Fatalf("seq %d: bounds after the next request %+v, want generation 2, HWM 7", seq, after)
		}
	}
}

// Row 7: the event at the cursor's sequence belongs to another stream.
func TestDecideCursorOtherStream(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	countdown(t, ctx, s, 2, 3, "p") // stream 3: seq 3..7
	for _, tc := range []struct {
		cursor, detail string
	}{
		{cursorOf(s, 1, 1, 4), "event 4 belongs to stream 3, not 1"},
		{cursorOf(s, 1, 0, 5), "event 5 belongs to stream 3, not 0"},
		{cursorOf(s, 1, 9, 2), "event 2 belongs to stream 1, not 9"},
	} {
		_, err := s.Resume(ctx, tc.cursor)
		se := wantRefusal(t, err, http.StatusBadRequest, "cursor_malformed")
		if se.Body.Data["detail"] != tc.detail {
			t.Fatalf("%s: detail %q, want %q", tc.cursor, se.Body.Data["detail"], tc.detail)
		}
	}
}

// Row 8: replay of exactly the stream's events after the cursor, then the
// response, then the end of the stream.
func TestDecideReplay(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")
	// Two calls whose events alternate in the log, so that replaying one
	// stream must skip the other's events.
	a, err := s.Call(ctx, gatedCall(2, "a", 3))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := s.Call(ctx, gatedCall(3, "b", 3))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	evs := []mcptest.Event{next(t, a)}
	next(t, b)
	for i := range 3 {
		g.release("a", 1)
		evs = append(evs, next(t, a))
		if i == 2 {
			evs = append(evs, next(t, a)) // the response, before b's last step
		}
		g.release("b", 1)
		next(t, b)
	}
	wantEOF(t, a)
	if got, want := ids(evs), []string{
		cursorOf(s, 1, 3, 3), cursorOf(s, 1, 3, 5), cursorOf(s, 1, 3, 7), cursorOf(s, 1, 3, 9), cursorOf(s, 1, 3, 10),
	}; !equal(got, want) {
		t.Fatalf("stream a ids = %v, want %v", got, want)
	}
	if !evs[4].IsResponseTo(mcptest.ID(2)) || toolText(t, must(evs[4].Response())) != "a done" {
		t.Fatalf("last event of a: %v, want the response to 2", evs[4].Event)
	}

	for from := 0; from < len(evs); from++ {
		rs, err := s.Resume(ctx, evs[from].ID)
		if err != nil {
			t.Fatalf("resume after event %d: %v", from, err)
		}
		got, err := rs.Collect()
		rs.Close()
		if err != nil {
			t.Fatalf("resume after event %d: %v", from, err)
		}
		// A priming event naming the cursor's position, then exactly the
		// events after it, byte for byte, then the end.
		wantResumePriming(t, got[0], evs[from].ID, time.Second)
		want := evs[from+1:]
		if len(got)-1 != len(want) {
			t.Fatalf("resume after event %d: got %v, want %v", from, ids(got[1:]), ids(want))
		}
		for i, w := range want {
			g := got[i+1]
			if g.ID != w.ID || string(g.Data) != string(w.Data) || g.Retry != w.Retry {
				t.Fatalf("resume after event %d, event %d: got %v, want %v", from, i, g.Event, w.Event)
			}
		}
	}
}

// cursor = HWM is accepted: resuming the standalone stream at its priming
// event (the HWM) replays nothing and continues live.
func TestDecideCursorAtHWM(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	countdown(t, ctx, s, 2, 2, "p")
	g, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prime, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	c := parseCursor(t, prime.ID)
	if b := st.bounds(t, s.Token); c.Sequence != b.HWM || c.Stream != replay.StandaloneStream {
		t.Fatalf("GET priming cursor %+v, want stream 0 at the HWM %d", c, b.HWM)
	}
	rs, err := s.Resume(ctx, prime.ID)
	if err != nil {
		t.Fatalf("resume at the HWM: %v", err)
	}
	defer rs.Close()
	first, err := rs.Next()
	if err != nil {
		t.Fatal(err)
	}
	wantResumePriming(t, first, prime.ID, time.Second)
	// Live continuation: a server-wide notification reaches the resumed
	// standalone stream.
	mcp.AddTool(st.server, &mcp.Tool{Name: "late"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	next, err := rs.Next()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := next.Request(); !ok || r.Method != "notifications/tools/list_changed" {
		t.Fatalf("after the resume: %v, want notifications/tools/list_changed", next.Event)
	}
	if c2 := parseCursor(t, next.ID); c2.Sequence != c.Sequence+1 || c2.Stream != 0 {
		t.Fatalf("live event cursor %+v, want stream 0 seq %d", c2, c.Sequence+1)
	}
}

// cursor = HWM where the HWM is the last event of a finished stream: the
// stream has nothing more, so the resume is accepted and ends at once.
func TestDecideCursorAtEndOfFinishedStream(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	evs := countdown(t, ctx, s, 2, 2, "p")
	last := evs[len(evs)-1].ID
	if c := parseCursor(t, last); c.Sequence != st.bounds(t, s.Token).HWM {
		t.Fatalf("the response is not at the HWM")
	}
	rs, err := s.Resume(ctx, last)
	if err != nil {
		t.Fatalf("resume at the end of a finished stream: %v", err)
	}
	defer rs.Close()
	first, err := rs.Next()
	if err != nil {
		t.Fatal(err)
	}
	wantResumePriming(t, first, last, time.Second)
	wantEOF(t, rs)
}

func jsonUint(n uint64) string { return strconv.FormatUint(n, 10) }

func equal(a, b []string) bool { return slices.Equal(a, b) }

func must[T any](v T, ok bool) T {
	if !ok {
		panic("must: not ok")
	}
	return v
}

// A stream open during the re-creation of its session ends (its
// generation is over), and resuming it answers 409: the request in flight
// belonged to generation 1 and is gone (DESIGN.md, "Generations").
func TestDecideGenerationMismatchInFlight(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")
	p, err := s.Call(ctx, gatedCall(2, "r", 3))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	next(t, p)
	g.release("r", 1)
	last := next(t, p)
	progressOf(t, last)

	if _, err := st.h.Registry().Recreate(ctx, s.Token); err != nil {
		t.Fatal(err)
	}
	wantEOF(t, p)
	b := st.bounds(t, s.Token)
	_, err = s.Resume(ctx, last.ID)
	se := wantRefusal(t, err, http.StatusConflict, "generation_mismatch")
	if se.Body.Data["generation"] != json.Number("2") || se.Body.Data["cursorGeneration"] != json.Number("1") {
		t.Fatalf("error.data = %v, want generation 2, cursorGeneration 1", se.Body.Data)
	}
	if lost, _ := json.Marshal(se.Body.Data["lostRequests"]); string(lost) != "[2]" {
		t.Fatalf("error.data.lostRequests = %s, want [2]", lost)
	}
	// The message sends again exactly the request lostRequests lists.
	if want := "cursor generation 1 != live generation 2: the session's state was re-created, refusing cross-generation replay; " +
		"the requests [2] of that stream are lost, since their calls did not finish before their generation ended: " +
		"send them again, or initialize a new session"; se.Body.Message != want {
		t.Errorf("error.message = %q, want %q", se.Body.Message, want)
	}
	if after := st.bounds(t, s.Token); after != b {
		t.Fatalf("the refused resume changed the log: %+v → %+v", b, after)
	}
	// Releasing the old call's steps emits nothing into generation 2.
	g.release("r", 2)
	countdown(t, ctx, s, 3, 1, "n")
	evs, _, err := st.h.Registry().Log().Store().Read(ctx, s.Token, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Generation != 2 || strings.Contains(string(e.Data), `"r"`) {
			t.Fatalf("generation 2's log holds %+v", e)
		}
	}
}

// Row 2, continued: an initialize that fails (no params, null params, a
// required param missing or null, protocolVersion "", or a "method" sent
// twice whose last is initialize) presented with a live
// token supersedes nothing. The answer carries a new token and the
// JSON-RPC error response; that token ends (initialize_failed) while the old
// session, and the call in flight on it, go on unharmed.
func TestDecideFailedInitializeSupersedesNothing(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, nil, nil)
	old := st.initialize(t, ctx, "")
	inFlight := startGated(t, ctx, old, 2, "a", 2)
	// The transport refuses these before any session exists.
	refused := []string{
		`{"jsonrpc":"2.0","id":3,"method":"initialize"}`,
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":null}`,
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":null,"capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}`,
	}
	c := st.clientWith(http.Header{"Mcp-Session-Id": {old.Token}, "Mcp-Protocol-Version": {old.ProtocolVersion}})
	post := func(body string) *mcptest.StatusError {
		t.Helper()
		req, err := c.NewRequest(ctx, http.MethodPost, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return mcptest.ReadStatusError(resp)
	}
	for _, body := range refused {
		se := post(body)
		if se.Status != http.StatusBadRequest || se.Reason() != "invalid_params" || se.Body.Code != -32602 || string(se.Body.ID) != "3" || se.Header.Get("Mcp-Session-Id") != "" {
			t.Fatalf("%s: HTTP %d, body %s, Mcp-Session-Id %q; want 400 invalid_params -32602 for id 3 and no session", body, se.Status, se.RawBody, se.Header.Get("Mcp-Session-Id"))
		}
	}
	// A "method" sent twice is refused before it is judged as initialize.
	{
		se := post(`{"jsonrpc":"2.0","id":3,"method":"tools/list","method":"initialize"}`)
		if se.Status != http.StatusBadRequest || se.Reason() != "invalid_request" || se.Header.Get("Mcp-Session-Id") != "" {
			t.Fatalf("method twice: HTTP %d, body %s, Mcp-Session-Id %q; want 400 invalid_request and no session", se.Status, se.RawBody, se.Header.Get("Mcp-Session-Id"))
		}
	}
	// The engine fails these: the transport's check leaves fields of the
	// right JSON type to it.
	bodies := []string{
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":5}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":"yes"},"clientInfo":{"name":"x","version":"1"}}}`,
	}
	for _, body := range bodies {
		req, err := c.NewRequest(ctx, http.MethodPost, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		fresh := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != http.StatusOK || fresh == "" || fresh == old.Token {
			t.Fatalf("%s: HTTP %d Mcp-Session-Id %q, want 200 and a new token", body, resp.StatusCode, fresh)
		}
		msgs, err := mcptest.ReadAnswer(resp)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("%s: answer %v, %v; want one error response", body, msgs, err)
		}
		if r, ok := msgs[0].(*jsonrpc.Response); !ok || r.ID != mcptest.ID(3) || r.Error == nil {
			t.Fatalf("%s: answer %+v, want an error response to 3", body, msgs[0])
		}
		status, _, err := st.h.Registry().Status(ctx, old.Token)
		if err != nil || status != replay.Live {
			t.Fatalf("%s: old token status = %v, %v; want live", body, status, err)
		}
		status, _, err = st.h.Registry().Status(ctx, fresh)
		if err != nil || status != replay.Evicted {
			t.Fatalf("%s: new token status = %v, %v; want evicted (ended: initialize_failed)", body, status, err)
		}
	}
	// The old session answers, and its call in flight completes.
	resp, err := old.Post(ctx, mcptest.MustCall(4, "ping", nil))
	if err != nil {
		t.Fatal(err)
	}
	if msgs, err := mcptest.ReadAnswer(resp); err != nil || len(msgs) != 1 {
		t.Fatalf("ping on the old token: %v, %v", msgs, err)
	}
	g.release("a", 2)
	evs, err := inFlight.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("in-flight call: %d events after priming (%v), want 2 progress and the result", len(evs), ids(evs))
	}
	if r, ok := evs[2].Response(); !ok || r.ID != mcptest.ID(2) || toolText(t, r) != "a done" {
		t.Fatalf("in-flight call ended with %+v, want the result of 2", evs[2])
	}
}

// TestDecideCursorCompactedForgotten: a compacted cursor of a stream that
// finished longer ago than the session's ledger keeps finished streams
// (32) answers 409 with lostRequests [] and says that its calls all
// finished and are not to be sent again. Regression: the 409 had no
// lists, and its message said to send the stream's requests again,
// which had run.
func TestDecideCursorCompactedForgotten(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, &tidemark.Options{Retention: eventlog.Options{MaxEvents: 4}}, nil)
	s := st.initialize(t, ctx, "")
	first := echoStreams(t, ctx, s, 2, 35)[0][0].ID
	_, err := s.Resume(ctx, first)
	se := wantRefusal(t, err, http.StatusConflict, "cursor_compacted")
	lost, _ := json.Marshal(se.Body.Data["lostRequests"])
	if _, answered := se.Body.Data["answeredRequests"]; string(lost) != "[]" || answered {
		t.Errorf("lostRequests %s, answeredRequests present %v; want [] and absent (%s)", lost, answered, se.RawBody)
	}
	want := "; no request of that stream is lost: send none of them again; its calls all finished, and the session no longer keeps " +
		"which of their responses come after the cursor (it keeps its newest finished streams only): any whose response the client " +
		"has not read ran, and cannot be sent"
	if !strings.HasSuffix(se.Body.Message, want) {
		t.Errorf("message %q\nwant it to end %q", se.Body.Message, want)
	}
}

// unknownRequests ends the message of a 409 whose session cannot tell
// which requests the refused stream carried.
const unknownRequests = "; the session no longer knows which requests that stream carried, nor whether their calls finished " +
	"(error.data lists none): each call of that stream whose response the client has not read may have run, or may still run: " +
	"check its effect before sending it again, or initialize a new session"

// TestDecideGenerationMismatchUnknownStream: a call whose id is 1,100
// bytes, over what a session's record keeps of a stream whose opening
// event retention removed (store.MaxOpeningBytes), runs when retention
// removes that event and its generation ends. The 409 on its stream has
// none of the lists and says that the session no longer knows which
// requests the stream carried, and to check each call's effect before
// sending it again. Regression: the message said that the stream's
// requests were lost and to send them again, though the session could
// not tell which they were, nor whether their calls had run.
func TestDecideGenerationMismatchUnknownStream(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")
	call := gatedCall(2, "long", 3)
	id, err := jsonrpc.MakeID(strings.Repeat("x", 1100))
	if err != nil {
		t.Fatal(err)
	}
	call.ID = id
	p, err := s.Call(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	next(t, p)
	g.release("long", 1)
	last := next(t, p)
	progressOf(t, last)
	b := st.bounds(t, s.Token)
	if _, err := st.h.Registry().Log().Store().Trim(ctx, s.Token, 1, b.HWM); err != nil {
		t.Fatal(err)
	}
	if _, err := st.h.Registry().Recreate(ctx, s.Token); err != nil {
		t.Fatal(err)
	}
	wantEOF(t, p)
	_, err = s.Resume(ctx, last.ID)
	se := wantRefusal(t, err, http.StatusConflict, "generation_mismatch")
	for _, k := range []string{"lostRequests", "answeredRequests", "runningRequests"} {
		if v, ok := se.Body.Data[k]; ok {
			t.Errorf("error.data.%s = %v, want it absent (%s)", k, v, se.RawBody)
		}
	}
	if want := "cursor generation 1 != live generation 2: the session's state was re-created, refusing cross-generation replay" +
		unknownRequests; se.Body.Message != want {
		t.Errorf("error.message = %q\nwant %q", se.Body.Message, want)
	}
}
