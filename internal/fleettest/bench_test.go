package fleettest_test

// Benchmarks of fleet mode against the memory store, through real
// processes on loopback, in one run:
//
//	go test -run '^$' -bench . -benchtime 3x ./internal/fleettest/
//
// BenchmarkCalls16 needs a duration instead (-benchtime 5s): one op is
// one call. The figures of bench/NOTES.md, "2026-12-01: Sentinel and Cluster ÷
// one Redis", come from
//
//	go test -run '^$' -bench 'StreamOne|Calls16' -benchtime 5s -count 3 ./internal/fleettest/
//
// Servers: memory (one `tidemark serve`, memory store), and fleets of two
// `tidemark serve --redis` replicas on a redis-server without persistence
// (redis) or with appendonly yes + appendfsync always (redis-aof). For the
// fleets, "owner" sends every request to the replica that owns the
// session, "forwarded" sends them to the other one, which forwards them.
// Then the deployments that survive the loss of a Redis server,
// one `tidemark serve` each, every request sent to it: sentinel (a
// primary, one replica, three redis-sentinel processes) and cluster (three
// primaries with a replica each), with the replication wait (the default
// --redis-replicas 0: every write waits for the primary's replica) and
// without it (-nowait: --redis-replicas -1). The client (this process) and
// the servers share the machine's cores.
//
// Metrics: events/s (progress notifications received per second), calls/s
// (tools/call round trips per second), and for BenchmarkTakeover the time
// from kill -9 of a session's owner to the first successful POST for that
// session on another replica (takeover-ms).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// benchServe starts `tidemark serve` with args and returns its endpoint.
func benchServe(b *testing.B, bin string, args ...string) (*testenv.Process, string) {
	b.Helper()
	p := testenv.StartProcess(b, bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "INFO",
		"--retention-events", "100000", "--max-sessions", "100000"}, args...)...)
	return p, testenv.ServeURL(b, p)
}

// setup is a server under test: the endpoints a client sends to; a
// session is created on init and used through use.
type setup struct {
	name      string
	init, use string
}

func benchSetups(b *testing.B) []setup {
	bin := testenv.BuildTidemark(b)
	_, mem := benchServe(b, bin)
	out := []setup{{"memory", mem, mem}}
	for _, kind := range []struct {
		name string
		aof  bool
	}{{"redis", false}, {"redis-aof", true}} {
		srv := redistest.Start(b, redistest.Options{AppendOnly: kind.aof})
		_, r0 := benchServe(b, bin, "--redis", srv.URL(), "--replica-id", "b0")
		_, r1 := benchServe(b, bin, "--redis", srv.URL(), "--replica-id", "b1")
		out = append(out, setup{kind.name + "/owner", r0, r0}, setup{kind.name + "/forwarded", r0, r1})
	}
	return append(out, failoverSetups(b, bin)...)
}

// failoverSetups starts a Sentinel deployment and a Cluster, and on each
// one `tidemark serve` with the replication wait and one without
// (-nowait).
func failoverSetups(b *testing.B, bin string) []setup {
	primary := redistest.Start(b, redistest.Options{})
	replica := redistest.Start(b, redistest.Options{ReplicaOf: primary.Addr()})
	replica.WaitInSync()
	ss := redistest.StartSentinels(b, primary)
	ss.WaitReady(1)
	cluster := redistest.StartCluster(b)
	var out []setup
	for _, d := range []struct{ name, url string }{{"sentinel", ss.URL()}, {"cluster", cluster.URL()}} {
		for _, w := range []struct{ suffix, replicas string }{{"", "0"}, {"-nowait", "-1"}} {
			name := d.name + w.suffix
			_, url := benchServe(b, bin, "--redis", d.url, "--redis-replicas", w.replicas, "--replica-id", name)
			out = append(out, setup{name + "/owner", url, url})
		}
	}
	return out
}

func benchClient(url string) *mcptest.Client {
	return &mcptest.Client{URL: url, HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
}

// newSession initializes a session on init and returns it as sent to use.
func (s setup) newSession(b *testing.B, ctx context.Context) *mcptest.Session {
	b.Helper()
	sess, err := benchClient(s.init).Initialize(ctx, version)
	if err != nil {
		b.Fatal(err)
	}
	return benchClient(s.use).SessionFor(sess.Token, sess.ProtocolVersion)
}

// countdownStream calls countdown n and returns the number of progress
// events received, checking the stream ends with the result.
func countdownStream(ctx context.Context, s *mcptest.Session, id int64, n int) (int, error) {
	st, err := s.Call(ctx, mcptest.ToolCall(id, "countdown", map[string]any{"n": n}, "bench"))
	if err != nil {
		return 0, err
	}
	defer st.Close()
	got := 0
	for {
		ev, err := st.Next()
		if err != nil {
			return got, fmt.Errorf("after %d progress events: %w", got, err)
		}
		if req, ok := ev.Request(); ok && req.Method == "notifications/progress" {
			got++
		}
		if ev.IsResponseTo(mcptest.ID(id)) {
			if got != n {
				return got, fmt.Errorf("%d progress events, want %d", got, n)
			}
			return got, nil
		}
	}
}

// BenchmarkStreamOne: one stream, one session: a countdown of 2000 steps
// without delay per op; events/s is the rate one client receives.
func BenchmarkStreamOne(b *testing.B) {
	testenv.NeedRedis(b)
	const n = 2000
	for _, s := range benchSetups(b) {
		b.Run(s.name, func(b *testing.B) {
			ctx := context.Background()
			sess := s.newSession(b, ctx)
			events := 0
			id := int64(10)
			for b.Loop() {
				id++
				got, err := countdownStream(ctx, sess, id, n)
				if err != nil {
					b.Fatal(err)
				}
				events += got
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkCalls16: 16 sessions, each calling countdown {n: 1} (no
// progress token) again as soon as its answer arrives; calls/s is the
// aggregate rate of round trips answered with the tool's result.
func BenchmarkCalls16(b *testing.B) {
	testenv.NeedRedis(b)
	const sessions = 16
	for _, s := range benchSetups(b) {
		b.Run(s.name, func(b *testing.B) {
			ctx := context.Background()
			var all []*mcptest.Session
			for range sessions {
				all = append(all, s.newSession(b, ctx))
			}
			var next atomic.Int64
			errs := make(chan error, sessions)
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, sess := range all {
				wg.Go(func() {
					for id := next.Add(1); id <= int64(b.N); id = next.Add(1) {
						if err := callOnce(ctx, sess, 10+id); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}

// callOnce calls countdown {n: 1} and checks that the answer is its
// result.
func callOnce(ctx context.Context, s *mcptest.Session, id int64) error {
	resp, err := s.Post(ctx, mcptest.ToolCall(id, "countdown", map[string]any{"n": 1}, nil))
	if err != nil {
		return err
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil {
		return err
	}
	if len(msgs) != 1 {
		return fmt.Errorf("call %d answered %v, want its result", id, msgs)
	}
	if r, ok := msgs[0].(*jsonrpc.Response); !ok || r.ID != mcptest.ID(id) || r.Error != nil {
		return fmt.Errorf("call %d answered %v, want its result", id, msgs[0])
	}
	return nil
}

// BenchmarkStream64: 64 sessions, each one stream at a time: per op, every
// session runs a countdown of 250 steps at once; events/s is the aggregate
// the 64 clients receive. For the fleets, sessions are created alternately
// on both replicas and used through the "use" replica, so "forwarded"
// forwards all of them and "owner" half (each replica owns half).
func BenchmarkStream64(b *testing.B) {
	testenv.NeedRedis(b)
	const sessions, n = 64, 250
	for _, s := range benchSetups(b) {
		b.Run(s.name, func(b *testing.B) {
			ctx := context.Background()
			var all []*mcptest.Session
			for i := range sessions {
				ss := s
				if i%2 == 1 && s.name != "memory" {
					ss.init, ss.use = s.use, s.init
				}
				all = append(all, ss.newSession(b, ctx))
			}
			events := 0
			id := int64(10)
			for b.Loop() {
				id++
				var wg sync.WaitGroup
				errs := make(chan error, sessions)
				for _, sess := range all {
					wg.Go(func() {
						if _, err := countdownStream(ctx, sess, id, n); err != nil {
							errs <- err
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				events += sessions * n
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkReplay10k: a finished stream of 10,000 progress events is
// replayed from its first event per op (GET with Last-Event-ID);
// events/s is the replay rate.
func BenchmarkReplay10k(b *testing.B) {
	testenv.NeedRedis(b)
	const n = 10000
	for _, s := range benchSetups(b) {
		b.Run(s.name, func(b *testing.B) {
			ctx := context.Background()
			sess := s.newSession(b, ctx)
			st, err := sess.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": n}, "bench"))
			if err != nil {
				b.Fatal(err)
			}
			first, err := st.Next()
			st.Close()
			if err != nil || !first.IsPriming() {
				b.Fatalf("first event %v %v, want priming", first, err)
			}
			// Wait until the countdown has finished in the log: a replay
			// from the start that ends with the result.
			for {
				st, err := sess.Resume(ctx, first.ID)
				if err != nil {
					b.Fatal(err)
				}
				evs, err := st.Collect()
				st.Close()
				if err != nil {
					b.Fatal(err)
				}
				if len(evs) == n+2 {
					break
				}
			}
			events := 0
			for b.Loop() {
				st, err := sess.Resume(ctx, first.ID)
				if err != nil {
					b.Fatal(err)
				}
				got := 0
				for {
					ev, err := st.Next()
					if err != nil {
						st.Close()
						b.Fatalf("replay ended after %d events: %v", got, err)
					}
					if ev.Message != nil {
						got++
					}
					if ev.IsResponseTo(mcptest.ID(2)) {
						break
					}
				}
				st.Close()
				if got != n+1 {
					b.Fatalf("replayed %d messages, want %d", got, n+1)
				}
				events += n
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkTakeover: per op, a session is created on a fresh replica,
// which is then killed (kill -9) at a random point of its renewal cycle
// (after its first renewal), or stopped with SIGTERM (it releases its
// leases); then POSTs on the other replica until one succeeds. takeover-ms is the mean time from the
// kill or signal to that success. Run with -benchtime 3x: each op waits
// for a lease to lapse.
func BenchmarkTakeover(b *testing.B) {
	testenv.NeedRedis(b)
	bin := testenv.BuildTidemark(b)
	srv := redistest.Start(b, redistest.Options{AppendOnly: true})
	for _, c := range []struct {
		name       string
		ttl, renew time.Duration
		sig        syscall.Signal
	}{
		{"kill9/lease-2s", 2 * time.Second, 400 * time.Millisecond, syscall.SIGKILL},
		{"kill9/lease-10s", 10 * time.Second, 3 * time.Second, syscall.SIGKILL},
		{"sigterm/lease-10s", 10 * time.Second, 3 * time.Second, syscall.SIGTERM},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			lease := []string{"--redis", srv.URL(), "--lease-ttl", c.ttl.String(), "--lease-renew", c.renew.String()}
			_, other := benchServe(b, bin, append(lease, "--replica-id", "survivor-"+c.name)...)
			var total time.Duration
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				victim, url := benchServe(b, bin, append(lease, "--replica-id", fmt.Sprintf("victim-%s-%d", c.name, i))...)
				sess := setup{init: url, use: other}.newSession(b, ctx)
				// Kill at a random point of the renewal cycle.
				time.Sleep(c.renew + rand.N(c.renew))
				b.StartTimer()
				start := time.Now()
				if c.sig == syscall.SIGKILL {
					victim.Kill()
				} else if err := victim.Signal(c.sig); err != nil {
					b.Fatal(err)
				}
				for {
					resp, err := sess.Post(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "x"}, nil))
					if err != nil {
						b.Fatal(err)
					}
					ok := resp.StatusCode == http.StatusOK
					if ok {
						_, err = mcptest.ReadAnswer(resp)
					} else {
						resp.Body.Close()
						time.Sleep(20 * time.Millisecond)
					}
					if ok && err == nil {
						break
					}
				}
				total += time.Since(start)
				b.StopTimer()
				victim.Kill()
				<-victim.Done()
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(i), "takeover-ms")
		})
	}
}
