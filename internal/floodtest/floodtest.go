// Package floodtest drives the test of a store that fails in the middle
// of a flood of events: a countdown with no delay streams
// progress notifications while the test breaks the store, and the events
// the client received are checked: every one stored (no cursor above the
// stored high-water mark), none twice, none skipped, and the stream
// ended. store/durable and store/redis use it.
package floodtest

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
)

// Flood calls the demo server's countdown (a million steps, no delay, with
// a progress token) on sess, reads its stream, calls cut once after
// events have arrived, and returns the cursors of every event received
// once the stream ends. It fails the test when the stream does not end
// within 30 seconds of cut.
func Flood(t *testing.T, sess *mcptest.Session, after int, cut func()) []replay.Cursor {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := sess.Call(ctx, mcptest.ToolCall(77, "countdown", map[string]any{"n": 1000000}, "flood"))
	if err != nil {
		t.Fatalf("countdown: %v", err)
	}
	defer st.Close()
	var got []replay.Cursor
	var cutAt time.Time
	for {
		ev, err := st.Next()
		if err != nil {
			break // the stream ended
		}
		if ev.HasID && ev.ID != "" {
			c, err := replay.Parse(ev.ID)
			if err != nil {
				t.Fatalf("cursor %q: %v", ev.ID, err)
			}
			got = append(got, c)
		}
		if len(got) == after {
			cut()
			cutAt = time.Now()
		}
		if !cutAt.IsZero() && time.Since(cutAt) > 30*time.Second {
			t.Fatalf("the stream did not end within 30 s of the store failing (%d events)", len(got))
		}
	}
	if len(got) < after {
		t.Fatalf("the stream ended after %d events, before the store failed", len(got))
	}
	return got
}

// Contiguous fails the test unless got, the cursors of one stream on which
// nothing else was appended, are of one generation with sequences that
// rise by exactly one (none twice, none skipped), and the last is at or
// below hwm, the stored high-water mark. It returns the last cursor.
func Contiguous(t *testing.T, got []replay.Cursor, hwm uint64) replay.Cursor {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if got[i].Generation != got[0].Generation || got[i].Sequence != got[i-1].Sequence+1 {
			t.Fatalf("event %d: cursor gen %d seq %d after gen %d seq %d: want one generation, sequences rising by one",
				i, got[i].Generation, got[i].Sequence, got[i-1].Generation, got[i-1].Sequence)
		}
	}
	last := got[len(got)-1]
	if last.Sequence > hwm {
		t.Fatalf("the client holds sequence %d, above the stored high-water mark %d", last.Sequence, hwm)
	}
	return last
}
