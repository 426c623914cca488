// observe_bench_test.go measures tool calls with metrics and tracing on
// and off (bench/NOTES.md, "2026-12-01: metrics and tracing on ÷ off").

package tidemark_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/otlptest"
	"github.com/tidemark-mcp/tidemark/transport"
)

// BenchmarkToolCalls measures tools/call round trips (echo, one SSE stream
// each) over loopback HTTP from parallel sessions, in memory mode: "off"
// without metrics or tracing, "observed" with a Prometheus registry and
// every span exported over OTLP/HTTP to a receiver in this process.
// bench/NOTES.md gives observed ÷ off.
func BenchmarkToolCalls(b *testing.B) {
	quiet := slog.New(slog.DiscardHandler)
	b.Run("off", func(b *testing.B) { benchCalls(b, &tidemark.Options{Transport: transport.Options{Logger: quiet}}, 0) })
	b.Run("observed", func(b *testing.B) {
		recv := otlptest.StartHTTP(b)
		exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(recv.Endpoint+"/v1/traces"))
		if err != nil {
			b.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		defer tp.Shutdown(context.Background())
		benchCalls(b, &tidemark.Options{Transport: transport.Options{Logger: quiet}, Registerer: prometheus.NewRegistry(), TracerProvider: tp}, 0)
	})
}

// benchCalls runs the calls of BenchmarkToolCalls on a handler with opts:
// GOMAXPROCS sessions at once, or sessions when it is positive.
func benchCalls(b *testing.B, opts *tidemark.Options, sessions int) {
	h := tidemark.NewHandler(demo.NewServer(), opts)
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &mcptest.Client{URL: srv.URL, HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	ctx := context.Background()
	b.ReportAllocs()
	cpu := cpuTime(b)
	if sessions > 0 {
		b.SetParallelism((sessions + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		sess, err := client.Initialize(ctx, "")
		if err != nil {
			b.Error(err)
			return
		}
		id := int64(1)
		for pb.Next() {
			id++
			st, err := sess.Call(ctx, mcptest.ToolCall(id, "echo", map[string]any{"text": "hi"}, nil))
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := st.Collect(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/call")
}

// cpuTime returns the CPU time (user and system) this process has used:
// per call, it is the cost of a call (server, client and, when observed,
// the span receiver) however many other processes share the cores.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
