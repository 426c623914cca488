// handover_bench_test.go measures the handover of a graceful shutdown
// (Registry.HandOver) on each store that outlives the process.

package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// BenchmarkHandOver creates b.N initialized sessions, each with one echo
// call answered, and times one HandOver of them all: ns/op is the time
// per session, and sessions/s how many a shutdown hands over per second
// (tidemark serve allows 2 s). Run it with -benchtime=10000x.
func BenchmarkHandOver(b *testing.B) {
	onLastingStores(b, benchHandOver)
}

func benchHandOver(b *testing.B, open func(*testenv.Clock) store.Store) {
	ctx := context.Background()
	f := restorableRegistry(b, open, session.Options{HibernateAfter: -1, HandOver: true})
	reg := f.reg
	for range b.N {
		l, err := reg.Create(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		initialize(b, f, l)
		roundTrip(b, f, l, echo(b, 2, "hello"))
	}
	// Each call leaves its session just after its answer is read.
	for deadline := time.Now().Add(time.Minute); reg.CallsInFlight() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d calls still in flight", reg.CallsInFlight())
		}
	}
	b.ResetTimer()
	start := time.Now()
	handed, left := reg.HandOver(ctx)
	elapsed := time.Since(start)
	b.StopTimer()
	if handed != b.N || left != 0 {
		b.Fatalf("HandOver = %d handed over, %d left; want %d, 0", handed, left, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sessions/s")
}
