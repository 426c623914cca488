package main

// (d)'s hibernated sessions: the rows whose server hibernates idle
// sessions (serverSpec.hibernates) run a second part of (d), the memory
// of many idle sessions awake (a process with hibernation off) and
// hibernated (a process started with a short --hibernate-after; DESIGN.md,
// "Hibernation"), and the latency of the first request that wakes one.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// hibernateConfig sizes (d)'s hibernated part.
type hibernateConfig struct {
	sessions int // sessions opened, left idle until they hibernate
	// after is the --hibernate-after of the process whose sessions
	// hibernate. The awake figures come from another process, started
	// with hibernation off (--hibernate-after 0), that opens as many
	// sessions: opening 100,000 takes from 1 to 3 minutes on a shared
	// 2-core machine (about 0.5 ms of server CPU per session, initialize
	// and notifications/initialized, and the other processes' load), so
	// measuring both states in one process would need a --hibernate-after
	// past the longest opening and then a wait as long again for the last
	// session opened; two processes cost one opening more and no wait, and
	// the sessions hibernate while others open, as on a server in service.
	after time.Duration
	// hibernateWait bounds the wait, after the last session opened, until
	// all have hibernated (tidemark_sessions_hibernated_total).
	hibernateWait time.Duration
	// settle bounds the wait for a garbage collection and for RSS to stop
	// falling once all hibernated: the runtime forces a collection of an
	// idle process every 2 minutes, and returns freed pages lazily; the
	// wait ends as soon as both happened (runDHibernated).
	settle time.Duration
	wakers int // concurrent wakers
	wakes  int // sessions woken and timed, spread over all; 0: every one
}

func fullHibernate() hibernateConfig {
	return hibernateConfig{sessions: 100000, after: 5 * time.Second, hibernateWait: 3 * time.Minute,
		settle: 150 * time.Second, wakers: 16, wakes: 5000}
}

func quickHibernate() hibernateConfig {
	return hibernateConfig{sessions: 300, after: 2 * time.Second, hibernateWait: 30 * time.Second,
		settle: 5 * time.Second, wakers: 16}
}

// hibernateArgs are the flags (d)'s hibernated part adds to the server's,
// with after its --hibernate-after (0: never, for the awake figures): an
// idle TTL far past the part's length, so no session is evicted instead;
// room for every session live at once; and the metrics that tell when all
// have hibernated and how much heap is in use.
func hibernateArgs(hc hibernateConfig, after time.Duration) []string {
	return []string{"--hibernate-after", after.String(), "--session-idle-ttl", "2h",
		"--max-sessions", strconv.Itoa(2 * hc.sessions), "--metrics-addr", metricsPlaceholder}
}

// fileRoomFor returns an error when the open-file limit, which the
// servers inherit (raiseFileLimit), or the ephemeral ports of one
// loopback address leave no room for n sessions of spec awake at once: a
// gateway's awake session holds a standalone GET stream open to its
// upstream, a file descriptor in each of the two processes and one of the
// gateway's ephemeral ports (gatewayAwakeSessions).
func fileRoomFor(spec serverSpec, n int) error {
	if spec.upstream == nil {
		return nil
	}
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	need := uint64(n + gatewayFileRoom)
	if l.Cur < need {
		return fmt.Errorf("%d sessions awake need %d open files in the gateway and in its upstream, and the limit is %d: raise it (ulimit -n %d)", n, need, l.Cur, need)
	}
	lo, hi, err := ephemeralPorts()
	if err != nil {
		return err
	}
	if ports := uint64(hi - lo + 1); ports < need {
		return fmt.Errorf("%d sessions awake need %d ephemeral ports of the gateway towards its upstream, and net.ipv4.ip_local_port_range (%d %d) has %d: widen it", n, need, lo, hi, ports)
	}
	return nil
}

// hibernatingRoomFor returns an error when the hibernating process of
// (d)'s hibernated part, opening hc.sessions sessions of spec at about
// rate a second (the awake process's rate of opening, measured just
// before), could hold more sessions awake at once than fileRoomFor allows,
// or leave more of the gateway's connections to its upstream in TIME_WAIT
// than it has ephemeral ports.
//
// A session there is awake from its opening until the sweep after
// hc.after (the sweep runs every hc.after/4: tidemark.go,
// defaultSweepInterval), so the peak of awake sessions is about the rate
// times hc.after and a fraction more: 7.2 to 7.7 s of opening at 5 s on a
// loaded machine (bench/NOTES.md, 2026-12-06). The bound takes twice
// hc.after, at 1.5 times the rate (the two processes' rates differ).
//
// The gateway closes first a hibernating session's stream (the generation's
// context ends: engine/upstream, dedicated.go), so its end of the
// connection stays in TIME_WAIT for 60 s, on its ephemeral port. Linux
// lets a new connection take such a port when net.ipv4.tcp_tw_reuse
// allows it (1, or 2 for loopback only, its default) and TCP timestamps
// are on; otherwise the minute's closed connections need ports too.
func hibernatingRoomFor(spec serverSpec, hc hibernateConfig, rate float64) error {
	if spec.upstream == nil {
		return nil
	}
	window := 2 * hc.after.Seconds()
	peak := min(hc.sessions+1, int(math.Ceil(1.5*rate*window)))
	if err := fileRoomFor(spec, peak); err != nil {
		return fmt.Errorf("the hibernating process, opening %d sessions at about %.0f/s with --hibernate-after %s, could hold %d awake at once: %w", hc.sessions, rate, hc.after, peak, err)
	}
	reuse, err := readSysctl("net/ipv4/tcp_tw_reuse")
	if err != nil {
		return err
	}
	stamps, err := readSysctl("net/ipv4/tcp_timestamps")
	if err != nil {
		return err
	}
	if reuse != 0 && stamps != 0 {
		return nil
	}
	lo, hi, err := ephemeralPorts()
	if err != nil {
		return err
	}
	lingering := min(hc.sessions+hc.wakes, int(math.Ceil(1.5*rate*60)))
	if need := peak + gatewayFileRoom + lingering; need > hi-lo+1 {
		return fmt.Errorf("the hibernating process needs %d ephemeral ports of the gateway at once (%d awake sessions, %d connections closed in the last 60 s in TIME_WAIT, %d of room) and net.ipv4.ip_local_port_range (%d %d) has %d: with net.ipv4.tcp_tw_reuse %d and net.ipv4.tcp_timestamps %d no port in TIME_WAIT is taken again; set tcp_tw_reuse to 2 and tcp_timestamps to 1",
			need, peak, lingering, gatewayFileRoom, lo, hi, hi-lo+1, reuse, stamps)
	}
	return nil
}

// ephemeralPorts returns net.ipv4.ip_local_port_range: the first and last
// local port of outgoing connections.
func ephemeralPorts() (lo, hi int, err error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo > hi {
		return 0, 0, fmt.Errorf("net.ipv4.ip_local_port_range: %q: %v", trim(b), err)
	}
	return lo, hi, nil
}

// readSysctl returns the integer value of /proc/sys/name.
func readSysctl(name string) (int, error) {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", strings.ReplaceAll(name, "/", "."), err)
	}
	return v, nil
}

// resultDH is (d)'s hibernated part: its awake figures from one process,
// its hibernated ones from another.
type resultDH struct {
	// sessionsAwake and sessions are the sessions the awake process and
	// the hibernating one opened (serverSpec.awakeSessions); each
	// process's figures per session divide by its own count.
	sessionsAwake, sessions int
	// RSS and heap in use (go_memstats_heap_inuse_bytes) of the process
	// with hibernation off: before opening the sessions and with all open.
	rssBase, rssAwake, heapBase, heapAwake int64
	openedAwake                            time.Duration // time to open every session there
	awakeP50, awakeP99                     time.Duration // round trip of the wakes' calls, sent to awake sessions there
	// The same of the process whose sessions hibernate: before opening,
	// and with every session hibernated once RSS settled.
	rssBaseH, rssHibernated, heapBaseH, heapHibernated int64
	opened                                             time.Duration // time to open every session there, hibernating meanwhile
	hibernated                                         time.Duration // from the last session opened until all hibernated
	settled                                            time.Duration // wait for RSS to settle after that
	settleNote                                         string        // how the wait ended: "settled", "still falling", "no collection" (none ran)
	peakAwake                                          int64         // the most sessions awake at once (tidemark_sessions_live, read each second) while they opened
	wakes, wrong                                       int           // sessions woken and timed; answers not 200 with the countdown's result
	woken, wokenSame                                   int64         // tidemark_session_wakes_total over the wakes: all, and at the same generation
	example                                            string        // the first wrong answer
	p50, p99                                           time.Duration // first request's round trip of a woken session
	took                                               time.Duration // both processes, from start to stop
}

// awakePerSession returns (b − a) / sessionsAwake in bytes, the awake
// process's figure per session, or false without sessions or a reading.
func (x resultDH) awakePerSession(a, b int64) (float64, bool) {
	return perSession(x.sessionsAwake, a, b)
}

// hibernatedPerSession returns (b − a) / sessions in bytes, the
// hibernating process's figure per session, or false without sessions or
// a reading.
func (x resultDH) hibernatedPerSession(a, b int64) (float64, bool) {
	return perSession(x.sessions, a, b)
}

func perSession(n int, a, b int64) (float64, bool) {
	if n == 0 || a <= 0 || b <= 0 {
		return 0, false
	}
	return float64(b-a) / float64(n), true
}

// scrape reads the Prometheus text exposition of http://addr/metrics.
func scrape(ctx context.Context, addr string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping the metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("scraping the metrics: status %d: %s", resp.StatusCode, trim(b))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// sum returns the sum of the counter or gauge series (of a summary: the
// count of observations) of name in families whose label (when not empty) has value, and whether name is
// there.
func sum(families map[string]*dto.MetricFamily, name, label, value string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		if label != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			total += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			total += m.GetUntyped().GetValue()
		case m.GetSummary() != nil:
			total += float64(m.GetSummary().GetSampleCount())
		}
	}
	return total, true
}

// Metrics (d)'s hibernated part reads.
const (
	metricHibernated = "tidemark_sessions_hibernated_total"
	metricWakes      = "tidemark_session_wakes_total"
	metricLive       = "tidemark_sessions_live"
	metricCreated    = "tidemark_sessions_created_total"
	metricHeapInuse  = "go_memstats_heap_inuse_bytes"
	metricGC         = "go_gc_duration_seconds"
	// The runtime's heap not returned to the OS and its goal, which tell
	// whether the scavenger has returned what it will (scavenged).
	metricHeapIdle     = "go_memstats_heap_idle_bytes"
	metricHeapReleased = "go_memstats_heap_released_bytes"
	metricNextGC       = "go_memstats_next_gc_bytes"
)

// reading is the server's memory and session counts at one moment.
type reading struct {
	rss, heap                 int64
	created, hibernated, live int64
	gcs                       int64 // garbage collections ended (go_gc_duration_seconds_count)
	// wakes and wakesSame count the sessions woken, and those of them
	// woken at the same generation; a counter with labels has no series
	// before the first wake.
	wakes, wakesSame int64
	// heapIdle, heapReleased and nextGC are the runtime's
	// (runtime.MemStats HeapIdle, HeapReleased, NextGC); 0 when the
	// server does not expose them.
	heapIdle, heapReleased, nextGC int64
}

// scavenged reports whether the runtime keeps no more heap from the OS
// than its scavenger's goal without a memory limit: the heap in use and
// the idle heap not released at most 110 % of the next collection's goal
// (runtime/mgcscavenge.go, retainExtraPercent), with 1 MiB of slack for
// the pages' rounding. The background scavenger returns freed pages at
// 1 % of a CPU, so on a busy machine RSS can fall by less than 1 MiB in
// 5 s long before it is done. True when the server exposes no goal.
func (r reading) scavenged() bool {
	if r.nextGC == 0 {
		return true
	}
	return r.heap+r.heapIdle-r.heapReleased <= r.nextGC+r.nextGC/10+1<<20
}

func read(ctx context.Context, s *server) (reading, error) {
	var r reading
	ps, err := readProc(s.pid)
	if err != nil {
		return r, err
	}
	r.rss = ps.rss
	fams, err := scrape(ctx, s.metricsAddr)
	if err != nil {
		return r, err
	}
	for _, m := range []struct {
		name string
		to   *int64
	}{{metricHeapInuse, &r.heap}, {metricCreated, &r.created}, {metricHibernated, &r.hibernated}, {metricLive, &r.live}, {metricGC, &r.gcs}} {
		v, ok := sum(fams, m.name, "", "")
		if !ok {
			return r, fmt.Errorf("the server's /metrics has no %s", m.name)
		}
		*m.to = int64(v)
	}
	wakes, _ := sum(fams, metricWakes, "", "")
	same, _ := sum(fams, metricWakes, "generation", "same")
	r.wakes, r.wakesSame = int64(wakes), int64(same)
	idle, _ := sum(fams, metricHeapIdle, "", "")
	released, _ := sum(fams, metricHeapReleased, "", "")
	next, _ := sum(fams, metricNextGC, "", "")
	r.heapIdle, r.heapReleased, r.nextGC = int64(idle), int64(released), int64(next)
	return r, nil
}

// opening is what openIdle measured: the warm-up session, the sessions,
// the server's reading before and 1 s after opening them, how long
// opening took, and the most sessions live (awake) at once meanwhile.
type opening struct {
	warm       *client
	clients    []*client
	base, open reading
	took       time.Duration
	peakLive   int64
}

// openIdle opens cfg.hibernate.sessions sessions after a warm-up one.
func openIdle(ctx context.Context, s *server, cfg config, httpc *http.Client, progress func(string, ...any)) (o opening, err error) {
	hc := cfg.hibernate
	if s.metricsAddr == "" {
		return o, errors.New("the server has no --metrics-addr")
	}
	// Warm up the code paths of a call, so the baseline includes them.
	o.warm = newClient(httpc, s)
	if err := o.warm.initialize(ctx); err != nil {
		return o, err
	}
	if _, err := o.warm.countdown(ctx, 1, 0, true, false); err != nil {
		return o, err
	}
	time.Sleep(500 * time.Millisecond)
	if o.base, err = read(ctx, s); err != nil {
		return o, err
	}
	began := time.Now()
	stopWatch := watchOpening(ctx, s, progress)
	o.clients, err = createClients(ctx, httpc, s, hc.sessions, cfg.parallel)
	o.peakLive = stopWatch()
	if err != nil {
		return o, err
	}
	o.took = time.Since(began)
	httpc.CloseIdleConnections()
	time.Sleep(time.Second)
	if o.open, err = read(ctx, s); err != nil {
		return o, err
	}
	progress("%-14s (d) hibernated: %d sessions opened in %s (%.0f/s), RSS %.0f MiB, heap in use %.0f MiB, %d live (at most %d), %d hibernated%s",
		s.spec.name, hc.sessions, o.took.Round(time.Millisecond), float64(hc.sessions)/o.took.Seconds(), mib(o.open.rss), mib(o.open.heap), o.open.live, o.peakLive, o.open.hibernated, upstreamRSS(s))
	return o, nil
}

// runDAwake opens cfg.hibernate.sessions sessions (r.sessionsAwake) in a
// process with hibernation off and reads its memory with all of them
// awake, into r; then it times the calls the wakes send (firstCalls),
// spread over those awake sessions.
func runDAwake(ctx context.Context, s *server, cfg config, r *resultDH, progress func(string, ...any)) error {
	httpc := &http.Client{Transport: newTransport(cfg.parallel)}
	defer httpc.CloseIdleConnections()
	o, err := openIdle(ctx, s, cfg, httpc, progress)
	if err != nil {
		return err
	}
	clients, open := o.clients, o.open
	if open.hibernated > 0 {
		return fmt.Errorf("%d sessions hibernated with hibernation off", open.hibernated)
	}
	r.rssBase, r.heapBase, r.rssAwake, r.heapAwake, r.openedAwake = o.base.rss, o.base.heap, open.rss, open.heap, o.took
	// The same first calls to sessions that are awake: the reference of
	// the wake latencies on the same machine at the same moment's load.
	callHC := &http.Client{Transport: newTransport(cfg.hibernate.wakers)}
	defer callHC.CloseIdleConnections()
	lat, wrong, example := firstCalls(ctx, clients, cfg.hibernate, callHC)
	if wrong > 0 {
		return fmt.Errorf("%d of %d calls to awake sessions failed: %s", wrong, len(lat), example)
	}
	r.awakeP50, r.awakeP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return nil
}

// runDHibernated opens hc.sessions sessions (r.sessions) in a process with a short
// --hibernate-after, waits until all have hibernated and RSS stops
// falling (within hc.settle) and reads the process's memory, into r; then
// it wakes hc.wakes of them, hc.wakers at a time, each with one
// `countdown {n: 1}`, and times that first round trip.
func runDHibernated(ctx context.Context, s *server, cfg config, r *resultDH, progress func(string, ...any)) error {
	hc := cfg.hibernate
	httpc := &http.Client{Transport: newTransport(cfg.parallel)}
	defer httpc.CloseIdleConnections()
	// The warm-up session hibernates too, and its wake warms up waking.
	o, err := openIdle(ctx, s, cfg, httpc, progress)
	if err != nil {
		return err
	}
	warm, clients := o.warm, o.clients
	r.rssBaseH, r.heapBaseH, r.opened, r.peakAwake = o.base.rss, o.base.heap, o.took, o.peakLive

	// Every session and the warm-up one hibernate.
	want := int64(hc.sessions + 1)
	opened := time.Now()
	deadline := opened.Add(hc.after + hc.hibernateWait)
	var now reading
	for {
		if now, err = read(ctx, s); err != nil {
			return err
		}
		if now.hibernated >= want {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d sessions hibernated within %s of the last one opened (--hibernate-after %s); %d live", now.hibernated, want, time.Since(opened).Round(time.Second), hc.after, now.live)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	r.hibernated = time.Since(opened)
	progress("%-14s (d) hibernated: all %d hibernated %s after the last opened; RSS %.0f MiB, heap in use %.0f MiB, %d live",
		s.spec.name, want, r.hibernated.Round(time.Millisecond), mib(now.rss), mib(now.heap), now.live)

	// RSS settles: read each second until a garbage collection has ended
	// since all hibernated (before it, the heap holds their engine
	// sessions as garbage; an idle process collects only when the runtime
	// forces it, every 2 minutes) and, over the 10 s after it at least,
	// RSS fell by less than 1 MiB in the last 5 s and the heap kept from
	// the OS is down to the scavenger's goal (the runtime returns the
	// freed pages in the background: reading.scavenged), or hc.settle
	// passed.
	settling := time.Now()
	gcs := now.gcs
	collected := -1 // the reading of history that first saw a collection
	history := []int64{now.rss}
	stable := func() bool {
		n := len(history)
		return collected >= 0 && n-1-collected >= 10 && history[n-6]-history[n-1] < 1<<20 && now.scavenged()
	}
	for time.Since(settling) < hc.settle && !stable() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if now, err = read(ctx, s); err != nil {
			return err
		}
		history = append(history, now.rss)
		if collected < 0 && now.gcs > gcs {
			collected = len(history) - 1
		}
	}
	switch {
	case collected < 0:
		r.settleNote = "no collection"
	case stable():
		r.settleNote = "settled"
	default:
		r.settleNote = "still falling"
	}
	r.settled = time.Since(settling)
	r.rssHibernated, r.heapHibernated = now.rss, now.heap
	progress("%-14s (d) hibernated: RSS %.0f MiB, heap in use %.0f MiB, idle heap not released %.0f MiB, next collection's goal %.0f MiB after %s (%s)%s",
		s.spec.name, mib(now.rss), mib(now.heap), mib(now.heapIdle-now.heapReleased), mib(now.nextGC), r.settled.Round(time.Second), r.settleNote, upstreamRSS(s))

	// Wakes: the warm-up session first, untimed, then sessions spread
	// evenly over the ones opened.
	wakeHC := &http.Client{Transport: newTransport(hc.wakers)}
	defer wakeHC.CloseIdleConnections()
	if res, err := warm.over(wakeHC).countdown(ctx, 1, 0, false, false); err != nil || !wokeWell(res) {
		return fmt.Errorf("waking the warm-up session: %v %s", err, answerOf(res))
	}
	before, err := read(ctx, s)
	if err != nil {
		return err
	}
	lat, wrong, example := firstCalls(ctx, clients, hc, wakeHC)
	after, err := read(ctx, s)
	if err != nil {
		return err
	}
	r.wakes, r.wrong, r.example = len(lat), wrong, example
	r.woken, r.wokenSame = after.wakes-before.wakes, after.wakesSame-before.wakesSame
	r.p50, r.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return nil
}

// firstCalls sends one `countdown {n: 1}` to each of hc.wakes sessions
// spread evenly over clients (every one when hc.wakes is 0), hc.wakers at a
// time through httpc, and returns the round trips, sorted, how many
// answers were not 200 with the countdown's result, and the first of
// those.
func firstCalls(ctx context.Context, clients []*client, hc hibernateConfig, httpc *http.Client) (lat []time.Duration, wrong int, example string) {
	n := hc.wakes
	if n <= 0 || n > len(clients) {
		n = len(clients)
	}
	lat = make([]time.Duration, n)
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range hc.wakers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c := clients[i*len(clients)/n].over(httpc)
				t0 := time.Now()
				res, err := c.countdown(ctx, 1, 0, false, false)
				lat[i] = time.Since(t0)
				if err != nil || !wokeWell(res) {
					mu.Lock()
					wrong++
					if example == "" {
						example = fmt.Sprintf("session %d: %v %s", i*len(clients)/n+1, err, answerOf(res))
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(lat)
	return lat, wrong, example
}

// watchOpening reads the server each second while sessions open, and
// writes a progress line every 10 s: how many were created, are live and
// hibernated, the rate of creation over the last 10 s, the server's share
// of one CPU and the machine's busy share over them, RSS and heap in use.
// The returned function stops it and returns the most sessions live at
// once in its readings.
func watchOpening(ctx context.Context, s *server, progress func(string, ...any)) (stop func() (peakLive int64)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var peak int64
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, _ := read(ctx, s)
		lastProc, _ := readProc(s.pid)
		lastBusy, _ := machineCPU()
		lastAt := time.Now()
		peak = last.live
		for tick := 1; ; tick++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now, err := read(ctx, s)
			if err != nil {
				continue
			}
			peak = max(peak, now.live)
			if tick%10 != 0 {
				continue
			}
			proc, _ := readProc(s.pid)
			busy, _ := machineCPU()
			el := time.Since(lastAt)
			progress("%-14s (d) hibernated: opening: %d created (%.0f/s), %d live (at most %d), %d hibernated; server CPU %.0f%% of a core, machine %.0f%% busy; RSS %.0f MiB, heap in use %.0f MiB",
				s.spec.name, now.created, float64(now.created-last.created)/el.Seconds(), now.live, peak, now.hibernated, 100*float64(proc.cpu-lastProc.cpu)/float64(el),
				100*float64(busy-lastBusy)/float64(el*time.Duration(runtime.NumCPU())), mib(now.rss), mib(now.heap))
			last, lastProc, lastBusy, lastAt = now, proc, busy, time.Now()
		}
	}()
	return func() int64 {
		cancel()
		<-done
		return peak
	}
}

// wokeWell reports whether a woken session's first answer is the one a
// session never hibernated gives: 200 and the countdown's result.
func wokeWell(res callResult) bool {
	return res.status == http.StatusOK && !res.toolError && bytes.Contains(res.response, []byte("countdown of 1 finished"))
}

func answerOf(res callResult) string {
	if res.status == 0 {
		return ""
	}
	if res.status != http.StatusOK {
		return fmt.Sprintf("status %d: %s", res.status, trim(res.errBody))
	}
	return "answer " + trim(res.response)
}

// upstreamRSS returns ", upstream RSS N MiB" for a gateway's progress
// lines (its upstream's memory is not the row's figure), or "".
func upstreamRSS(s *server) string {
	if s.upstream == nil {
		return ""
	}
	ps, err := readProc(s.upstream.pid)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(", upstream RSS %.0f MiB", mib(ps.rss))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// hibernationGoal is the goal for one row (reported against, not
// asserted): hibernated RSS per session at most rss bytes, wake p99 at
// most p99.
type hibernationGoal struct {
	rss float64
	p99 time.Duration
}

// hibernationGoals are the goals per row: the memory store keeps the
// session's record in the process, the others outside it. The gateway's
// is the memory store's RSS (an idle upstream session costs the gateway
// no more than its record); no wake latency is set for it, whose wake
// pings the upstream and reopens the standalone stream (p99 0: none).
var hibernationGoals = map[string]hibernationGoal{
	"tidemark": {2 << 10, 5 * time.Millisecond},
	"durable":  {1 << 10, 15 * time.Millisecond},
	"redis":    {1 << 10, 15 * time.Millisecond},
	"gateway":  {2 << 10, 0},
}

// tableDH writes (d)'s hibernated part.
func (r *report) tableDH(b *strings.Builder) {
	rows := r.rowsWith(func(x *row) bool { return x.hasDH || x.spec.hibernates || x.spec.skip["dh"] != "" })
	if len(rows) == 0 {
		return
	}
	hc := r.cfg.hibernate
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("### Hibernated sessions\n\n")
	p("The rows whose server hibernates idle sessions. Each opens %d sessions (initialize + notifications/initialized, %d at a time, after a warm-up session and a 0.5 s pause: the baseline) in each of two new processes: awake, started with `%s`, hibernation off, opening the fewer of its column `sessions` (awake / hibernated) where this paragraph's end says why; hibernated, started with `%s`, its sessions hibernating while later ones open (in each process, `--max-sessions` is twice its own sessions). ",
		hc.sessions, r.cfg.parallel, strings.Join(hibernateArgs(hc, 0), " "), strings.Join(hibernateArgs(hc, hc.after), " "))
	p("Each figure per session divides by its own process's sessions. Awake = (VmRSS 1 s after the last session opened − baseline) / sessions. Hibernated: once `%s` counts every session (the warm-up one too), VmRSS is read each second until a garbage collection has ended and, 10 s after it at least, VmRSS fell by less than 1 MiB over 5 s and the heap the runtime keeps from the OS (`%s` + `%s` − `%s`) is at most 110 %% of `%s` (its scavenger's goal), at most %s; hibernated = (that VmRSS − baseline) / sessions, what an operator sees (the Go runtime returns freed pages to the OS lazily). VmRSS and heap are the server process's alone: a gateway's, not its upstream's. ", metricHibernated, metricHeapInuse, metricHeapIdle, metricHeapReleased, metricNextGC, hc.settle)
	p("Heap = the same differences of `%s` (live and not yet collected objects). ", metricHeapInuse)
	wakes := "every session"
	if hc.wakes > 0 {
		wakes = fmt.Sprintf("%d sessions spread evenly over the hibernating process's", hc.wakes)
	}
	p("Wake: %s, %d at a time on %d connections, each sends `countdown {n: 1}`; latency is that first round trip, which wakes the session; awake = as many calls to sessions of the awake process, spread evenly over its own, timed the same way (the reference on the same machine: the latency a wake adds is the difference); wrong = not 200 with the countdown's result; woken = the server's `%s` over the wakes (at the same generation / all). Time = both processes, from start to stop.", wakes, hc.wakers, hc.wakers, metricWakes)
	for _, x := range rows {
		if n := x.spec.awakeSessions(hc); n < hc.sessions && x.spec.awakeWhy != "" {
			p(" `%s`'s awake process opens %d sessions: %s.", x.spec.name, n, x.spec.awakeWhy)
		}
	}
	p("\n\n")
	p("| server | sessions (awake / hibernated) | awake RSS per session | hibernated RSS per session | heap per session awake / hibernated | RSS awake / hibernated | opened in (awake / hibernating) | all hibernated after | RSS settled | wake p50 | wake p99 | awake p50 / p99 | wrong | woken | time | goal: hibernated RSS | goal: wake p99 |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
	for _, x := range rows {
		d := x.dh
		if why := x.spec.skip["dh"]; why != "" {
			p("| %s | N/A | – | – | – | – | – | – | – | – | – | – | – | – | – | – | %s |\n", x.spec.name, mdEscape(why))
			continue
		}
		if !x.hasDH {
			p("| %s | %s | – | – | – | – | – | – | – | – | – | – | – | – | – | – | %s |\n", x.spec.name, sessionCounts(x.spec.awakeSessions(hc), hc.sessions), rowFailure(x))
			continue
		}
		awake, aok := d.awakePerSession(d.rssBase, d.rssAwake)
		hib, hok := d.hibernatedPerSession(d.rssBaseH, d.rssHibernated)
		heapA, _ := d.awakePerSession(d.heapBase, d.heapAwake)
		heapH, _ := d.hibernatedPerSession(d.heapBaseH, d.heapHibernated)
		full := goalCount(d)
		goalRSS, goalP99 := "–", "–"
		if g, ok := hibernationGoals[x.spec.name]; ok {
			goalRSS = fmt.Sprintf("≤ %.0f KiB: %s", g.rss/1024, verdictOf(hok && hib <= g.rss, hok && full))
			if g.p99 > 0 {
				goalP99 = fmt.Sprintf("≤ %s: %s", ms(g.p99), verdictOf(d.wakes > 0 && d.wrong == 0 && d.p99 <= g.p99, d.wakes > 0 && full))
			}
		}
		wrong := fmt.Sprintf("%d of %d", d.wrong, d.wakes)
		if d.example != "" {
			wrong += " (" + mdEscape(trimString(d.example)) + ")"
		}
		p("| %s | %s | %s | %s | %.2f / %.2f KiB | %.0f / %.0f MiB | %.1f / %.1f s | %.1f s | %s after %.0f s | %s | %s | %s / %s | %s | %d / %d | %.0f s | %s | %s |\n", x.spec.name, sessionCounts(d.sessionsAwake, d.sessions),
			kib(awake, aok), kib(hib, hok), heapA/1024, heapH/1024, mib(d.rssAwake), mib(d.rssHibernated),
			d.openedAwake.Seconds(), d.opened.Seconds(), d.hibernated.Seconds(), d.settleNote, d.settled.Seconds(), ms(d.p50), ms(d.p99), ms(d.awakeP50), ms(d.awakeP99), wrong, d.wokenSame, d.woken, d.took.Seconds(), goalRSS, goalP99)
	}
	p("\n")
}

// sessionCounts is the column `sessions` of the hibernated sessions'
// table: both processes' counts, "awake / hibernating", or one when they
// are the same.
func sessionCounts(awake, hibernating int) string {
	if awake == hibernating {
		return strconv.Itoa(awake)
	}
	return fmt.Sprintf("%d / %d", awake, hibernating)
}

// goalCount reports whether d's hibernating process opened the count the
// goals are set for (fullHibernate's): smaller runs are not measured
// against them.
func goalCount(d resultDH) bool {
	return d.sessions >= fullHibernate().sessions
}

func kib(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f KiB", v/1024)
}

// verdictOf is the Goals table's verdict of a figure.
func verdictOf(ok, known bool) string {
	switch {
	case !known:
		return "not measured"
	case ok:
		return "met"
	default:
		return "**not met**"
	}
}
