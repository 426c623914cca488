package memory_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

const progressData = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"total":100}}`

// filled returns a memory store whose session "s" (generation 1) holds n
// progress events on stream 1, and the one-event batch it appended.
func filled(b *testing.B, n int) (*memory.Store, []store.Event) {
	b.Helper()
	ctx := context.Background()
	st := memory.New(memory.Options{})
	st.Create(ctx, store.Record{Token: "s", Generation: 1})
	ev := []store.Event{{Stream: 1, Kind: store.KindMessage, Data: []byte(progressData)}}
	for range n {
		if _, err := st.Append(ctx, "s", 1, ev); err != nil {
			b.Fatal(err)
		}
	}
	return st, ev
}

// BenchmarkAppendTrim appends one event at a time to a session held at
// 10,000 events by trimming one per append, the steady state of a busy
// session at its retention limit.
func BenchmarkAppendTrim(b *testing.B) {
	ctx := context.Background()
	st, ev := filled(b, 10000)
	b.ReportAllocs()
	for b.Loop() {
		bd, err := st.Append(ctx, "s", 1, ev)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Trim(ctx, "s", 1, bd.HWM-9999); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendGrow appends 10,000 events one at a time to a new
// session: the growth of a session's log.
func BenchmarkAppendGrow(b *testing.B) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	ev := []store.Event{{Stream: 1, Kind: store.KindMessage, Data: []byte(progressData)}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tok := "s" + strconv.Itoa(i)
		i++
		st.Create(ctx, store.Record{Token: tok, Generation: 1})
		for range 10000 {
			if _, err := st.Append(ctx, tok, 1, ev); err != nil {
				b.Fatal(err)
			}
		}
		st.End(ctx, tok, store.EndDeleted, time.Time{})
	}
}

// BenchmarkRead256 reads 256 events out of 10,000, what a reader of a
// replay asks for at once.
func BenchmarkRead256(b *testing.B) {
	ctx := context.Background()
	st, _ := filled(b, 10000)
	b.ReportAllocs()
	after := uint64(0)
	for b.Loop() {
		evs, _, err := st.Read(ctx, "s", after, 256)
		if err != nil || len(evs) != 256 {
			b.Fatal(len(evs), err)
		}
		after = (after + 256) % 9000
	}
}

// BenchmarkIdleSession reports the heap bytes a session holds with the two
// events of an initialize (its stream's opening event and the response).
func BenchmarkIdleSession(b *testing.B) {
	ctx := context.Background()
	resp := make([]byte, 300)
	const n = 10000
	for b.Loop() {
		st := memory.New(memory.Options{})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range n {
			tok := "session-token-" + strconv.Itoa(i)
			st.Create(ctx, store.Record{Token: tok, Generation: 1})
			st.Append(ctx, tok, 1, []store.Event{{Stream: store.NewStream, Kind: store.KindPriming}})
			st.Append(ctx, tok, 1, []store.Event{{Stream: 1, Kind: store.KindMessage, End: true, Data: resp}})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/session")
		runtime.KeepAlive(st)
	}
}
