// lost_test.go holds the tests of Live.Refused: the ledger of a
// generation, kept across re-creations and takeovers, and its bound.

package session_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// streamEvents reads stream s of l from its opening event to its end.
func streamEvents(t *testing.T, l *session.Live, s uint64) []store.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rd := l.Reader(s, s)
	var out []store.Event
	for len(out) == 0 || !out[len(out)-1].End {
		evs, err := rd.Next(ctx)
		if err != nil {
			t.Fatalf("stream %d after %d events: %v", s, len(out), err)
		}
		out = append(out, evs...)
	}
	return out
}

// wantLost checks what l says of the requests of the stream a client at
// cursor c holds (Live.Refused): want is its lost requests, then
// " answered " and the answered ones and " running " and the running ones
// when there are any, then " forgotten" for a stream the ledger no longer
// keeps; "unknown" when l keeps no ledger of c's generation.
func wantLost(t *testing.T, l *session.Live, c replay.Cursor, want string) {
	t.Helper()
	r, ok := l.Refused(c)
	got := "unknown"
	if ok {
		got = marshalIDs(t, r.Lost)
		if len(r.Answered) > 0 {
			got += " answered " + marshalIDs(t, r.Answered)
		}
		if len(r.Running) > 0 {
			got += " running " + marshalIDs(t, r.Running)
		}
		if r.Forgotten {
			got += " forgotten"
		}
	}
	if got != want {
		t.Fatalf("Refused(gen %d stream %d seq %d) on generation %d = %s, want %s",
			c.Generation, c.Stream, c.Sequence, l.Generation(), got, want)
	}
}

func marshalIDs(t *testing.T, ids session.RequestIDs) string {
	t.Helper()
	b, err := json.Marshal(ids)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func echoCall(t *testing.T, id any) *jsonrpc.Request {
	return request(t, id, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}})
}

// answeredAndRunning gives l two POST streams: s1, whose two echo calls
// ("a" and 5) are answered, with evs its two responses in the log; and s2,
// whose countdown call 9 runs for a minute, unanswered.
func answeredAndRunning(t *testing.T, l *session.Live) (s1 uint64, evs []store.Event, s2 uint64) {
	t.Helper()
	s1, evs = answeredStream(t, l)
	s2 = delivered(t, l, request(t, 9, "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": 1, "delay_ms": 60000}}))
	return s1, evs, s2
}

// answeredStream gives l a POST stream s1 whose two echo calls ("a" and
// 5) are answered, with evs its two responses in the log.
func answeredStream(t *testing.T, l *session.Live) (s1 uint64, evs []store.Event) {
	t.Helper()
	s1 = delivered(t, l, echoCall(t, "a"), echoCall(t, 5))
	if evs = streamEvents(t, l, s1); len(evs) != 2 {
		t.Fatalf("stream of two echo calls: %d events, want 2 responses", len(evs))
	}
	return s1, evs
}

// answeredCall gives l a POST stream whose one echo call, id, is
// answered, and returns the stream's number once its response is read.
func answeredCall(t *testing.T, l *session.Live, id any) uint64 {
	t.Helper()
	s := delivered(t, l, echoCall(t, id))
	streamEvents(t, l, s)
	return s
}

// delivered gives l a POST stream of calls, each delivered to the engine,
// and returns its number: the calls run (or have run) on it.
func delivered(t *testing.T, l *session.Live, calls ...*jsonrpc.Request) uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := l.OpenStream(ctx, calls, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		if err := l.Deliver(ctx, c, engine.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// answeredLast returns, as a JSON array, the id of the request that evs,
// the two responses of answeredAndRunning's first stream, answer last:
// its two calls run at once, so either may.
func answeredLast(t *testing.T, evs []store.Event) string {
	t.Helper()
	m, err := jsonrpc.DecodeMessage(evs[1].Data)
	if err != nil {
		t.Fatal(err)
	}
	return marshalIDs(t, session.RequestIDs{m.(*jsonrpc.Response).ID})
}

// TestLostRequests: a generation tells, for a cursor of one of its POST
// streams, which requests of that stream did not finish (no response
// stored), wherever the cursor is: a call whose response was stored is
// never lost, even for a cursor before that response, but answered
// (regression: the calls answered after the cursor were listed as lost,
// and a client told to send them again ran a finished tool twice); a call
// the live generation still runs is running, not lost (regression: it
// was listed as lost, and a client that sent it again ran it twice);
// after a re-creation, the next generations still tell it for the old
// one's cursors, from the record, where the unfinished call is lost.
func TestLostRequests(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)

	s1, evs, s2 := answeredAndRunning(t, l)
	first, last := evs[0].Seq, evs[1].Seq

	cur := func(gen, stream, seq uint64) replay.Cursor {
		return replay.Cursor{Tag: l.Tag(), Generation: gen, Stream: stream, Sequence: seq}
	}
	checks := func(on *session.Live, unfinished string) {
		t.Helper()
		wantLost(t, on, cur(1, s1, s1), `[] answered ["a",5]`)
		wantLost(t, on, cur(1, s1, first), `[] answered `+answeredLast(t, evs))
		wantLost(t, on, cur(1, s1, last), `[]`)
		wantLost(t, on, cur(1, s2, s2), unfinished)
		wantLost(t, on, cur(1, replay.StandaloneStream, 1), `[]`)
		wantLost(t, on, cur(1, s2+100, s2), "[] forgotten")
	}
	checks(l, `[] running [9]`)

	l2, err := f.reg.Recreate(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	checks(l2, `[9]`)
	wantLost(t, l2, cur(2, s1, s1), "[] forgotten")
	wantLost(t, l2, cur(7, s1, s1), "unknown")
	wantLost(t, l2, cur(2, replay.StandaloneStream, 1), `[]`)
	// The record still holds the engine state as engine.State reads it.
	rec, err := f.st.Get(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	var st engine.State
	if err := json.Unmarshal(rec.State, &st); err != nil || st.ProtocolVersion != "2025-11-25" || !st.Initialized {
		t.Fatalf("record state %s: %+v, %v", rec.State, st, err)
	}

	// A generation that carried no stream keeps the older ledger.
	l3, err := f.reg.Recreate(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	checks(l3, `[9]`)
}

// TestLostRequestsHibernated: a generation's ledger outlives its
// hibernation. For a stream whose responses retention removed, the
// generation woken from an exact hibernation tells exactly what it told
// before (regression: it told the stream forgotten, and the 409 had no
// answeredRequests), and so after a second hibernation; after a lossy
// hibernation, generation+1 tells it of the old generation's cursors
// (regression: it kept no ledger of that generation).
func TestLostRequestsHibernated(t *testing.T) {
	for _, exact := range []bool{true, false} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			ctx := context.Background()
			f, _ := hibernatingRetained(t, exact, session.Options{HibernateAfter: time.Minute}, eventlog.Options{MaxEvents: 4})
			l := mustCreate(t, f.reg)
			initialize(t, f, l)
			s1, evs := answeredStream(t, l)
			first, last := evs[0].Seq, evs[1].Seq
			roundTrip(t, f, l, echo(t, 3, "x"))
			roundTrip(t, f, l, echo(t, 4, "y"))
			if b, err := f.st.Bounds(ctx, l.Token()); err != nil || b.Floor <= last {
				t.Fatalf("bounds %+v, %v; want the floor past the stream's last response at %d", b, err, last)
			}
			cur := func(seq uint64) replay.Cursor {
				return replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: s1, Sequence: seq}
			}
			checks := func(on *session.Live) {
				t.Helper()
				wantLost(t, on, cur(s1), `[] answered ["a",5]`)
				wantLost(t, on, cur(first), `[] answered `+answeredLast(t, evs))
				wantLost(t, on, cur(last), `[]`)
			}
			checks(l)
			wake := func(l *session.Live, gen uint64) *session.Live {
				t.Helper()
				hibernateIdle(t, f, l)
				woken, err := f.reg.Get(ctx, l.Token(), "")
				if err != nil || woken.Generation() != gen {
					t.Fatalf("wake: %v, want generation %d", err, gen)
				}
				return woken
			}
			if !exact {
				checks(wake(l, 2))
				return
			}
			woken := wake(l, 1)
			checks(woken)
			checks(wake(woken, 1))
		})
	}
}

// TestLostRequestsHibernatedBound: the ledger a hibernation saves is the
// live one, with its bound: after 33 finished streams and an exact
// hibernation, the woken generation keeps the newest 32 and tells the
// oldest forgotten, as it did awake.
func TestLostRequestsHibernatedBound(t *testing.T) {
	ctx := context.Background()
	f, _ := hibernating(t, true, session.Options{HibernateAfter: time.Minute})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	var streams []uint64
	for i := range 33 {
		streams = append(streams, answeredCall(t, l, i+100))
	}
	checks := func(on *session.Live) {
		t.Helper()
		cur := func(s uint64) replay.Cursor {
			return replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: s, Sequence: s}
		}
		wantLost(t, on, cur(streams[0]), "[] forgotten")
		wantLost(t, on, cur(streams[1]), `[] answered [101]`)
		wantLost(t, on, cur(streams[32]), `[] answered [132]`)
	}
	checks(l)
	hibernateIdle(t, f, l)
	woken, err := f.reg.Get(ctx, l.Token(), "")
	if err != nil || woken.Generation() != 1 {
		t.Fatalf("wake: %v, want generation 1", err)
	}
	checks(woken)
}

// TestLostRequestsHibernatedWithoutLedger: a record hibernated exactly
// without the live generation's ledger, as versions that did not keep it
// wrote it, still wakes at its generation, whose ledger starts empty: its
// streams are forgotten, and new ones are kept.
func TestLostRequestsHibernatedWithoutLedger(t *testing.T) {
	ctx := context.Background()
	f, _ := hibernating(t, true, session.Options{HibernateAfter: time.Minute})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	s1, _ := answeredStream(t, l)
	hibernateIdle(t, f, l)
	rec, err := f.st.Get(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(rec.State, &m); err != nil || m[session.LedgerKey] == nil {
		t.Fatalf("hibernated state %s, %v: want the member %s", rec.State, err, session.LedgerKey)
	}
	delete(m, session.LedgerKey)
	old, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Wake(ctx, l.Token(), "old", 1, f.clk.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := f.st.Hibernate(ctx, l.Token(), "old", 1, old); err != nil {
		t.Fatal(err)
	}
	woken, err := f.reg.Get(ctx, l.Token(), "")
	if err != nil || woken.Generation() != 1 {
		t.Fatalf("wake: %v, want generation 1", err)
	}
	wantLost(t, woken, replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: s1, Sequence: s1}, `[] forgotten`)
	s2 := answeredCall(t, woken, 7)
	wantLost(t, woken, replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: s2, Sequence: s2}, `[] answered [7]`)
}

// TestLostRequestsTakeover: the replica that takes a session over names
// the requests lost with the previous owner's generation, read from its
// log: the calls that did not finish, never one whose response the log
// holds, even for a cursor before that response.
func TestLostRequestsTakeover(t *testing.T) {
	ctx := context.Background()
	rs := newReplicas()
	regA, _ := rs.registry(t, "a", 10*time.Second)
	regB, _ := rs.registry(t, "b", 10*time.Second)
	la := mustCreate(t, regA)
	initialize(t, nil, la)
	done := request(t, 2, "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": 3, "delay_ms": 1},
		"_meta": map[string]any{"progressToken": "p"}})
	sDone, err := la.OpenStream(ctx, []*jsonrpc.Request{done}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Deliver(ctx, done, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	evs := streamEvents(t, la, sDone)
	if len(evs) != 4 {
		t.Fatalf("countdown stream: %d events after its opening, want 3 progress notifications and the response", len(evs))
	}
	s, err := la.OpenStream(ctx, []*jsonrpc.Request{echoCall(t, "t1"), echoCall(t, "t2")}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	rs.clk.Advance(11 * time.Second)
	lb, err := regB.Get(ctx, la.Token(), "")
	if err != nil || lb.Generation() != 2 {
		t.Fatalf("takeover: %v, want generation 2", err)
	}
	wantLost(t, lb, replay.Cursor{Tag: lb.Tag(), Generation: 1, Stream: s, Sequence: s}, `["t1","t2"]`)
	// Countdown 2 finished: its response is the stream's last event, and
	// no cursor before it (the opening, each progress) lists it.
	for _, seq := range []uint64{sDone, evs[0].Seq, evs[1].Seq, evs[2].Seq} {
		wantLost(t, lb, replay.Cursor{Tag: lb.Tag(), Generation: 1, Stream: sDone, Sequence: seq}, `[] answered [2]`)
	}
	wantLost(t, lb, replay.Cursor{Tag: lb.Tag(), Generation: 1, Stream: sDone, Sequence: evs[3].Seq}, `[]`)
}

// TestLostRequestsBound: a generation keeps the newest 32 finished
// streams (it tells that none of their calls is lost, and which were
// answered after the cursor); of an older one it tells that it finished
// (forgotten: none lost or running, regression: it told nothing, and the
// 409 said to send the stream's requests again, which had run), while a
// stream with a call unanswered is kept
// however old.
func TestLostRequestsBound(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	open := request(t, "open", "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": 1, "delay_ms": 60000}})
	sOpen, err := l.OpenStream(ctx, []*jsonrpc.Request{open}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	var streams []uint64
	for i := range 33 {
		streams = append(streams, answeredCall(t, l, i+100))
	}
	cur := func(s uint64) replay.Cursor {
		return replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: s, Sequence: s}
	}
	wantLost(t, l, cur(streams[0]), "[] forgotten")
	wantLost(t, l, cur(streams[1]), `[] answered [101]`)
	wantLost(t, l, cur(streams[32]), `[] answered [132]`)
	wantLost(t, l, cur(sOpen), `[] running ["open"]`)
}

// dropTime removes the time from a log line.
func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// TestRequestIDsJSON: ids encode as the client sent them, and an empty
// list as []; a log line shows the same array.
func TestRequestIDsJSON(t *testing.T) {
	a, _ := jsonrpc.MakeID("a")
	n, _ := jsonrpc.MakeID(float64(-7))
	q, _ := jsonrpc.MakeID(`q"\`)
	big, _ := jsonrpc.MakeID(float64(1 << 53))
	for _, c := range []struct {
		ids  session.RequestIDs
		want string
	}{
		{session.RequestIDs{a, n}, `["a",-7]`}, {session.RequestIDs{}, `[]`}, {nil, `[]`},
		{session.RequestIDs{big, q, n}, `[9007199254740992,"q\"\\",-7]`},
	} {
		b, err := json.Marshal(c.ids)
		if err != nil || string(b) != c.want {
			t.Fatalf("Marshal(%v) = %s, %v; want %s", c.ids, b, err, c.want)
		}
		var line bytes.Buffer
		slog.New(slog.NewTextHandler(&line, &slog.HandlerOptions{ReplaceAttr: dropTime})).Info("m", "ids", c.ids)
		want := c.want
		if strings.Contains(want, `"`) {
			want = strconv.Quote(want)
		}
		if line.String() != "level=INFO msg=m ids="+want+"\n" {
			t.Errorf("log line of %v: %q, want ids as %s", c.ids, line.String(), c.want)
		}
		var back session.RequestIDs
		if err := json.Unmarshal(b, &back); err != nil || len(back) != len(c.ids) {
			t.Fatalf("Unmarshal(%s) = %v, %v", b, back, err)
		}
		for i := range back {
			if back[i] != c.ids[i] {
				t.Fatalf("Unmarshal(%s)[%d] = %v, want %v", b, i, back[i].Raw(), c.ids[i].Raw())
			}
		}
	}
}

// TestLostRequestsTrimmedOpening: once retention has removed the opening
// event of a stream whose call still runs (the event that holds the
// stream's request ids), the next generation still names that call, from
// the ids the store kept in the record; a stream whose end retention
// removed too is no longer known.
func TestLostRequestsTrimmedOpening(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)

	s1 := answeredCall(t, l, "done")
	s2 := delivered(t, l, request(t, "slow", "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": 1, "delay_ms": 60000}}))
	if err := f.st.Sync(ctx, l.Token()); err != nil {
		t.Fatal(err)
	}
	b, err := f.st.Bounds(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	// Retention keeps the newest event; it removes both streams'
	// opening events and stream s1's end.
	if b.HWM <= s2 {
		if _, err := f.st.Append(ctx, l.Token(), 1, []store.Event{{Stream: replay.StandaloneStream, Kind: store.KindPriming}}); err != nil {
			t.Fatal(err)
		}
		b.HWM++
	}
	if _, err := f.st.Trim(ctx, l.Token(), 1, b.HWM); err != nil {
		t.Fatal(err)
	}

	l2, err := f.reg.Recreate(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	cur := func(stream uint64) replay.Cursor {
		return replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: stream, Sequence: stream}
	}
	wantLost(t, l2, cur(s2), `["slow"]`)
	wantLost(t, l2, cur(s1), "[] forgotten")
}

// TestUndelivered: for a cursor of a POST stream, Undelivered names the
// requests whose responses a reader at that cursor has not received,
// stored after it or not stored at all: what a DELETE answers on the
// stream, whose log is gone (regression: the transport asked
// LostRequests, which leaves out a response stored after the cursor, and
// a call whose answer was stored but not yet read got neither its answer
// nor the DELETE's error).
func TestUndelivered(t *testing.T) {
	f := newFixture(t, session.Options{})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	s1, evs, s2 := answeredAndRunning(t, l)
	first, last := evs[0].Seq, evs[1].Seq
	for _, tc := range []struct {
		stream, seq uint64
		want        string
	}{
		{s1, s1, `["a",5]`},
		{s1, first, answeredLast(t, evs)},
		{s1, last, `[]`},
		{s2, s2, `[9]`},
		{replay.StandaloneStream, 1, `[]`},
		{s2 + 100, s2, "unknown"},
	} {
		ids, ok := l.Undelivered(replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: tc.stream, Sequence: tc.seq})
		got := "unknown"
		if ok {
			b, err := json.Marshal(ids)
			if err != nil {
				t.Fatal(err)
			}
			got = string(b)
		}
		if got != tc.want {
			t.Errorf("Undelivered(stream %d seq %d) = %s, want %s", tc.stream, tc.seq, got, tc.want)
		}
	}
}

// trimAll has retention remove every event of l's log but the newest,
// which is a standalone priming event appended for it.
func trimAll(t *testing.T, f *fixture, l *session.Live) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.st.Append(ctx, l.Token(), l.Generation(), []store.Event{{Stream: replay.StandaloneStream, Kind: store.KindPriming}}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.Sync(ctx, l.Token()); err != nil {
		t.Fatal(err)
	}
	b, err := f.st.Bounds(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Trim(ctx, l.Token(), l.Generation(), b.HWM); err != nil {
		t.Fatal(err)
	}
}

// TestLostRequestsManyTrimmedStreams: 70 POST streams, opened at once,
// each with a call that runs, whose opening events retention removes. The
// live generation lists each call as running (regression: the streams
// whose POSTs reached the ledger out of their stream order were not
// found, and their 409 said "its calls all finished", with no
// runningRequests). After a re-creation, the record kept the ids of the
// newest 64 (store.MaxOpenings): each of their calls is lost, and each of
// the 6 oldest streams is unknown (regression: lostRequests [] and "its
// calls all finished" for calls that never did).
func TestLostRequestsManyTrimmedStreams(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	const n = 70
	streams := make([]uint64, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		c := countdownCall(t, fmt.Sprintf("c%02d", i), 1, 60000)
		wg.Go(func() {
			s, err := l.OpenStream(ctx, []*jsonrpc.Request{c}, false, 0)
			if err == nil {
				err = l.Deliver(ctx, c, engine.Request{})
			}
			streams[i] = s
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	trimAll(t, f, l)
	cur := func(gen, s uint64) replay.Cursor {
		return replay.Cursor{Tag: l.Tag(), Generation: gen, Stream: s, Sequence: s}
	}
	for i, s := range streams {
		wantLost(t, l, cur(1, s), fmt.Sprintf(`[] running ["c%02d"]`, i))
	}

	l2, err := f.reg.Recreate(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	order := slices.Sorted(slices.Values(streams))
	for i, s := range streams {
		want := fmt.Sprintf(`["c%02d"]`, i)
		if slices.Index(order, s) < n-store.MaxOpenings {
			want = "unknown"
		}
		wantLost(t, l2, cur(1, s), want)
	}
}

// TestLostRequestsLongTrimmedStream: a stream whose request ids are over
// store.MaxOpeningBytes (a batch of 40 calls with 45-byte ids), its calls
// running, and a later stream with one running call, both of whose
// opening events retention removes. The live generation lists every call
// as running; after a re-creation, the record kept only the later
// stream's ids: its call is lost, and the long stream, whose ids the
// record did not keep, is unknown (regression: lostRequests [] and "its
// calls all finished"), as is a stream before it that finished, whose
// ids the record need not keep.
func TestLostRequestsLongTrimmedStream(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	sDone := answeredCall(t, l, "done")
	var batch []*jsonrpc.Request
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("%s%03d", strings.Repeat("x", 42), i)
		batch = append(batch, countdownCall(t, id, 1, 60000))
		ids = append(ids, strconv.Quote(id))
	}
	sLong := delivered(t, l, batch...)
	sShort := delivered(t, l, countdownCall(t, "s", 1, 60000))
	trimAll(t, f, l)
	cur := func(s uint64) replay.Cursor {
		return replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: s, Sequence: s}
	}
	wantLost(t, l, cur(sLong), "[] running ["+strings.Join(ids, ",")+"]")
	wantLost(t, l, cur(sShort), `[] running ["s"]`)

	l2, err := f.reg.Recreate(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	wantLost(t, l2, cur(sLong), "unknown")
	wantLost(t, l2, cur(sShort), `["s"]`)
	wantLost(t, l2, cur(sDone), "unknown")
}
