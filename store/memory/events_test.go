package memory

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/tidemark-mcp/tidemark/store"
)

// TestEventsMatchesSlice drives the chunked log and a plain slice with the
// same pushes, trims and reads, across chunk boundaries, and compares them
// after every step.
func TestEventsMatchesSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q events
	var model []store.Event
	seq := uint64(0)
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 6: // push 1 to 600 events
			n := 1 + rng.IntN(600)
			if rng.IntN(4) > 0 {
				n = 1 + rng.IntN(3)
			}
			evs := make([]store.Event, n)
			for i := range evs {
				seq++
				evs[i] = store.Event{Seq: seq, Data: make([]byte, int(seq%7))}
			}
			q.push(evs)
			model = append(model, evs...)
		case op < 9: // trim some
			k := rng.IntN(len(model) + 1)
			if rng.IntN(3) > 0 {
				k = min(k, 1+rng.IntN(5))
			}
			var want int64
			for _, e := range model[:k] {
				want += e.Size()
			}
			if got := q.trim(k); got != want {
				t.Fatalf("step %d: trim(%d) released %d bytes, want %d", step, k, got, want)
			}
			model = model[k:]
		default: // read from a random index
			if len(model) == 0 {
				continue
			}
			i, max := rng.IntN(len(model)), 1+rng.IntN(700)
			got := q.appendTo(nil, i, max)
			want := model[i:min(len(model), i+max)]
			if len(got) != len(want) {
				t.Fatalf("step %d: appendTo(%d, %d) = %d events, want %d", step, i, max, len(got), len(want))
			}
			for j := range got {
				if got[j].Seq != want[j].Seq {
					t.Fatalf("step %d: appendTo(%d, %d)[%d].Seq = %d, want %d", step, i, max, j, got[j].Seq, want[j].Seq)
				}
			}
		}
		if q.n != len(model) {
			t.Fatalf("step %d: %d events, want %d", step, q.n, len(model))
		}
		if len(model) > 0 && (q.oldest().Seq != model[0].Seq || q.at(len(model)-1).Seq != model[len(model)-1].Seq) {
			t.Fatalf("step %d: oldest %d newest %d, want %d and %d", step, q.oldest().Seq, q.at(len(model)-1).Seq, model[0].Seq, model[len(model)-1].Seq)
		}
		for k, c := range q.chunks {
			if k < len(q.chunks)-1 && len(c) != chunkEvents {
				t.Fatalf("step %d: chunk %d of %d holds %d events, want %d", step, k, len(q.chunks), len(c), chunkEvents)
			}
			if cap(c) > chunkEvents {
				t.Fatalf("step %d: chunk %d has capacity %d, over %d", step, k, cap(c), chunkEvents)
			}
		}
		if q.head >= chunkEvents {
			t.Fatalf("step %d: head %d is past the first chunk", step, q.head)
		}
	}
}

// TestTrimReleasesData checks that trimmed events no longer reference their
// data, so the collector can free it while the chunk still holds newer
// events.
func TestTrimReleasesData(t *testing.T) {
	var q events
	q.push([]store.Event{{Seq: 1, Data: []byte("a")}, {Seq: 2, Data: []byte("b")}, {Seq: 3, Data: []byte("c")}})
	q.trim(2)
	if c := q.chunks[0]; c[0].Data != nil || c[1].Data != nil || string(c[2].Data) != "c" {
		t.Fatalf("after trim(2): chunk data %q %q %q, want nil nil \"c\"", c[0].Data, c[1].Data, c[2].Data)
	}
	q.trim(1)
	if q.chunks != nil || q.n != 0 || q.head != 0 {
		t.Fatalf("after trimming everything: %d chunks, n %d, head %d; want none, 0, 0", len(q.chunks), q.n, q.head)
	}
}

// TestReadFarAfter: Read with an after so far above the floor that
// after-floor+1 overflows int returns nothing and the bounds, as for any
// after at or above the HWM, and does not slice out of range.
func TestReadFarAfter(t *testing.T) {
	ctx := context.Background()
	s := New(Options{})
	if err := s.Create(ctx, store.Record{Token: "t", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "t", 1, []store.Event{{Stream: store.NewStream}, {Stream: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, after := range []uint64{2, 3, 1 << 62, 1 << 63, 1<<63 + 5, ^uint64(0)} {
		got, b, err := s.Read(ctx, "t", after, 10)
		if err != nil || len(got) != 0 || b.HWM != 2 || b.Floor != 1 {
			t.Fatalf("Read after %d = %d events, bounds %+v, %v; want none, HWM 2, floor 1", after, len(got), b, err)
		}
	}
}
