// sweep_bench_test.go measures what a sweep costs the requests that run
// beside it.

package session_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/session"
)

// BenchmarkGetDuringSweep looks sessions up from 16 goroutines, b.N
// lookups in all, among 100,000 live sessions (engine gosdk, memory
// store, idle TTL 2 hours: none is idle), while another goroutine sweeps
// the registry (Registry.Sweep) every 500 ms, as Run does with
// --hibernate-after 2s. It reports the lookups' latency at the 50th, 99th
// and 99.9th percentiles and the longest one (get-p50-µs, get-p99-µs,
// get-p999-µs, get-max-µs), and one sweep's mean duration (sweep-ms).
// Run it with -benchtime=4000000x, so that the lookups span several
// sweeps, and with -blockprofile: on 2 shared cores the scheduler's and
// the collector's pauses make the tail, and the block profile tells how
// long the lookups waited for the registry's lock (Registry.get), which
// a sweep that holds it while it looks at every session makes them do.
func BenchmarkGetDuringSweep(b *testing.B) {
	const sessions, getters, sweepEvery = 100_000, 16, 500 * time.Millisecond
	ctx := context.Background()
	reg := benchRegistry(b, session.Options{IdleTTL: 2 * time.Hour, MaxSessions: sessions + 1})
	tokens := make([]string, sessions)
	for i := range tokens {
		l, err := reg.Create(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = l.Token()
	}
	stop := make(chan struct{})
	var sweeping sync.WaitGroup
	var sweeps int
	var swept time.Duration
	sweeping.Go(func() {
		tick := time.NewTicker(sweepEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			start := time.Now()
			reg.Sweep(ctx)
			swept += time.Since(start)
			sweeps++
		}
	})
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range getters {
		wg.Go(func() {
			for i := g; i < b.N; i += getters {
				start := time.Now()
				if _, err := reg.Get(ctx, tokens[(i*7919)%sessions], ""); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(start)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(stop)
	sweeping.Wait()
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	b.ReportMetric(us(lat[len(lat)/2]), "get-p50-µs")
	b.ReportMetric(us(lat[len(lat)*99/100]), "get-p99-µs")
	b.ReportMetric(us(lat[len(lat)*999/1000]), "get-p999-µs")
	b.ReportMetric(us(lat[len(lat)-1]), "get-max-µs")
	if sweeps > 0 {
		b.ReportMetric(float64(swept.Milliseconds())/float64(sweeps), "sweep-ms")
	}
}
