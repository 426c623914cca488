package durable_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// benchStores returns the two stores compared side by side, each with the
// eventlog options `tidemark serve` gives it: the memory store with the
// process budget, the durable store without (its data directory is
// bounded instead).
func benchStores(b *testing.B) []struct {
	name string
	new  func() (store.Store, eventlog.Options)
} {
	return []struct {
		name string
		new  func() (store.Store, eventlog.Options)
	}{
		{"store=memory", func() (store.Store, eventlog.Options) {
			return memory.New(memory.Options{}), eventlog.Options{}
		}},
		{"store=durable", func() (store.Store, eventlog.Options) {
			s, err := durable.Open(b.TempDir(), durable.Options{SweepInterval: -1, MinFreeBytes: -1, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			return s, eventlog.Options{Budget: -1}
		}},
	}
}

// progress is a realistic event: a progress notification of ~150 bytes.
func progress(i int) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p-%d","progress":%d,"total":1000000,"message":"step %d of 1000000"}}`, i%977, i, i)
}

func createSession(b *testing.B, st store.Store, token string) {
	b.Helper()
	now := time.Now()
	if err := st.Create(context.Background(), store.Record{Token: token, Generation: 1, Owner: "bench", Created: now, LastSeen: now}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAppendDelivery measures, for the memory and the durable store
// side by side, 8 sessions each appending one event at a time through
// eventlog (as session.Live does for every outbound message), with the
// serve command's retention, while a reader per session tails the stream
// (as a connection does). Each session has one event in flight: the next
// append starts once the reader has the previous event, so the latency is
// the path's own, without queueing. It reports appends/s over all
// sessions, and the p50 and p99 of the time from the start of Append to
// the reader's receipt of the event (append-to-delivery).
func BenchmarkAppendDelivery(b *testing.B) {
	const sessions = 8
	for _, bs := range benchStores(b) {
		b.Run(bs.name, func(b *testing.B) {
			st, lopts := bs.new()
			defer st.Close()
			log := eventlog.New(st, lopts)
			ctx := context.Background()
			per := max(1, b.N/sessions)
			lat := make([][]time.Duration, sessions)
			var wg sync.WaitGroup
			b.ResetTimer()
			begin := time.Now()
			for s := range sessions {
				token := fmt.Sprintf("bench-session-%d", s)
				createSession(b, st, token)
				delivered := make(chan time.Time, 1)
				wg.Add(2)
				go func() { // writer: one event in flight, like a tool's progress
					defer wg.Done()
					got := make([]time.Duration, 0, per)
					for i := 1; i <= per; i++ {
						start := time.Now()
						if err := log.Append(ctx, token, 1, store.Event{Stream: 1, Kind: store.KindMessage, Data: progress(i)}); err != nil {
							b.Error(err)
							return
						}
						got = append(got, (<-delivered).Sub(start))
					}
					lat[s] = got
				}()
				go func() { // reader: the connection tailing the stream
					defer wg.Done()
					rd := log.NewReader(token, 1, 1, 0)
					for n := 0; n < per; {
						evs, err := rd.Next(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						for range evs {
							delivered <- time.Now()
							n++
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(begin)
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				b.Fatal("no event delivered")
			}
			b.ReportMetric(float64(len(all))/el.Seconds(), "appends/s")
			b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}

// BenchmarkReplay10k measures replaying a stream of 10,000 retained events
// through eventlog.Reader (the path of a resumed GET), for both stores.
func BenchmarkReplay10k(b *testing.B) {
	const events = 10000
	for _, bs := range benchStores(b) {
		b.Run(bs.name, func(b *testing.B) {
			st, lopts := bs.new()
			defer st.Close()
			log := eventlog.New(st, lopts)
			ctx := context.Background()
			createSession(b, st, "replay")
			for i := 0; i < events; i += 500 {
				evs := make([]store.Event, 500)
				for j := range evs {
					evs[j] = store.Event{Stream: 1, Kind: store.KindMessage, Data: progress(i + j)}
				}
				if err := log.Append(ctx, "replay", 1, evs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				rd := log.NewReader("replay", 1, 1, 0)
				n := 0
				for n < events {
					evs, err := rd.Next(ctx)
					if err != nil {
						b.Fatal(err)
					}
					n += len(evs)
				}
				if n != events {
					b.Fatalf("replayed %d events, want %d", n, events)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/replay")
		})
	}
}

// BenchmarkCompaction1M writes 1,000,000 events (~150-byte progress
// notifications) into 10 sessions of the durable store, then trims each to
// its newest 10% as retention would, and compacts: it reports the data
// directory's size before the trim, after it, and after compaction (MiB).
// It runs only with -bench (about a minute).
func BenchmarkCompaction1M(b *testing.B) {
	const total, sessions, batch = 1_000_000, 10, 1000
	for b.Loop() {
		st, err := durable.Open(b.TempDir(), durable.Options{MaxBytes: -1, SweepInterval: -1, MinFreeBytes: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for s := range sessions {
			token := fmt.Sprintf("compact-%d", s)
			createSession(b, st, token)
			for i := 0; i < total/sessions; i += batch {
				evs := make([]store.Event, batch)
				now := time.Now()
				for j := range evs {
					evs[j] = store.Event{Stream: 1, Kind: store.KindMessage, Data: progress(i + j), Time: now}
				}
				if _, err := st.Append(ctx, token, 1, evs); err != nil {
					b.Fatal(err)
				}
			}
		}
		before := st.Usage()
		for s := range sessions {
			if _, err := st.Trim(ctx, fmt.Sprintf("compact-%d", s), 1, total/sessions*9/10+1); err != nil {
				b.Fatal(err)
			}
		}
		trimmed := st.Usage()
		t0 := time.Now()
		if err := st.Compact(ctx); err != nil {
			b.Fatal(err)
		}
		compactTime := time.Since(t0)
		if err := st.Close(); err != nil { // lets Pebble delete obsolete files
			b.Fatal(err)
		}
		after := durable.DirSize(st.Dir())
		b.ReportMetric(float64(before.RetainedBytes)/(1<<20), "retained-MiB-before")
		b.ReportMetric(float64(before.DirBytes)/(1<<20), "dir-MiB-before")
		b.ReportMetric(float64(trimmed.DirBytes)/(1<<20), "dir-MiB-after-trim")
		b.ReportMetric(float64(after)/(1<<20), "dir-MiB-after-compaction")
		b.ReportMetric(compactTime.Seconds(), "compaction-s")
	}
}

// BenchmarkReadNearLargeEvents measures a read of a session's few small
// events when other sessions' large events (1 MiB answers) sit next to them
// in key order on disk, as the tail of a live stream reads after clients
// echoed large texts (a countdown of 5,000 steps after 270 echoes of
// 4 MiB).
func BenchmarkReadNearLargeEvents(b *testing.B) {
	ctx := context.Background()
	s, err := durable.Open(b.TempDir(), durable.Options{SweepInterval: -1, MinFreeBytes: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	large := make([]byte, 1<<20)
	for i := range large {
		large[i] = byte('a' + i*7%26)
	}
	for i := range 64 {
		tok := fmt.Sprintf("big-%04d", i)
		createSession(b, s, tok)
		if _, err := s.Append(ctx, tok, 1, []store.Event{{Stream: 1, Kind: store.KindMessage, Data: large, Time: time.Now()}}); err != nil {
			b.Fatal(err)
		}
	}
	const tok = "big-003x" // between big-0039 and big-0040
	createSession(b, s, tok)
	for i := range 10 {
		if _, err := s.Append(ctx, tok, 1, []store.Event{{Stream: 1, Kind: store.KindMessage, Data: progress(i), Time: time.Now()}}); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Compact(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		evs, _, err := s.Read(ctx, tok, 5, 256)
		if err != nil || len(evs) != 5 {
			b.Fatalf("read %d events, %v; want 5", len(evs), err)
		}
	}
}

// BenchmarkReadNewest measures a live reader's read: the newest two
// events of a session that holds 1,000 (800 flushed to a table, 200
// in the memtable): point lookups (readPoints), not an iterator.
func BenchmarkReadNewest(b *testing.B) {
	dir := b.TempDir()
	s, err := durable.Open(dir, durable.Options{Logger: quiet(), SweepInterval: -1, MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, tok := range []string{"a", "b", "c"} {
		s.Create(ctx, rec(tok, "p", time.Now()))
		s.Append(ctx, tok, 1, events(800, time.Now()))
		s.Sync(ctx, tok)
	}
	s.Compact(ctx)
	for _, tok := range []string{"a", "b", "c"} {
		s.Append(ctx, tok, 1, events(200, time.Now()))
		s.Sync(ctx, tok)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		evs, _, err := s.Read(ctx, "b", 998, 256)
		if err != nil || len(evs) != 2 {
			b.Fatal(len(evs), err)
		}
	}
}
