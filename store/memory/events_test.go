package memory

import (
	"bytes"
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
	"unsafe"

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
		switch op := rng.IntN(11); {
		case op < 6: // push 1 to 600 events
			n := 1 + rng.IntN(600)
			if rng.IntN(4) > 0 {
				n = 1 + rng.IntN(3)
			}
			evs := make([]store.Event, n)
			for i := range evs {
				seq++
				evs[i] = store.Event{Seq: seq, Generation: seq / 100, Stream: seq % 3, Kind: store.Kind(seq % 3), End: seq%2 == 0,
					Retry: time.Duration(seq) * time.Millisecond, Time: time.Unix(0, int64(seq)*1e6).UTC(), Data: bytes.Repeat([]byte{byte(seq)}, int(seq%7))}
				if seq%5 == 0 {
					evs[i].Data, evs[i].Time = nil, time.Time{}
				}
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
		case op == 9: // the session hibernates
			q.freeze()
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
				if !reflect.DeepEqual(got[j], want[j]) {
					t.Fatalf("step %d: appendTo(%d, %d)[%d] = %+v, want %+v", step, i, max, j, got[j], want[j])
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

// TestFreezeKeepsEvents: a hibernating session's events, encoded
// (freeze) and decoded on the next read, come back with every field as
// appended, Time in UTC or time.Local as it was, Data nil or empty as it
// was and with no room to grow into the next one's; the log then grows
// as before.
func TestFreezeKeepsEvents(t *testing.T) {
	at := time.Date(2026, 12, 6, 12, 0, 0, 5, time.UTC)
	evs := []store.Event{
		{Seq: 7, Generation: 2, Stream: 7, Kind: store.KindMessage, Data: []byte("ab")},
		{Seq: 8, Generation: 2, Stream: 8, Kind: store.KindPriming, Retry: 2 * time.Second, Time: at, Data: []byte{}},
		{Seq: 9, Generation: 2, Stream: 8, Kind: store.KindMessage, End: true, Time: at.Local(), Data: []byte("cde")},
		{Seq: 10, Generation: 2, Stream: 0, Kind: store.KindClose, Time: at},
	}
	var q events
	q.push(slices.Clone(evs))
	q.trim(1)
	q.freeze()
	if q.frozen == nil || q.chunks != nil || q.n != 3 {
		t.Fatalf("after freeze: frozen %v, %d chunks, %d events; want frozen, none, 3", q.frozen != nil, len(q.chunks), q.n)
	}
	got := q.appendTo(nil, 0, 10)
	if !reflect.DeepEqual(got, evs[1:]) {
		t.Fatalf("thawed:\n%+v\nwant\n%+v", got, evs[1:])
	}
	if grown := append(got[1].Data, 'x'); string(grown) != "cdex" || got[2].Data != nil {
		t.Fatalf("thawed data: %q grown to %q, then %q", got[1].Data, grown, got[2].Data)
	}
	q.push([]store.Event{{Seq: 11, Data: []byte("f")}})
	if got := q.appendTo(nil, 0, 10); len(got) != 4 || got[0].Seq != 8 || string(got[1].Data) != "cde" || string(got[3].Data) != "f" {
		t.Fatalf("after a push: %+v", got)
	}
}

// TestSessionSize: a session whose log retains no event is one 280-byte
// struct (the 288-byte size class) and holds nothing else for its log: the hibernated sessions of
// an engine that wakes them at generation+1 are many, and each has its
// log emptied (to HWM+1) when it hibernates. Its events, once appended,
// are frozen by Hibernate and let go of by a trim to HWM+1 and by Claim.
func TestSessionSize(t *testing.T) {
	if got := unsafe.Sizeof(session{}); got != 280 {
		t.Fatalf("session is %d bytes, want 280 (a struct over 288 bytes takes the next size class, 320)", got)
	}
	ctx := context.Background()
	s := New(Options{})
	tok := "tok-size"
	if err := s.Create(ctx, store.Record{Token: tok, Generation: 1, Owner: "a"}); err != nil {
		t.Fatal(err)
	}
	ss := s.sessions[tok]
	if ss.events != nil {
		t.Fatalf("new session: events %+v, want none", ss.events)
	}
	evs := []store.Event{{Stream: store.NewStream, Kind: store.KindPriming}, {Stream: 1, Data: []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`), End: true}}
	if _, err := s.Append(ctx, tok, 1, evs); err != nil {
		t.Fatal(err)
	}
	if err := s.Hibernate(ctx, tok, "a", 1, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if ss.events == nil || ss.events.frozen == nil || ss.events.chunks != nil || ss.events.n != 2 {
		t.Fatalf("hibernated: events %+v, want the 2 events frozen", ss.events)
	}
	b, err := s.Trim(ctx, tok, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Bounds{Generation: 1, Floor: 3, HWM: 2}); b != want || ss.events != nil {
		t.Fatalf("trimmed to HWM+1: bounds %+v, events %+v; want %+v and none", b, ss.events, want)
	}
	if _, err := s.Append(ctx, tok, 1, nil); err != nil || ss.events != nil {
		t.Fatalf("empty append: %v, events %+v; want none", err, ss.events)
	}
	if _, err := s.Claim(ctx, tok, "b", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, tok, 2, evs[:1]); err != nil || ss.held() != 1 {
		t.Fatalf("append at generation 2: %v, %d events held; want 1", err, ss.held())
	}
	if _, err := s.Claim(ctx, tok, "c", 2, time.Time{}); err != nil || ss.events != nil {
		t.Fatalf("claimed: %v, events %+v; want none", err, ss.events)
	}
}
