package upstream_test

// Benchmarks of the gateway in process (go test -bench): the cost of
// relaying events and calls through it, against an in-process go-sdk
// upstream over loopback HTTP. Ratios against the upstream served
// directly are the benchmark program's (bench/, the gateway row).

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
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
