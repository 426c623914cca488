// hibernate_bench_test.go measures hibernation (DESIGN.md,
// "Hibernation"): the heap a hibernated session keeps in the process, and
// how long a wake takes with 16 wakers at once, on each store.

package session_test

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// BenchmarkHibernation creates b.N initialized sessions, each with one
// echo call answered, hibernates them all, and reports the heap they keep
// in this process per session (heap-B/session: HeapInuse after minus
// before, after a GC, spans' free room included; live-B/session:
// HeapAlloc, the objects alone; the store's own share included, which is
// all of the record and the events for the memory store; scan-B/session:
// the bytes of those the collector scans for pointers, runtime/metrics
// /gc/scan/heap:bytes; objects/session: /gc/heap/objects:objects), then
// wakes them from 16 goroutines at once and reports the wake latency (Registry.Get of a
// hibernated session: the store's record read and Wake, and the engine
// session's start and restore) at the 50th and 99th percentiles. Run it
// with -benchtime=10000x for the figures of (DESIGN.md, "Hibernation").
func BenchmarkHibernation(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchHibernation(b, func(clk *testenv.Clock) store.Store { return memory.New(memory.Options{Now: clk.Now}) })
	})
	onLastingStores(b, benchHibernation)
}

// onLastingStores runs bench as the sub-benchmarks "durable" (a new data
// directory) and "redis" (a new redis-server with appendonly), the stores
// that outlive the process; bench opens its store on a clock of its own.
func onLastingStores(b *testing.B, bench func(*testing.B, func(*testenv.Clock) store.Store)) {
	b.Run("durable", func(b *testing.B) {
		bench(b, func(clk *testenv.Clock) store.Store {
			st, err := durable.Open(b.TempDir(), durable.Options{Logger: slog.New(slog.DiscardHandler), Now: clk.Now, SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			return st
		})
	})
	b.Run("redis", func(b *testing.B) {
		testenv.NeedRedis(b)
		srv := redistest.Start(b, redistest.Options{AppendOnly: true})
		bench(b, func(clk *testenv.Clock) store.Store {
			st, err := redis.New(context.Background(), redis.Options{URL: srv.URL(), Now: clk.Now})
			if err != nil {
				b.Fatal(err)
			}
			return st
		})
	})
}

// restorableRegistry returns a fixture whose registry holds up to b.N+1
// sessions on the store open makes, on a manual clock that starts now,
// under the demo server's go-sdk engine, which restores state exactly:
// no idle TTL, no event budget, its log discarded; opts sets the rest
// (HibernateAfter, HandOver). The registry and the store close when b's
// run ends.
func restorableRegistry(b *testing.B, open func(*testenv.Clock) store.Store, opts session.Options) *fixture {
	f := &fixture{clk: testenv.NewClock(time.Now())}
	st := open(f.clk)
	b.Cleanup(func() { st.Close() })
	eng := gosdk.New(demo.NewServer())
	eng.Restorable = true
	opts.IdleTTL, opts.MaxSessions, opts.Now, opts.Logger = -1, b.N+1, f.clk.Now, slog.New(slog.DiscardHandler)
	f.log = eventlog.New(st, eventlog.Options{Now: f.clk.Now, Budget: -1})
	f.reg = session.New(st, f.log, eng, opts)
	b.Cleanup(func() { f.reg.Close() })
	return f
}

func benchHibernation(b *testing.B, open func(*testenv.Clock) store.Store) {
	ctx := context.Background()
	f := restorableRegistry(b, open, session.Options{HibernateAfter: time.Minute})
	reg, clk := f.reg, f.clk
	heap := func() (inuse, alloc, scan, objects int64) {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		m := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}, {Name: "/gc/heap/objects:objects"}}
		metrics.Read(m)
		return int64(ms.HeapInuse), int64(ms.HeapAlloc), int64(m[0].Value.Uint64()), int64(m[1].Value.Uint64())
	}
	// The runtime keeps the descriptor of every goroutine that ended, for
	// reuse (about 450 bytes each): the goroutines the live sessions ran
	// are started and ended once before the first reading, so that the
	// figures count what the hibernated sessions keep, whichever store's
	// run comes first.
	goroutines(b.N * perLive(b, reg, f))
	inuse0, alloc0, scan0, objects0 := heap()
	toks := make([]string, b.N)
	for i := range b.N {
		l, err := reg.Create(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		initialize(b, f, l)
		roundTrip(b, f, l, echo(b, 2, "hello"))
		toks[i] = l.Token()
	}
	clk.Advance(2 * time.Minute)
	for deadline := time.Now().Add(time.Minute); reg.Hibernated() != b.N; {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d sessions hibernated", reg.Hibernated(), b.N)
		}
		reg.Sweep(ctx)
	}
	// The engine sessions close in the background: let them finish.
	for n := -1; n != runtime.NumGoroutine(); time.Sleep(50 * time.Millisecond) {
		n = runtime.NumGoroutine()
	}
	inuse1, alloc1, scan1, objects1 := heap()

	b.ResetTimer()
	const wakers = 16
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	for w := range wakers {
		wg.Go(func() {
			for i := w; i < b.N; i += wakers {
				start := time.Now()
				l, err := reg.Get(ctx, toks[i], "")
				lat[i] = time.Since(start)
				if err != nil || l.Generation() != 1 {
					b.Errorf("wake of session %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	// After ResetTimer, which drops reported metrics.
	b.ReportMetric(float64(inuse1-inuse0)/float64(b.N), "heap-B/session")
	b.ReportMetric(float64(alloc1-alloc0)/float64(b.N), "live-B/session")
	b.ReportMetric(float64(scan1-scan0)/float64(b.N), "scan-B/session")
	b.ReportMetric(float64(objects1-objects0)/float64(b.N), "objects/session")
	b.ReportMetric(float64(lat[b.N/2].Microseconds())/1000, "wake-p50-ms")
	b.ReportMetric(float64(lat[b.N*99/100].Microseconds())/1000, "wake-p99-ms")
}

// perLive returns how many goroutines one live session initialized on
// reg runs (at least 1), measured on a session it then ends.
func perLive(b *testing.B, reg *session.Registry, f *fixture) int {
	ctx := context.Background()
	n0 := runtime.NumGoroutine()
	l, err := reg.Create(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	initialize(b, f, l)
	roundTrip(b, f, l, echo(b, 2, "hello"))
	n := runtime.NumGoroutine() - n0
	if err := reg.End(ctx, l.Token(), store.EndDeleted); err != nil {
		b.Fatal(err)
	}
	return max(n, 1)
}

// goroutines starts n goroutines, all alive at once, and waits until
// they have ended.
func goroutines(n int) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range n {
		wg.Go(func() { <-release })
	}
	close(release)
	wg.Wait()
}
