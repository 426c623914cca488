package upstream_test

// Benchmarks of the gateway in process (go test -bench): the cost of
// relaying events and calls through it, against an in-process go-sdk
// upstream over loopback HTTP. Ratios against the upstream served
// directly are the benchmark program's (bench/, the gateway row).

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// BenchmarkEvents relays progress events of one countdown call: b.N
// events per run.
func BenchmarkEvents(b *testing.B) {
	ctx := b.Context()
	up := newUpstream(b, mcp.StreamableHTTPOptions{})
	g := newGateway(b, up.URL(), upstream.Options{})
	s, err := g.client.Initialize(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	st, err := s.Call(ctx, countdown(2, b.N, 0, "tok"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(mcptest.ID(2)) }); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCalls makes b.N tools/call round trips through the gateway.
func BenchmarkCalls(b *testing.B) {
	ctx := b.Context()
	up := newUpstream(b, mcp.StreamableHTTPOptions{})
	g := newGateway(b, up.URL(), upstream.Options{})
	s, err := g.client.Initialize(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		id := int64(i + 2)
		st, err := s.Call(ctx, countdown(id, 1, 0, ""))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(mcptest.ID(id)) }); err != nil {
			b.Fatal(err)
		}
		st.Close()
	}
}

// BenchmarkHibernation measures what an idle session costs the gateway
// in its process, live and hibernated (DESIGN.md, "Hibernation"): b.N
// sessions through an in-process gateway (memory store, real HTTP on
// loopback) in front of interop/go-sdk-memstore in its own process, each
// initialized and with one echo answered. It reports, per session, the
// heap (HeapInuse, spans' free room included; the memory store's record
// and events included) plus goroutine stacks (StackInuse), and the
// goroutines, once all are idle and live (what an idle session costs
// without hibernation), then once all are hibernated. It reports the
// latency of an echo call, 16 goroutines calling at once, at the 50th and
// 99th percentiles: of live sessions (call-), and of hibernated ones,
// which it wakes (wake-: the wake, the reattach's ping, the call).
// Run it with -benchtime=1000x.
func BenchmarkHibernation(b *testing.B) {
	p := testenv.StartProcess(b, testenv.Build(b, "./interop/go-sdk-memstore"), "--addr", "127.0.0.1:0", "--event-store", "none")
	g, clk := hibernatingGateway(b, testenv.ServeURL(b, p), upstream.Options{})
	ctx := b.Context()
	settle := func() (mem, live int64, goroutines int) {
		// Idle connections to the upstream close after idleConnTimeout.
		g.client.HTTP.CloseIdleConnections()
		time.Sleep(5 * time.Second)
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse + ms.StackInuse), int64(ms.HeapAlloc), runtime.NumGoroutine()
	}
	// The runtime keeps the descriptor of every goroutine that ended for
	// reuse: grow that pool to the live sessions' peak first, so that it
	// is in the baseline and not counted as a hibernated session's.
	var peak sync.WaitGroup
	release := make(chan struct{})
	for range 4 * b.N {
		peak.Go(func() { <-release })
	}
	close(release)
	peak.Wait()
	mem0, live0, gr0 := settle()
	sessions := make([]*mcptest.Session, b.N)
	for i := range b.N {
		s, err := g.client.Initialize(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		echoOnce(b, s, 2)
		sessions[i] = s
	}
	memLive, liveLive, grLive := settle()
	const callers = 16
	calls := func(id int64) []time.Duration {
		lat := make([]time.Duration, b.N)
		var wg sync.WaitGroup
		for w := range callers {
			wg.Go(func() {
				for i := w; i < b.N; i += callers {
					start := time.Now()
					echoOnce(b, sessions[i], id)
					lat[i] = time.Since(start)
				}
			})
		}
		wg.Wait()
		slices.Sort(lat)
		return lat
	}
	live := calls(3)
	g.hibernate(b, clk, b.N)
	memHib, liveHib, grHib := settle()

	b.ResetTimer()
	lat := calls(4)
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(memLive-mem0)/n, "live-B/session")
	b.ReportMetric(float64(liveLive-live0)/n, "live-objects-B/session")
	b.ReportMetric(float64(grLive-gr0)/n, "live-goroutines/session")
	b.ReportMetric(float64(memHib-mem0)/n, "hibernated-B/session")
	b.ReportMetric(float64(liveHib-live0)/n, "hibernated-objects-B/session")
	b.ReportMetric(float64(grHib-gr0)/n, "hibernated-goroutines/session")
	b.ReportMetric(float64(lat[b.N/2].Microseconds())/1000, "wake-p50-ms")
	b.ReportMetric(float64(lat[b.N*99/100].Microseconds())/1000, "wake-p99-ms")
	b.ReportMetric(float64(live[b.N/2].Microseconds())/1000, "call-p50-ms")
	b.ReportMetric(float64(live[b.N*99/100].Microseconds())/1000, "call-p99-ms")
}

// echoOnce calls echo on s with id and fails b unless it answers.
func echoOnce(b *testing.B, s *mcptest.Session, id int64) {
	st, err := s.Call(b.Context(), mcptest.ToolCall(id, "echo", map[string]string{"text": "hi"}, nil))
	if err != nil {
		b.Error(err)
		return
	}
	defer st.Close()
	if _, err := st.Until(func(e mcptest.Event) bool { return e.IsResponseTo(mcptest.ID(id)) }); err != nil {
		b.Error(err)
	}
}
