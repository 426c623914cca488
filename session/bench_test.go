package session_test

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

func benchRegistry(b *testing.B, opts session.Options) *session.Registry {
	st := memory.New(memory.Options{})
	log := eventlog.New(st, eventlog.Options{})
	opts.Logger = slog.New(slog.DiscardHandler)
	reg := session.New(st, log, gosdk.New(demo.NewServer()), opts)
	b.Cleanup(func() { reg.Close() })
	return reg
}

// BenchmarkGetParallel looks up 256 sessions from every goroutine, as each
// request of workload (a) with 256 sessions does.
func BenchmarkGetParallel(b *testing.B) {
	ctx := context.Background()
	reg := benchRegistry(b, session.Options{})
	const sessions = 256
	tokens := make([]string, sessions)
	for i := range tokens {
		l, err := reg.Create(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = l.Token()
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(128)
	b.RunParallel(func(pb *testing.PB) {
		tok := tokens[int(next.Add(1)-1)%sessions]
		for pb.Next() {
			if _, err := reg.Get(ctx, tok, ""); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkIdleSession reports the heap a registry holds per session that
// was created and answered an initialize (engine gosdk, memory store).
func BenchmarkIdleSession(b *testing.B) {
	ctx := context.Background()
	const n = 2000
	for b.Loop() {
		reg := benchRegistry(b, session.Options{})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			l, err := reg.Create(ctx, "")
			if err != nil {
				b.Fatal(err)
			}
			benchInitialize(b, l)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heapB/session")
		b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stackB/session")
		b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
		reg.Close()
	}
}

// benchInitialize answers an initialize and notifications/initialized on l.
func benchInitialize(b *testing.B, l *session.Live) {
	ctx := context.Background()
	id, _ := jsonrpc.MakeID(float64(1))
	req := &jsonrpc.Request{ID: id, Method: "initialize", Params: []byte(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}`)}
	s, err := l.OpenStream(ctx, []*jsonrpc.Request{req}, false, 0)
	if err != nil {
		b.Fatal(err)
	}
	rd := l.Reader(s, s)
	if err := l.Deliver(ctx, req, engine.Request{}); err != nil {
		b.Fatal(err)
	}
	for done := false; !done; {
		evs, err := rd.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range evs {
			done = done || e.End
		}
	}
	if err := l.Deliver(ctx, &jsonrpc.Request{Method: "notifications/initialized"}, engine.Request{}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSend sends progress notifications on the standalone stream of a
// session: the encoding of each message and its append to the log, the
// per-event work of workload (b) outside the engine.
func BenchmarkSend(b *testing.B) {
	ctx := context.Background()
	reg := benchRegistry(b, session.Options{})
	l, err := reg.Create(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	msg := &jsonrpc.Request{Method: "notifications/progress", Params: []byte(`{"message":"step 1 of 20000","progress":1,"progressToken":"p","total":20000}`)}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Send(ctx, msg, jsonrpc.ID{}); err != nil {
			b.Fatal(err)
		}
	}
}
