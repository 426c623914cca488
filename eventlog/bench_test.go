package eventlog_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// progressData is the size and shape of one progress notification.
var progressData = []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"total":100}}`)

// BenchmarkAppendParallel appends from every goroutine to its own session
// out of 256, as workload (b) on 256 streams does: it measures what the
// appends of different sessions share (the process budget's accounting).
func BenchmarkAppendParallel(b *testing.B) {
	benchAppendParallel(b, eventlog.Options{MaxEvents: 1000})
}

// BenchmarkAppendParallelOverBudget is BenchmarkAppendParallel with a
// process budget of 4 MiB, which the 256 sessions' 1,000 events each
// (about 43 MB) keep exceeding: every append may have to enforce it.
func BenchmarkAppendParallelOverBudget(b *testing.B) {
	benchAppendParallel(b, eventlog.Options{MaxEvents: 1000, Budget: 4 << 20})
}

func benchAppendParallel(b *testing.B, opts eventlog.Options) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	const sessions = 256
	for i := range sessions {
		st.Create(ctx, store.Record{Token: "s" + strconv.Itoa(i), Generation: 1})
	}
	log := eventlog.New(st, opts)
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(128) // 256 goroutines on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		token := "s" + strconv.Itoa(int(next.Add(1)-1)%sessions)
		for pb.Next() {
			if err := log.Append(ctx, token, 1, store.Event{Stream: 1, Kind: store.KindMessage, Data: progressData}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkTail measures one event's way from Append to a Reader tailing
// the stream live (workload (b) on one stream): the reader waits, wakes and
// reads while the producer appends.
func BenchmarkTail(b *testing.B) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	st.Create(ctx, store.Record{Token: "s", Generation: 1})
	log := eventlog.New(st, eventlog.Options{MaxEvents: 100000})
	b.ReportAllocs()
	rd := log.NewReader("s", 1, 1, 0)
	var wg sync.WaitGroup
	n := b.N
	wg.Go(func() {
		for got := 0; got < n; {
			evs, err := rd.Next(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			got += len(evs)
		}
	})
	b.ResetTimer()
	for range n {
		if err := log.Append(ctx, "s", 1, store.Event{Stream: 1, Kind: store.KindMessage, Data: progressData}); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
}
