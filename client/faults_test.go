package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/client"
	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// cutter is a faultproxy filter that cuts connections at random points of
// their SSE bodies: once a response has delivered its first complete event
// (so that the stream has a cursor), the connection is cut, with
// probability p, after a uniformly random number of further bytes in
// [0, span), which may fall inside an event, between events or beyond the
// response's end (then nothing is cut). A cut before a POST stream's first
// event would leave the call's outcome unknowable to any client (there is no
// cursor); TestNoCursorFailsCall covers that case. The client must not
// reuse connections (DisableKeepAlives), so that each connection carries
// exactly one response.
type cutter struct {
	p    float64
	span int

	mu    sync.Mutex
	rng   *rand.Rand
	conns map[int]*cutState
	cuts  int
}

type cutState struct {
	tail    []byte // the last bytes of the previous chunk, for patterns split across chunks
	headers bool   // the response's header block has passed
	armed   bool   // the first event has passed
	budget  int    // bytes to forward before the cut; -1: no cut
}

func newCutter(seed uint64, p float64, span int) *cutter {
	return &cutter{p: p, span: span, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), conns: make(map[int]*cutState)}
}

func (c *cutter) filter(conn int, chunk []byte) faultproxy.Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.conns[conn]
	if st == nil {
		st = &cutState{budget: -1}
		c.conns[conn] = st
	}
	start := 0 // where counting toward the budget starts in this chunk
	if !st.armed {
		buf := append(st.tail, chunk...)
		off := len(st.tail)
		pos := 0
		if !st.headers {
			i := bytes.Index(buf, []byte("\r\n\r\n"))
			if i < 0 {
				st.tail = tailOf(buf)
				return faultproxy.Decision{Forward: len(chunk)}
			}
			st.headers = true
			pos = i + 4
		}
		j := bytes.Index(buf[pos:], []byte("\n\n"))
		if j < 0 {
			st.tail = tailOf(buf[pos:])
			return faultproxy.Decision{Forward: len(chunk)}
		}
		st.armed = true
		if c.rng.Float64() < c.p {
			st.budget = c.rng.IntN(c.span)
		}
		start = max(0, pos+j+2-off)
	}
	if st.budget < 0 {
		return faultproxy.Decision{Forward: len(chunk)}
	}
	if rest := len(chunk) - start; st.budget < rest {
		c.cuts++
		return faultproxy.Decision{Forward: start + st.budget, Cut: true}
	}
	st.budget -= len(chunk) - start
	return faultproxy.Decision{Forward: len(chunk)}
}

func tailOf(b []byte) []byte {
	if len(b) > 3 {
		b = b[len(b)-3:]
	}
	return append([]byte(nil), b...)
}

func (c *cutter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cuts
}

// startServe runs `tidemark serve` on addr ("127.0.0.1:0" for any port)
// with a 20 ms SSE retry, and returns its process and URL.
func startServe(t *testing.T, addr string, extra ...string) (*testenv.Process, string) {
	t.Helper()
	args := append([]string{"serve", "--addr", addr, "--retry", "20ms", "--log-level", "INFO"}, extra...)
	p := testenv.StartProcess(t, testenv.BuildTidemark(t), args...)
	return p, testenv.ServeURL(t, p)
}

// callOutcome is what one countdown call returned.
type callOutcome struct {
	token string
	text  string
	err   error
	took  time.Duration
}

// runCalls makes total countdown calls (n steps, delayMS apart) over cs
// from workers goroutines and returns their outcomes in call order.
func runCalls(ctx context.Context, cs *mcp.ClientSession, prefix string, total, workers, n, delayMS int) []callOutcome {
	out := make([]callOutcome, total)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				token := fmt.Sprintf("%s-%d", prefix, i)
				start := time.Now()
				text, err := countdown(ctx, cs, token, n, delayMS)
				out[i] = callOutcome{token: token, text: text, err: err, took: time.Since(start)}
			}
		})
	}
	wg.Wait()
	return out
}

// TestThousandCallsThroughCuts: 1000 countdown calls of 20 steps, 8 at a
// time over one client session, through a proxy that cuts half of the
// connections at a random byte of their SSE body. Every call returns its
// result and the SDK sees every progress notification exactly once, in
// order: 20 000 notifications, no duplicate, no gap.
func TestThousandCallsThroughCuts(t *testing.T) {
	const (
		calls   = 1000
		workers = 8
		n       = 20
		delayMS = 5
	)
	_, serveURL := startServe(t, "127.0.0.1:0")
	u, err := url.Parse(serveURL)
	if err != nil {
		t.Fatal(err)
	}
	cut := newCutter(1, 0.5, 5000)
	p := proxyTo(t, u.Host, cut.filter)

	rec := newRecorder()
	cs := connect(t, "http://"+p.Addr()+u.Path, rec, func(tr *client.Transport) {
		tr.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		tr.Logger = slog.New(slog.DiscardHandler)
		tr.ResumeTimeout = 10 * time.Second
	})
	start := time.Now()
	outs := runCalls(t.Context(), cs, "c", calls, workers, n, delayMS)
	elapsed := time.Since(start)

	want := steps(n)
	failed := 0
	for _, o := range outs {
		if o.err != nil || o.text != fmt.Sprintf("countdown of %d finished", n) {
			failed++
			if failed <= 5 {
				t.Errorf("call %s = %q, %v; want its result", o.token, o.text, o.err)
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d calls failed", failed, calls)
	}
	wrong := 0
	for _, o := range outs {
		if got := rec.settled(o.token, n); !slices.Equal(got, want) {
			wrong++
			if wrong <= 5 {
				t.Errorf("progress of %s = %v, want %v", o.token, got, want)
			}
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of %d calls saw wrong progress", wrong, calls)
	}
	resumed := rec.count(client.EventResumed)
	t.Logf("%d calls in %v; proxy cut %d of %d connections; %d resumes; events %v",
		calls, elapsed.Round(time.Millisecond), cut.count(), p.Conns(), resumed, kindCounts(rec))
	if cut.count() < calls/4 {
		t.Errorf("proxy cut %d connections, want at least %d for the test to mean something", cut.count(), calls/4)
	}
	if resumed < cut.count()*9/10 {
		t.Errorf("%d resumes for %d cuts, want about one per cut", resumed, cut.count())
	}
	for _, k := range []client.EventKind{client.EventSessionNotFound, client.EventFenced, client.EventStreamLost, client.EventDuplicate, client.EventReinitialized} {
		if c := rec.count(k); c != 0 {
			t.Errorf("%d %v events, want 0", c, k)
		}
	}
}

// restartBound is the longest a call may take in TestCallsAcrossRestarts:
// ResumeTimeout (2 s) for a POST that cannot connect, again for the
// re-initialization it waits on, and again for a resume that gets no new
// event, plus the call's own 100 ms and a margin for the race detector.
const (
	restartResumeTimeout = 2 * time.Second
	restartBound         = 3*restartResumeTimeout + 2*time.Second
)

// TestCallsAcrossRestarts: countdown calls, 8 at a time through the
// cutting proxy, while the server process is killed with SIGKILL and a new
// one started on the same port, four times. Every call returns its result
// (with every progress exactly once) or fails with ErrSessionLost or
// ErrStreamLost, within restartBound; the progress a failed call saw is
// 1..k, each once. With the memory store, a restarted server answers 404
// for the old session; with --data-dir it keeps the session and answers 409
// generation_mismatch to resumes of the old generation's streams.
func TestCallsAcrossRestarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		lost client.EventKind // how the client learns the session is gone
	}{
		{"memory", func(*testing.T) []string { return nil }, client.EventSessionNotFound},
		{"durable", func(t *testing.T) []string { return []string{"--data-dir", t.TempDir()} }, client.EventFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				workers  = 8
				n        = 20
				delayMS  = 5
				restarts = 4
			)
			args := tc.args(t)
			srv, serveURL := startServe(t, "127.0.0.1:0", args...)
			u, err := url.Parse(serveURL)
			if err != nil {
				t.Fatal(err)
			}
			cut := newCutter(2, 0.3, 5000)
			p := proxyTo(t, u.Host, cut.filter)
			rec := newRecorder()
			cs := connect(t, "http://"+p.Addr()+u.Path, rec, func(tr *client.Transport) {
				tr.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				tr.Logger = slog.New(slog.DiscardHandler)
				tr.ResumeTimeout = restartResumeTimeout
				tr.MaxBackoff = 100 * time.Millisecond
			})

			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			var (
				mu   sync.Mutex
				outs []callOutcome
			)
			var wg sync.WaitGroup
			var seq atomic.Int64
			for range workers {
				wg.Go(func() {
					for ctx.Err() == nil {
						token := fmt.Sprintf("r-%d", seq.Add(1))
						start := time.Now()
						text, err := countdown(context.WithoutCancel(ctx), cs, token, n, delayMS)
						mu.Lock()
						outs = append(outs, callOutcome{token: token, text: text, err: err, took: time.Since(start)})
						mu.Unlock()
						if err != nil {
							// While the server is down, a call fails fast;
							// do not spin.
							time.Sleep(20 * time.Millisecond)
						}
					}
				})
			}
			// Each restart comes once the client has re-initialized after
			// the one before (on a loaded machine a new process may take
			// most of a fixed pause to start), then 1.5 s of calls.
			for i := range restarts {
				waitFor(t, func() bool { return rec.count(client.EventReinitialized) >= i })
				time.Sleep(1500 * time.Millisecond)
				srv.Kill()
				<-srv.Done()
				srv, _ = startServe(t, u.Host, args...)
			}
			waitFor(t, func() bool { return rec.count(client.EventReinitialized) >= restarts })
			time.Sleep(1500 * time.Millisecond)
			stop()
			waitGroup(t, &wg, restartBound+5*time.Second)

			var ok, sessionLost, streamLost int
			var longest time.Duration
			for _, o := range outs {
				longest = max(longest, o.took)
				if o.took > restartBound {
					t.Errorf("call %s took %v, more than the bound %v", o.token, o.took, restartBound)
				}
				switch {
				case o.err == nil:
					ok++
					if o.text != fmt.Sprintf("countdown of %d finished", n) {
						t.Errorf("call %s returned %q", o.token, o.text)
					}
					if got := rec.settled(o.token, n); !slices.Equal(got, steps(n)) {
						t.Errorf("progress of completed call %s = %v, want %v", o.token, got, steps(n))
					}
				case errors.Is(o.err, client.ErrSessionLost):
					sessionLost++
				case errors.Is(o.err, client.ErrStreamLost):
					streamLost++
				default:
					t.Errorf("call %s failed with %v, want ErrSessionLost or ErrStreamLost", o.token, o.err)
				}
				if o.err != nil {
					got := rec.progressOf(o.token)
					if !slices.Equal(got, steps(len(got))) {
						t.Errorf("progress of failed call %s = %v, want 1..k each once", o.token, got)
					}
				}
			}
			t.Logf("%d calls: %d completed, %d ErrSessionLost, %d ErrStreamLost; longest %v (bound %v); proxy cuts %d; events %v",
				len(outs), ok, sessionLost, streamLost, longest.Round(time.Millisecond), restartBound, cut.count(), kindCounts(rec))
			if sessionLost == 0 {
				t.Errorf("no call failed with ErrSessionLost: the restarts did not hit a call in flight")
			}
			if got := rec.count(client.EventReinitialized); got < restarts {
				t.Errorf("%d re-initializations, want at least %d (one per restart)", got, restarts)
			}
			if got := rec.count(tc.lost); got < restarts {
				t.Errorf("%d %v events, want at least %d", got, tc.lost, restarts)
			}
			// The transport works on after the last restart.
			text, err := countdown(t.Context(), cs, "final", n, 0)
			if err != nil || text != fmt.Sprintf("countdown of %d finished", n) {
				t.Errorf("call after the restarts = %q, %v", text, err)
			}
		})
	}
}

func kindCounts(r *recorder) string {
	m := map[client.EventKind]int{}
	for _, k := range r.kinds() {
		m[k]++
	}
	var parts []string
	for k := client.EventResumed; k <= client.EventDuplicate; k++ {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%v=%d", k, m[k]))
		}
	}
	return strings.Join(parts, " ")
}

// waitGroup waits for wg, and fails the test with every goroutine's stack
// when that takes longer than d: a call that never returns is the hang the
// transport exists to prevent.
func waitGroup(t *testing.T, wg *sync.WaitGroup, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("calls still pending %v after the workers were told to stop; goroutines:\n%s", d, buf)
	}
}
