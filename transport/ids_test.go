// ids_test.go tests that a session never sends an event id twice, across
// resumes, while every id a client holds resumes it exactly.

package transport_test

import (
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// idLedger records every event id one session sent, on every connection,
// and fails the test on the first id sent twice (MCP 2025-11-25,
// basic/transports: an event id is unique across all streams of a
// session).
type idLedger struct {
	t    *testing.T
	seen map[string]string // id → where it was first seen
}

func (l *idLedger) add(where string, evs ...mcptest.Event) {
	l.t.Helper()
	for _, e := range evs {
		if !e.HasID || e.ID == "" {
			continue
		}
		if first, ok := l.seen[e.ID]; ok {
			l.t.Fatalf("event id %s sent twice: first on %s, again on %s", e.ID, first, where)
		}
		l.seen[e.ID] = where
	}
}

// TestEventIDsUniqueOverSession drives one session through several resumes
// over HTTP: a cut POST stream resumed, that resumed connection cut right
// after its first frame and resumed with that frame's id, a finished stream
// resumed twice, a caught-up standalone stream resumed, and one cursor
// resumed twice. No id repeats on any connection, and at every step the
// newest id the client holds resumes it exactly where it was: nothing lost,
// nothing repeated.
func TestEventIDsUniqueOverSession(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")
	l := &idLedger{t: t, seen: map[string]string{}}

	get, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	standalone := next(t, get)
	l.add("GET", standalone)
	get.Close()

	// A POST stream: priming, progress 1 and 2, then the connection is cut.
	p, err := s.Call(ctx, gatedCall(2, "a", 4))
	if err != nil {
		t.Fatal(err)
	}
	onP := []mcptest.Event{next(t, p)}
	g.release("a", 2)
	onP = append(onP, next(t, p), next(t, p))
	p.Close()
	l.add("POST", onP...)
	delivered := onP[1:]

	// Resumed from progress 2, cut right after the first frame.
	r1, err := s.Resume(ctx, onP[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	p1 := next(t, r1)
	r1.Close()
	l.add("resume 1", p1)
	wantResumePriming(t, p1, onP[2].ID, time.Second)

	// Resumed with that frame's id: the rest of the call, exactly.
	r2, err := s.Resume(ctx, p1.ID)
	if err != nil {
		t.Fatal(err)
	}
	p2 := next(t, r2)
	wantResumePriming(t, p2, onP[2].ID, time.Second)
	g.release("a", 2)
	rest, err := r2.Collect()
	r2.Close()
	if err != nil {
		t.Fatal(err)
	}
	l.add("resume 2", append([]mcptest.Event{p2}, rest...)...)
	delivered = append(delivered, rest...)
	if len(delivered) != 5 {
		t.Fatalf("the call delivered %v over its connections, want progress 1 to 4 and the response", ids(delivered))
	}
	for i, e := range delivered[:4] {
		if got := progressOf(t, e).Progress; got != float64(i+1) {
			t.Fatalf("message %d: progress %v, want %d", i+1, got, i+1)
		}
	}
	if !delivered[4].IsResponseTo(mcptest.ID(2)) {
		t.Fatalf("last message %v, want the response to 2", delivered[4].Event)
	}

	// The finished stream, resumed from its last event, then from the
	// priming id of that resume: each time a new priming id, then the end.
	from := delivered[4].ID
	for i := range 2 {
		r, err := s.Resume(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := r.Collect()
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 {
			t.Fatalf("finished stream resumed from %s: %v, want the priming event alone", from, ids(evs))
		}
		wantResumePriming(t, evs[0], delivered[4].ID, time.Second)
		l.add("finished stream, resume "+string(rune('1'+i)), evs...)
		from = evs[0].ID
	}

	// A caught-up cursor, resumed twice: two priming events, two new ids.
	for i := range 2 {
		r, err := s.Resume(ctx, standalone.ID)
		if err != nil {
			t.Fatal(err)
		}
		e := next(t, r)
		r.Close()
		wantResumePriming(t, e, standalone.ID, time.Second)
		l.add("standalone stream, resume "+string(rune('1'+i)), e)
	}
	if len(l.seen) != 13 {
		t.Fatalf("saw %d ids, want 13: %v", len(l.seen), l.seen)
	}
}

// TestResumePartPerGeneration: the resume part of a resumed stream's
// priming id counts the resumes of that session generation only: 1, 2, 3
// on one session, and 1 again on the next session's first resume, so an id
// says nothing about how many resumes the process served for others.
func TestResumePartPerGeneration(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, demo.NewServer(), nil, nil)
	for _, name := range []string{"first", "second"} {
		s := st.initialize(t, ctx, "")
		evs := countdown(t, ctx, s, 2, 2, "tok")
		cursor := evs[1].ID
		want := []string{cursor + "-1", cursor + "-2", cursor + "-3"}
		if name == "second" {
			want = want[:1]
		}
		for _, w := range want {
			r, err := s.Resume(ctx, cursor)
			if err != nil {
				t.Fatalf("%s session: resume %s: %v", name, cursor, err)
			}
			if got := next(t, r).ID; got != w {
				t.Errorf("%s session: priming id %q, want %q", name, got, w)
			}
			r.Close()
		}
	}
}
