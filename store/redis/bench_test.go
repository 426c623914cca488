package redis_test

// Benchmarks of the Redis store against the memory store, in one run:
//
//	go test -run '^$' -bench . -benchtime 2s ./store/redis/
//
// Each benchmark has three sub-benchmarks: memory (store/memory), redis
// (redis-server without persistence) and redis-aof (appendonly yes,
// appendfsync always: Redis fsyncs before it acknowledges). Events carry
// 200 bytes of data. Custom metrics: events/s, and for Wait the wake-up
// latency is wake-ns/op. BenchmarkWaitWake sleeps 1 ms per op outside the
// timer; run it with a count, e.g. -benchtime 2000x.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

var payload = []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok-1","progress":42,"total":100,"message":"` + strings.Repeat("x", 200-104) + `"}}`)

// backend makes fresh stores of one kind; two stores of one backend share
// the data (two replicas), except for memory, where "another store" is the
// same one.
type backend struct {
	name string
	open func(b *testing.B, opts redis.Options) store.Store
}

func backends(b *testing.B) []backend {
	plain := redistest.Start(b, redistest.Options{})
	aof := redistest.Start(b, redistest.Options{AppendOnly: true})
	onRedis := func(srv *redistest.Server) func(b *testing.B, opts redis.Options) store.Store {
		return func(b *testing.B, opts redis.Options) store.Store {
			return open(b, srv, opts)
		}
	}
	mem := memory.New(memory.Options{})
	return []backend{
		{"memory", func(*testing.B, redis.Options) store.Store { return mem }},
		{"redis", onRedis(plain)},
		{"redis-aof", onRedis(aof)},
	}
}

// session creates a new session (unique token) in s.
func session(b *testing.B, s store.Store) string {
	b.Helper()
	tok := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), benchSeq.Add(1))
	if err := s.Create(context.Background(), store.Record{Token: tok, Generation: 1, Owner: "bench"}); err != nil {
		b.Fatal(err)
	}
	return tok
}

var benchSeq atomic.Int64

func event() []store.Event {
	return []store.Event{{Stream: 1, Kind: store.KindMessage, Time: time.Now(), Data: payload}}
}

func perSecond(b *testing.B, events int) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAppendOneSession: one writer appends one event per call to one
// session, each call waiting for its acknowledgement (the latency path of
// one stream).
func BenchmarkAppendOneSession(b *testing.B) {
	testenv.NeedRedis(b)
	ctx := context.Background()
	for _, be := range backends(b) {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b, redis.Options{})
			tok := session(b, s)
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.Append(ctx, tok, 1, event()); err != nil {
					b.Fatal(err)
				}
			}
			perSecond(b, b.N)
		})
	}
}

// BenchmarkAppend64Sessions: 64 writers, one per session, append at once;
// events/s is the aggregate.
func BenchmarkAppend64Sessions(b *testing.B) {
	testenv.NeedRedis(b)
	ctx := context.Background()
	for _, be := range backends(b) {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b, redis.Options{PoolSize: 64})
			toks := make([]string, 64)
			for i := range toks {
				toks[i] = session(b, s)
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			var done atomic.Int64
			per := b.N / 64
			if per == 0 {
				per = 1
			}
			for i := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tok := toks[i]
					for range per {
						if _, err := s.Append(ctx, tok, 1, event()); err != nil {
							b.Error(err)
							return
						}
						done.Add(1)
					}
				}()
			}
			wg.Wait()
			perSecond(b, int(done.Load()))
		})
	}
}

// BenchmarkRead10k: replay of a session of 10,000 events in one Read (the
// work of a resumed GET whose cursor is 10,000 events behind).
func BenchmarkRead10k(b *testing.B) {
	testenv.NeedRedis(b)
	ctx := context.Background()
	for _, be := range backends(b) {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b, redis.Options{})
			tok := session(b, s)
			for range 100 {
				evs := make([]store.Event, 100)
				for i := range evs {
					evs[i] = event()[0]
				}
				if _, err := s.Append(ctx, tok, 1, evs); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				evs, _, err := s.Read(ctx, tok, 0, 10_000)
				if err != nil || len(evs) != 10_000 {
					b.Fatalf("Read: %d events, %v", len(evs), err)
				}
			}
			perSecond(b, b.N*10_000)
		})
	}
}

// BenchmarkReadNewest: a live reader's read, the newest two of 1,000
// events, one MULTI/EXEC (HMGET, GET, XRANGE).
func BenchmarkReadNewest(b *testing.B) {
	testenv.NeedRedis(b)
	ctx := context.Background()
	for _, be := range backends(b) {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b, redis.Options{})
			tok := session(b, s)
			evs := make([]store.Event, 1000)
			for i := range evs {
				evs[i] = event()[0]
			}
			if _, err := s.Append(ctx, tok, 1, evs); err != nil {
				b.Fatal(err)
			}
			if err := s.Sync(ctx, tok); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				evs, _, err := s.Read(ctx, tok, 998, 256)
				if err != nil || len(evs) != 2 {
					b.Fatalf("Read: %d events, %v", len(evs), err)
				}
			}
		})
	}
}

// BenchmarkWaitWake: a reader blocked in Wait on one store (replica) and a
// writer appending through another; ns/op is the time from the start of
// the Append to the return of the Wait it wakes.
func BenchmarkWaitWake(b *testing.B) {
	testenv.NeedRedis(b)
	ctx := context.Background()
	for _, be := range backends(b) {
		b.Run(be.name, func(b *testing.B) {
			reader := be.open(b, redis.Options{})
			writer := be.open(b, redis.Options{})
			tok := session(b, writer)
			var latency time.Duration
			b.ResetTimer()
			for i := range b.N {
				woke := make(chan time.Time, 1)
				go func() {
					if err := reader.Wait(ctx, tok, uint64(i)); err != nil {
						b.Error(err)
					}
					woke <- time.Now()
				}()
				// Let the reader block; this pause is not measured.
				b.StopTimer()
				time.Sleep(time.Millisecond)
				b.StartTimer()
				start := time.Now()
				if _, err := writer.Append(ctx, tok, 1, event()); err != nil {
					b.Fatal(err)
				}
				latency += (<-woke).Sub(start)
			}
			b.ReportMetric(float64(latency.Nanoseconds())/float64(b.N), "wake-ns/op")
		})
	}
}

// BenchmarkTakeover: the store's part of a takeover, as a replica does it
// after a lease expired: Get the record, then Claim generation+1. Each op
// first appends 100 events (not timed), which the Claim discards.
func BenchmarkTakeover(b *testing.B) {
	testenv.NeedRedis(b)
	ctx := context.Background()
	for _, be := range backends(b) {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b, redis.Options{})
			tok := session(b, s)
			evs := make([]store.Event, 100)
			for i := range b.N {
				b.StopTimer()
				for j := range evs {
					evs[j] = event()[0]
				}
				if _, err := s.Append(ctx, tok, uint64(i+1), evs); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				rec, err := s.Get(ctx, tok)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Claim(ctx, tok, fmt.Sprintf("r%d", i), rec.Generation, time.Now().Add(time.Minute)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendExpiry: BenchmarkAppendOneSession and
// BenchmarkAppend64Sessions with the keys' expiry (Options.IdleTTL, the
// default) and without (IdleTTL negative), in one run, each on a
// redis-server of its own (a shared one's growing append-only file slows
// whichever runs later), so that the cost of keeping each session's
// expiry on the append path shows. Besides events/s, redis-ns/event is
// the time Redis spent in the append scripts (INFO commandstats,
// evalsha) per event appended, less noisy than the round trips on a
// shared machine.
func BenchmarkAppendExpiry(b *testing.B) {
	testenv.NeedRedis(b)
	ctx := context.Background()
	// scriptTime reports Redis's script time per event since the
	// sub-benchmark's CONFIG RESETSTAT.
	scriptTime := func(b *testing.B, c *goredis.Client, events int) {
		info := c.Info(ctx, "commandstats").Val()
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
				for f := range strings.SplitSeq(v, ",") {
					if us, ok := strings.CutPrefix(f, "usec="); ok {
						var x float64
						fmt.Sscan(us, &x)
						b.ReportMetric(x*1000/float64(events), "redis-ns/event")
					}
				}
			}
		}
	}
	for _, aof := range []bool{false, true} {
		name := "redis"
		if aof {
			name = "redis-aof"
		}
		for _, exp := range []struct {
			name string
			ttl  time.Duration
		}{{"none", -1}, {"idle-ttl", 0}} {
			b.Run(name+"/one/"+exp.name, func(b *testing.B) {
				srv := redistest.Start(b, redistest.Options{AppendOnly: aof})
				c := client(b, srv)
				s := open(b, srv, redis.Options{IdleTTL: exp.ttl})
				tok := session(b, s)
				c.ConfigResetStat(ctx)
				b.ResetTimer()
				for b.Loop() {
					if _, err := s.Append(ctx, tok, 1, event()); err != nil {
						b.Fatal(err)
					}
				}
				perSecond(b, b.N)
				scriptTime(b, c, b.N)
			})
			b.Run(name+"/64/"+exp.name, func(b *testing.B) {
				srv := redistest.Start(b, redistest.Options{AppendOnly: aof})
				c := client(b, srv)
				s := open(b, srv, redis.Options{IdleTTL: exp.ttl, PoolSize: 64})
				toks := make([]string, 64)
				for i := range toks {
					toks[i] = session(b, s)
				}
				c.ConfigResetStat(ctx)
				b.ResetTimer()
				var wg sync.WaitGroup
				var done atomic.Int64
				per := max(b.N/64, 1)
				for i := range 64 {
					wg.Go(func() {
						for range per {
							if _, err := s.Append(ctx, toks[i], 1, event()); err != nil {
								b.Error(err)
								return
							}
							done.Add(1)
						}
					})
				}
				wg.Wait()
				perSecond(b, int(done.Load()))
				scriptTime(b, c, int(done.Load()))
			})
		}
	}
}
