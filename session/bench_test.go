// bench_test.go holds the benchmarks of package session: lookups, the
// memory of an idle session, sending, and creating sessions below and at
// the cap.

package session_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// BenchmarkFullSession is BenchmarkIdleSession for sessions whose state
// holds the most engine.State.Admit allows: initialize params of
// engine.MaxInitializeParams bytes, then engine.MaxSubscriptions
// subscriptions whose URIs take engine.MaxSubscriptionBytes together. Its
// heapB/session is the worst case of what the memory limit counts per
// session (cmd/tidemark, sessionMemory).
func BenchmarkFullSession(b *testing.B) {
	ctx := context.Background()
	const n = 500
	p := `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"","version":"1"}}`
	params := strings.Replace(p, `"name":""`, `"name":"`+strings.Repeat("n", engine.MaxInitializeParams-len(p))+`"`, 1)
	uriBytes := engine.MaxSubscriptionBytes / engine.MaxSubscriptions
	for b.Loop() {
		reg := benchRegistry(b, session.Options{})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range n {
			l, err := reg.Create(ctx, "")
			if err != nil {
				b.Fatal(err)
			}
			benchInitializeWith(b, l, params)
			for k := range engine.MaxSubscriptions {
				uri := fmt.Sprintf("demo://%d/%d/", i, k)
				id, _ := jsonrpc.MakeID(float64(k + 2))
				benchCall(b, l, &jsonrpc.Request{ID: id, Method: "resources/subscribe",
					Params: []byte(`{"uri":"` + uri + strings.Repeat("u", uriBytes-len(uri)) + `"}`)})
			}
			if got := len(l.State().Subscriptions); got != engine.MaxSubscriptions {
				b.Fatalf("session holds %d subscriptions, want %d", got, engine.MaxSubscriptions)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heapB/session")
		reg.Close()
	}
}

// benchInitialize answers an initialize and notifications/initialized on l.
func benchInitialize(b *testing.B, l *session.Live) {
	benchInitializeWith(b, l, `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}`)
}

// benchInitializeWith is benchInitialize with the initialize params given.
func benchInitializeWith(b *testing.B, l *session.Live, params string) {
	id, _ := jsonrpc.MakeID(float64(1))
	benchCall(b, l, &jsonrpc.Request{ID: id, Method: "initialize", Params: []byte(params)})
	if err := l.Deliver(context.Background(), &jsonrpc.Request{Method: "notifications/initialized"}, engine.Request{}); err != nil {
		b.Fatal(err)
	}
}

// benchCall sends the call req on a stream of its own and reads the stream
// to its end.
func benchCall(b *testing.B, l *session.Live, req *jsonrpc.Request) {
	ctx := context.Background()
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
		if err := session.OutboxOf(l).Send(ctx, msg, jsonrpc.ID{}); err != nil {
			b.Fatal(err)
		}
	}
}

// capSessions is the --max-sessions default the creation benchmark fills
// the registry to.
const capSessions = session.DefaultMaxSessions

// BenchmarkCreate measures sessions created per second (Create, then an
// initialize answered and notifications/initialized) by 1, 8 and 64
// concurrent creators, on a registry that already holds capSessions
// sessions: "below" has room for every new one, "cap" is full, so each
// creation evicts the least recently used session. bench/NOTES.md ("2026-12-01: sessions created at --max-sessions") gives
// cap ÷ below per level; run with a fixed -benchtime (e.g. 1000x), since
// each run fills a registry first. cpu-µs/session is the process's CPU
// time per creation.
func BenchmarkCreate(b *testing.B) {
	for _, creators := range []int{1, 8, 64} {
		for _, full := range []bool{false, true} {
			name := fmt.Sprintf("below/creators=%d", creators)
			if full {
				name = fmt.Sprintf("cap/creators=%d", creators)
			}
			b.Run(name, func(b *testing.B) { benchCreate(b, creators, full) })
		}
	}
}

func benchCreate(b *testing.B, creators int, full bool) {
	ctx := context.Background()
	opts := session.Options{MaxSessions: capSessions}
	if !full {
		opts.MaxSessions = capSessions + b.N + 1
	}
	reg := benchRegistry(b, opts)
	for range capSessions {
		l, err := reg.Create(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		benchInitialize(b, l)
	}
	runtime.GC() // the fill's garbage is not the creators' cost
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range creators {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				l, err := reg.Create(ctx, "")
				if err != nil {
					b.Error(err)
					return
				}
				benchInitialize(b, l)
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sessions/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/session")
	b.StopTimer()
	// Sessions held at the end: capSessions+b.N below the cap, and
	// capSessions at it (more means the cap was overshot).
	b.ReportMetric(float64(reg.Len()), "held")
}

// cpuTime returns the CPU time (user and system) the process has used. On
// a machine whose cores other work shares, it is the fairer measure of
// what a creation costs than the rate.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGetHeld looks a session up for a request and ends the request,
// as every request of a registry that hibernates or hands over does: the
// lookup holds the session (holdFor) and the request's end releases the
// hold in a goroutine of its own (unhold).
func BenchmarkGetHeld(b *testing.B) {
	reg := benchRegistry(b, session.Options{HibernateAfter: time.Hour})
	l, err := reg.Create(context.Background(), "")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := reg.Get(ctx, l.Token(), ""); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}
