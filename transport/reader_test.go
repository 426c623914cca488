// reader_test.go tests one reader per stream: a resume takes a stream over
// from the connection serving it.

package transport_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// TestOneReaderPerStream resumes one stream on connection A, then on
// connection B: each resume takes the stream over, the older connection is
// closed without another event, and the newest gets the rest. Events are
// emitted only when the test releases them, so "no event on two
// connections" is checked exactly.
func TestOneReaderPerStream(t *testing.T) {
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, nil, nil)
	s := st.initialize(t, ctx, "")

	// The POST connection P reads the priming event and two progress events.
	p, err := s.Call(ctx, gatedCall(2, "x", 6))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	onP := []mcptest.Event{next(t, p)}
	g.release("x", 2)
	onP = append(onP, next(t, p), next(t, p))

	// A resumes from P's last event: P ends with nothing more.
	a, err := s.Resume(ctx, onP[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	wantResumePriming(t, next(t, a), onP[2].ID, time.Second)
	wantEOF(t, p)
	g.release("x", 1)
	onA := []mcptest.Event{next(t, a)}

	// B resumes from A's last event: A ends with nothing more.
	b, err := s.Resume(ctx, onA[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	wantResumePriming(t, next(t, b), onA[0].ID, time.Second)
	wantEOF(t, a)
	g.release("x", 3)
	onB, err := b.Collect()
	if err != nil {
		t.Fatal(err)
	}

	// P: priming, progress 1, 2. A: progress 3. B: progress 4, 5, 6, the
	// response, then the end.
	for i, e := range onP[1:] {
		if got := progressOf(t, e).Progress; got != float64(i+1) {
			t.Fatalf("P event %d: progress %v, want %d", i+1, got, i+1)
		}
	}
	if got := progressOf(t, onA[0]).Progress; got != 3 {
		t.Fatalf("A: progress %v, want 3", got)
	}
	if len(onB) != 4 {
		t.Fatalf("B got %v, want progress 4, 5, 6 and the response", onB)
	}
	for i, e := range onB[:3] {
		if got := progressOf(t, e).Progress; got != float64(i+4) {
			t.Fatalf("B event %d: progress %v, want %d", i, got, i+4)
		}
	}
	if !onB[3].IsResponseTo(mcptest.ID(2)) || toolText(t, must(onB[3].Response())) != "x done" {
		t.Fatalf("B's last event %v, want the response to 2", onB[3].Event)
	}
	// Every event of the stream was written to exactly one connection.
	all := slices.Concat(ids(onP), ids(onA), ids(onB))
	seen := map[string]bool{}
	for _, id := range all {
		if seen[id] {
			t.Fatalf("event %s was written to two connections: P %v, A %v, B %v", id, ids(onP), ids(onA), ids(onB))
		}
		seen[id] = true
	}
	logEvs, _, err := st.h.Registry().Log().Store().Read(ctx, s.Token, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var stream []string
	c := parseCursor(t, onP[0].ID)
	for _, e := range logEvs {
		if e.Stream == c.Stream {
			stream = append(stream, cursorOf(s, e.Generation, e.Stream, e.Seq))
		}
	}
	if !equal(all, stream) {
		t.Fatalf("connections carried %v, the stream in the log is %v", all, stream)
	}
}

// TestResumeTakesOverStandaloneStream: the standalone stream has one
// reader too: a second GET closes the first, and a resume closes the
// second, then replays what followed its cursor.
func TestResumeTakesOverStandaloneStream(t *testing.T) {
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")
	g1, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer g1.Close()
	prime := next(t, g1)
	// A plain GET while g1 is open: the standalone stream has one reader,
	// so g1 is closed.
	g2, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	prime2 := next(t, g2)
	wantEOF(t, g1)
	// Resuming the standalone stream closes g2.
	g3, err := s.Resume(ctx, prime.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer g3.Close()
	wantResumePriming(t, next(t, g3), prime.ID, time.Second)
	wantEOF(t, g2)
	// g3 replays what followed its cursor on the standalone stream: g2's
	// priming event.
	if e := next(t, g3); e.ID != prime2.ID || !e.IsPriming() {
		t.Fatalf("g3 replayed %v, want g2's priming event %s", e.Event, prime2.ID)
	}
}
