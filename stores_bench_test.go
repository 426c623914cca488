// stores_bench_test.go measures tool calls on each store that runs in the
// process (bench/NOTES.md, "2026-12-01: stores ÷ memory, pipelined appends").

package tidemark_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/transport"
)

// BenchmarkToolCallsByStore measures tools/call round trips as
// BenchmarkToolCalls does (echo over loopback HTTP, client in the
// process), from 16 sessions at once as the benchmark program's workload
// (a) does, on the memory store and on the durable store in a temporary
// directory: durable ÷ memory per call, without a second process's
// scheduling in the figures.
func BenchmarkToolCallsByStore(b *testing.B) {
	quiet := slog.New(slog.DiscardHandler)
	b.Run("memory", func(b *testing.B) {
		benchCalls(b, &tidemark.Options{Transport: transport.Options{Logger: quiet}}, 16)
	})
	b.Run("durable", func(b *testing.B) {
		st, err := durable.Open(b.TempDir(), durable.Options{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		benchCalls(b, &tidemark.Options{Store: st, Transport: transport.Options{Logger: quiet}}, 16)
	})
	b.Run("redis", func(b *testing.B) {
		testenv.NeedRedis(b)
		srv := redistest.Start(b, redistest.Options{AppendOnly: true})
		st, err := redis.New(context.Background(), redis.Options{URL: srv.URL()})
		if err != nil {
			b.Fatal(err)
		}
		benchCalls(b, &tidemark.Options{Store: st, Transport: transport.Options{Logger: quiet}}, 16)
	})
}
