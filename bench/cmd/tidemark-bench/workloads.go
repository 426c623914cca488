package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// config sizes the workloads; quick and full runs differ only here.
type config struct {
	quick bool

	aConc []int         // (a) concurrent sessions
	aWarm time.Duration // (a) warm-up per level
	aDur  time.Duration // (a) measured time per level

	b1N      int // (b) progress events on one stream
	b1Runs   int // (b) repetitions of the one-stream burst
	bStreams int // (b) concurrent streams of the aggregate run
	bN       int // (b) progress events per stream of the aggregate run

	cN    int // (c) events replayed
	cRuns int // (c) repetitions of the replay

	dSessions  int // (d) idle sessions
	dStreamCap int // (d) most SSE streams attempted

	hibernate hibernateConfig // (d) hibernated sessions

	eSessions int // (e) sessions resuming at once

	tConc int           // (t) concurrent clients
	tWarm time.Duration // (t) warm-up
	tDur  time.Duration // (t) measured time per window

	parallel int // concurrent requests while preparing sessions

	retention retentionConfig // (f) and (g)

	// idle ends a resumed stream that sent nothing for this long: the
	// replay is over (servers may keep a resumed stream open).
	idle time.Duration
}

func fullConfig() config {
	return config{
		aConc: []int{1, 16, 256}, aWarm: 500 * time.Millisecond, aDur: 10 * time.Second,
		b1N: 20000, b1Runs: 5, bStreams: 256, bN: 2000,
		cN: 10000, cRuns: 5,
		dSessions: 10000, dStreamCap: 10000, hibernate: fullHibernate(),
		eSessions: 5000,
		tConc:     16, tWarm: 500 * time.Millisecond, tDur: 10 * time.Second,
		parallel: 32, idle: 3 * time.Second,
		retention: fullRetention(),
	}
}

func quickConfig() config {
	return config{
		quick: true,
		aConc: []int{1, 16, 256}, aWarm: 150 * time.Millisecond, aDur: 700 * time.Millisecond,
		b1N: 2000, b1Runs: 1, bStreams: 256, bN: 50,
		cN: 2000, cRuns: 1,
		dSessions: 300, dStreamCap: 300, hibernate: quickHibernate(),
		eSessions: 200,
		tConc:     16, tWarm: 150 * time.Millisecond, tDur: 700 * time.Millisecond,
		parallel: 32, idle: time.Second,
		retention: quickRetention(),
	}
}

// resultA is workload (a) at one concurrency.
type resultA struct {
	conc          int
	calls         int
	errors        int
	firstErr      string
	elapsed       time.Duration
	rate          float64 // calls per second
	p50, p99      time.Duration
	cpuPerCall    time.Duration // server user+sys per call
	helperPerCall time.Duration // the row's helper processes' user+sys per call (window.close)
	writesPerCall float64       // server write syscalls per call
	foreign       float64       // share of the machine other processes used meanwhile
}

// resultB is workload (b): one stream or many.
type resultB struct {
	streams, expected, received int
	lost                        int
	elapsed                     time.Duration
	rate                        float64 // progress events per second
	cpuPerEvent                 time.Duration
	helperPerEvent              time.Duration // the row's helper processes' user+sys per event
	writesPerEvent              float64
	failedCalls                 int
	note                        string
	foreign                     float64 // share of the machine other processes used meanwhile
}

// resultC is workload (c).
type resultC struct {
	events  int
	median  time.Duration
	runs    int
	wrong   int
	na      string
	note    string
	example string
}

// resultD is workload (d).
type resultD struct {
	sessions        int
	perSession      float64 // bytes of RSS per idle session
	streamsTried    int
	streams         int // streams open at once without error
	streamErr       string
	perStream       float64 // bytes of RSS per open stream
	na              string
	rssBase, rssAll int64
}

// resultE is workload (e).
type resultE struct {
	sessions   int
	all        time.Duration // until the last answer
	p50, p99   time.Duration
	wrong      int // answered, but not the exact expected replay
	unanswered int // connection errors or timeouts
	na         string
	example    string
}

// createClients initializes n sessions, par at a time.
func createClients(ctx context.Context, hc *http.Client, s *server, n, par int) ([]*client, error) {
	out := make([]*client, n)
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range min(par, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c := newClient(hc, s)
				if err := c.initialize(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("session %d of %d: %w", i+1, n, err)
					}
					mu.Unlock()
					next.Store(int64(n))
					return
				}
				out[i] = c
			}
		}()
	}
	wg.Wait()
	return out, firstErr
}

// runA measures tools/call round trips: countdown{n:1} without a progress
// token, so each call is one request and one response.
func runA(ctx context.Context, s *server, cfg config, report func(resultA)) ([]resultA, error) {
	hc := &http.Client{Transport: newTransport(slices.Max(cfg.aConc))}
	defer hc.CloseIdleConnections()
	var out []resultA
	for _, conc := range cfg.aConc {
		clients, err := createClients(ctx, hc, s, conc, cfg.parallel)
		if err != nil {
			return out, err
		}
		callLoop(ctx, clients, cfg.aWarm)
		w := openWindow(s.pid, s.helperPids()...)
		r := callLoop(ctx, clients, cfg.aDur)
		d, helpers, foreign := w.close()
		r.conc, r.foreign = conc, foreign
		if r.calls > 0 {
			r.cpuPerCall = d.cpu / time.Duration(r.calls)
			r.helperPerCall = helpers / time.Duration(r.calls)
			r.writesPerCall = float64(d.writes) / float64(r.calls)
		}
		report(r)
		out = append(out, r)
	}
	return out, nil
}

// callLoop runs calls on every client until d has passed.
func callLoop(ctx context.Context, clients []*client, d time.Duration) resultA {
	lats := make([][]time.Duration, len(clients))
	errs := make([]int, len(clients))
	var firstErr atomic.Value
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				res, err := c.countdown(ctx, 1, 0, false, false)
				switch {
				case err != nil:
					errs[i]++
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(10 * time.Millisecond)
				case res.status != http.StatusOK || res.response == nil || res.toolError:
					errs[i]++
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d response %s %s", res.status, trim(res.response), trim(res.errBody)))
				default:
					l = append(l, res.elapsed)
				}
			}
			lats[i] = l
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	r := resultA{elapsed: elapsed}
	for i := range lats {
		all = append(all, lats[i]...)
		r.errors += errs[i]
	}
	if fe, ok := firstErr.Load().(string); ok {
		r.firstErr = fe
	}
	r.calls = len(all)
	r.rate = float64(r.calls) / elapsed.Seconds()
	slices.Sort(all)
	r.p50, r.p99 = percentile(all, 0.50), percentile(all, 0.99)
	return r
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * q)
	return sorted[i]
}

// runB1 measures progress events per second on one stream: countdown{n}
// with a progress token, every event checked in order.
func runB1(ctx context.Context, s *server, cfg config) (resultB, error) {
	hc := &http.Client{Transport: newTransport(4)}
	defer hc.CloseIdleConnections()
	c := newClient(hc, s)
	if err := c.initialize(ctx); err != nil {
		return resultB{}, err
	}
	var runs []resultB
	var cpu time.Duration
	var writes int64
	events := 0
	w := openWindow(s.pid, s.helperPids()...)
	for range cfg.b1Runs {
		before, _ := readProc(s.pid)
		res, err := c.countdown(ctx, cfg.b1N, 0, true, false)
		after, _ := readProc(s.pid)
		if err != nil {
			return resultB{}, err
		}
		cpu += after.cpu - before.cpu
		writes += after.writes - before.writes
		events += res.progress
		r := resultB{streams: 1, expected: cfg.b1N, received: res.progress, elapsed: res.elapsed}
		r.lost = cfg.b1N - res.progress
		r.rate = float64(res.progress) / res.elapsed.Seconds()
		if res.response == nil || res.toolError || res.status != http.StatusOK {
			r.failedCalls = 1
			r.note = callNote(res)
		}
		if res.disorder > 0 {
			r.note += fmt.Sprintf(" %d events out of order.", res.disorder)
		}
		runs = append(runs, r)
	}
	_, helpers, foreign := w.close()
	// The median run by rate; loss is the worst seen; CPU and system calls
	// per event over all runs (CPU time is counted in 10 ms ticks).
	slices.SortFunc(runs, func(a, b resultB) int { return cmp.Compare(a.rate, b.rate) })
	m := runs[len(runs)/2]
	for _, r := range runs {
		if r.lost > m.lost {
			m.lost, m.note, m.failedCalls = r.lost, r.note, r.failedCalls
		}
	}
	if events > 0 {
		m.cpuPerEvent = cpu / time.Duration(events)
		m.helperPerEvent = helpers / time.Duration(events)
		m.writesPerEvent = float64(writes) / float64(events)
	}
	m.foreign = foreign
	return m, nil
}

func callNote(res callResult) string {
	switch {
	case res.status != http.StatusOK:
		return fmt.Sprintf("status %d: %s", res.status, trim(res.errBody))
	case res.response == nil:
		return "the stream ended without a response"
	default:
		return "call failed: " + trim(res.response)
	}
}

// runBMany measures aggregate progress events per second over many streams
// at once, one per session.
func runBMany(ctx context.Context, s *server, cfg config) (resultB, error) {
	hc := &http.Client{Transport: newTransport(cfg.bStreams)}
	defer hc.CloseIdleConnections()
	clients, err := createClients(ctx, hc, s, cfg.bStreams, cfg.parallel)
	if err != nil {
		return resultB{}, err
	}
	results := make([]callResult, len(clients))
	errs := make([]error, len(clients))
	startGate := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			results[i], errs[i] = c.countdown(ctx, cfg.bN, 0, true, false)
		}()
	}
	w := openWindow(s.pid, s.helperPids()...)
	start := time.Now()
	close(startGate)
	wg.Wait()
	elapsed := time.Since(start)
	d, helpers, foreign := w.close()
	r := resultB{streams: len(clients), expected: cfg.bN * len(clients), elapsed: elapsed, foreign: foreign}
	disorder := 0
	for i, res := range results {
		if errs[i] != nil {
			r.failedCalls++
			if r.note == "" {
				r.note = errs[i].Error()
			}
			continue
		}
		r.received += res.progress
		disorder += res.disorder
		if res.response == nil || res.toolError || res.status != http.StatusOK {
			r.failedCalls++
			if r.note == "" {
				r.note = callNote(res)
			}
		}
	}
	if disorder > 0 {
		r.note += fmt.Sprintf(" %d events out of order.", disorder)
	}
	r.lost = r.expected - r.received
	r.rate = float64(r.received) / elapsed.Seconds()
	if r.received > 0 {
		r.cpuPerEvent = d.cpu / time.Duration(r.received)
		r.helperPerEvent = helpers / time.Duration(r.received)
		r.writesPerEvent = float64(d.writes) / float64(r.received)
	}
	return r, nil
}

// runC measures the time to replay cfg.cN events after Last-Event-ID: a
// countdown of cfg.cN steps is read whole, then resumed from the cursor of
// its first progress notification, so cfg.cN-1 notifications and the
// response follow it.
func runC(ctx context.Context, s *server, cfg config) (resultC, error) {
	r := resultC{events: cfg.cN}
	if s.spec.replayNote != "" {
		r.na = s.spec.replayNote
		return r, nil
	}
	hc := &http.Client{Transport: newTransport(4)}
	defer hc.CloseIdleConnections()
	c := newClient(hc, s)
	if err := c.initialize(ctx); err != nil {
		return r, err
	}
	res, err := c.countdown(ctx, cfg.cN, 0, true, true)
	if err != nil {
		return r, err
	}
	if res.progress != cfg.cN && !cfg.quick {
		// A server that drops a burst gets a paced countdown (1 ms
		// between steps) so there is a whole stream to replay.
		r.note = fmt.Sprintf("the %d-event burst lost %d events (%s); produced paced instead (delay_ms 1)", cfg.cN, cfg.cN-res.progress, callNote(res))
		res, err = c.countdown(ctx, cfg.cN, 1, true, true)
		if err != nil {
			return r, err
		}
	}
	if res.progress != cfg.cN || res.response == nil {
		r.na = fmt.Sprintf("could not produce a %d-event stream to replay: %d progress events arrived (%s)", cfg.cN, res.progress, callNote(res))
		return r, nil
	}
	at := slices.IndexFunc(res.events, func(e event) bool { return e.id == res.firstID })
	if res.firstID == "" || at < 0 {
		r.na = "the stream's events carry no ids (no resumption)"
		return r, nil
	}
	want := res.events[at+1:]
	var times []time.Duration
	for range cfg.cRuns {
		var rr resumeResult
		var start time.Time
		for attempt := 0; ; attempt++ {
			start = time.Now()
			rr, err = c.resume(ctx, res.firstID, len(want), cfg.idle, true)
			if err != nil {
				r.na = "resume failed: " + err.Error()
				return r, nil
			}
			// A server may still hold the previous replay's request for a
			// moment after the client left, and refuse a second reader.
			if rr.status != http.StatusConflict || attempt == 20 {
				break
			}
			if !strings.Contains(r.note, "409") {
				r.note = strings.TrimSpace(r.note + fmt.Sprintf(" a resume right after the previous one got 409 (%s); retried after 100 ms.", trim(rr.body)))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if rr.status != http.StatusOK {
			r.na = fmt.Sprintf("GET with Last-Event-ID answered %d: %s", rr.status, trim(rr.body))
			return r, nil
		}
		r.runs++
		bad := compareResume(want, rr, cfg.idle)
		if bad == "" && rr.extra > 0 {
			bad = fmt.Sprintf("%d events after the expected ones", rr.extra)
		}
		if bad != "" {
			r.wrong++
			if r.example == "" {
				r.example = bad
			}
		}
		times = append(times, rr.last.Sub(start))
	}
	slices.Sort(times)
	r.median = times[len(times)/2]
	return r, nil
}

// compareResume describes how a resumption differs from want ("" when it
// is exact).
func compareResume(want []event, rr resumeResult, idle time.Duration) string {
	bad := compareEvents(want, rr.events)
	if bad != "" && len(rr.events) < len(want) {
		if rr.idle {
			bad += fmt.Sprintf(", then nothing for %s", idle)
		} else {
			bad += ", then the stream ended"
		}
	}
	return bad
}

// compareEvents returns "" when got is exactly want (ids and data, in
// order), else a description of the first difference.
func compareEvents(want, got []event) string {
	for i := range want {
		if i >= len(got) {
			return fmt.Sprintf("%d of %d events replayed", len(got), len(want))
		}
		if got[i].id != want[i].id || !bytes.Equal(got[i].data, want[i].data) {
			return fmt.Sprintf("event %d: got id %q data %s, want id %q data %s", i+1, got[i].id, trim(got[i].data), want[i].id, trim(want[i].data))
		}
	}
	return ""
}

// runD measures RSS per idle session, then how many standalone SSE streams
// can be open at once.
func runD(ctx context.Context, s *server, cfg config) (resultD, error) {
	r := resultD{sessions: cfg.dSessions}
	hc := &http.Client{Transport: newTransport(cfg.parallel)}
	defer hc.CloseIdleConnections()
	// Warm up code paths, so the baseline includes them.
	warm := newClient(hc, s)
	if err := warm.initialize(ctx); err != nil {
		return r, err
	}
	if _, err := warm.countdown(ctx, 1, 0, true, false); err != nil {
		return r, err
	}
	time.Sleep(500 * time.Millisecond)
	before, _ := readProc(s.pid)
	clients, err := createClients(ctx, hc, s, cfg.dSessions, cfg.parallel)
	if err != nil {
		return r, err
	}
	hc.CloseIdleConnections()
	time.Sleep(time.Second)
	after, _ := readProc(s.pid)
	r.perSession = float64(after.rss-before.rss) / float64(cfg.dSessions)
	r.rssBase = before.rss

	// Streams: one standalone GET per session, par at a time, until the
	// first error or the cap.
	n := min(cfg.dStreamCap, len(clients))
	r.streamsTried = n
	streamHC := &http.Client{Transport: newTransport(0)}
	var mu sync.Mutex
	var open []*http.Response
	var stop atomic.Bool
	var next atomic.Int64
	var wg sync.WaitGroup
	for range cfg.parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				sc := clients[i].over(streamHC)
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := sc.openStream(sctx)
				cancel()
				mu.Lock()
				if err != nil {
					if r.streamErr == "" {
						r.streamErr = fmt.Sprintf("stream %d: %v", i+1, err)
					}
					stop.Store(true)
				} else {
					open = append(open, resp)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.streams = len(open)
	time.Sleep(500 * time.Millisecond)
	withStreams, _ := readProc(s.pid)
	r.rssAll = withStreams.rss
	if r.streams > 0 {
		r.perStream = float64(withStreams.rss-after.rss) / float64(r.streams)
	}
	for _, resp := range open {
		resp.Body.Close()
	}
	streamHC.CloseIdleConnections()
	return r, nil
}

// runE is the reconnect storm: every session holds a finished countdown
// stream and a cursor in it; all resume at once on new connections.
func runE(ctx context.Context, s *server, cfg config) (resultE, error) {
	r := resultE{sessions: cfg.eSessions}
	if s.spec.replayNote != "" {
		r.na = s.spec.replayNote
		return r, nil
	}
	hc := &http.Client{Transport: newTransport(cfg.parallel)}
	defer hc.CloseIdleConnections()
	clients, err := createClients(ctx, hc, s, cfg.eSessions, cfg.parallel)
	if err != nil {
		return r, err
	}
	type prepared struct {
		c      *client
		cursor string
		want   []event
	}
	preps := make([]prepared, len(clients))
	var next atomic.Int64
	var prepErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range cfg.parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(clients) {
					return
				}
				c := clients[i]
				res, err := c.countdown(ctx, 3, 0, true, true)
				if err == nil && (res.progress != 3 || res.response == nil) {
					err = fmt.Errorf("countdown{n:3}: %d progress events, %s", res.progress, callNote(res))
				}
				if err != nil {
					mu.Lock()
					prepErr = err
					mu.Unlock()
					next.Store(int64(len(clients)))
					return
				}
				at := slices.IndexFunc(res.events, func(e event) bool { return e.id == res.firstID })
				if res.firstID == "" || at < 0 {
					mu.Lock()
					prepErr = fmt.Errorf("the stream's events carry no ids")
					mu.Unlock()
					next.Store(int64(len(clients)))
					return
				}
				preps[i] = prepared{c: c, cursor: res.firstID, want: res.events[at+1:]}
			}
		}()
	}
	wg.Wait()
	if prepErr != nil {
		r.na = "preparing the storm: " + prepErr.Error()
		return r, nil
	}
	hc.CloseIdleConnections()

	// The storm: new connections, all released at once.
	stormHC := &http.Client{Transport: newTransport(0)}
	defer stormHC.CloseIdleConnections()
	times := make([]time.Duration, len(preps))
	wrong := make([]string, len(preps))
	failed := make([]string, len(preps))
	gate := make(chan struct{})
	var start time.Time
	for i := range preps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &preps[i]
			c := p.c.over(stormHC)
			<-gate
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			rr, err := c.resume(sctx, p.cursor, len(p.want), cfg.idle, false)
			times[i] = rr.last.Sub(start)
			switch {
			case err != nil:
				failed[i] = err.Error()
			case rr.status != http.StatusOK:
				wrong[i] = fmt.Sprintf("status %d: %s", rr.status, trim(rr.body))
			default:
				wrong[i] = compareResume(p.want, rr, cfg.idle)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // let every goroutine reach the gate
	start = time.Now()
	close(gate)
	wg.Wait()
	var answered []time.Duration
	for i := range preps {
		switch {
		case failed[i] != "":
			r.unanswered++
			if r.example == "" {
				r.example = "unanswered: " + failed[i]
			}
		case wrong[i] != "":
			r.wrong++
			answered = append(answered, times[i])
			if r.example == "" {
				r.example = "wrong: " + wrong[i]
			}
		default:
			answered = append(answered, times[i])
		}
	}
	slices.Sort(answered)
	if len(answered) > 0 {
		r.all = answered[len(answered)-1]
	}
	r.p50, r.p99 = percentile(answered, 0.5), percentile(answered, 0.99)
	return r, nil
}
