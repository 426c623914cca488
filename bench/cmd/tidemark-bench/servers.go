package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Roles of the servers in the ratios.
const (
	roleTidemark = "tidemark" // a Tidemark row: ratios to the peers are computed for it
	roleVariant  = "variant"  // `tidemark serve` with other flags: compared with its reference row (serverSpec.versus)
	rolePeer     = "peer"     // a server users would pick instead
	roleCeiling  = "ceiling"  // the bare net/http upper bound
)

// serverSpec describes one server of the comparison.
type serverSpec struct {
	name  string // short name used in flags, progress lines and tables
	label string // what it is, for BENCHMARKS.md
	role  string
	// argv returns the command line that serves on 127.0.0.1:port at
	// path /mcp, with pprofAddr (when non-empty) for net/http/pprof.
	argv func(port int) []string
	// replayNote, when set, is why the server cannot replay; workloads (c)
	// and (e) report N/A with it.
	replayNote string
	// upstream, when set, is a server started first, on its own port, for
	// this one to front: upstreamPlaceholder in argv becomes its URL.
	upstream *serverSpec
	// redis, when set, names the Redis deployment (redisOne, redisSentinel,
	// redisCluster) of fleet whose URL replaces redisPlaceholder(redis) in
	// argv; the deployment is emptied before each process starts.
	redis string
	fleet *redisDeployments
	// versus names the row this one is divided by in the section of
	// Tidemark's configurations, and what the quotient means there (e.g.
	// "Sentinel ÷ one Redis"); empty: none.
	versus, versusMeans string
	// skip holds, per workload ("d", "e"; "dh": (d)'s hibernated part),
	// why this server does not run it: the tables show N/A with the
	// reason.
	skip map[string]string
	// subprocesses is set when the server starts processes of its own that
	// serve its requests (the stdio gateway): their CPU time is its
	// helpers'.
	subprocesses bool
	// tasks is set for the `tidemark serve` rows of the stores that keep
	// tasks (memory, --data-dir, one Redis): they run workload (t).
	tasks bool
	// hibernates is set for the rows whose server hibernates idle
	// sessions (--hibernate-after): they run (d)'s hibernated part.
	hibernates bool
	// awakeCap, when not 0, bounds the sessions the awake process of (d)'s
	// hibernated part opens for this row (awakeSessions), and awakeWhy
	// says why, for the report; its hibernating process opens the full
	// count.
	awakeCap int
	awakeWhy string
	// issuer, when set, is the loopback authorization server whose URL
	// replaces issuerPlaceholder in argv; the load generator sends its
	// token on every request to this server.
	issuer *authIssuer
}

// awakeSessions returns how many sessions the awake process of (d)'s
// hibernated part opens for s when hc sizes it: hc.sessions, or
// s.awakeCap when fewer. The hibernating process opens hc.sessions.
func (s serverSpec) awakeSessions(hc hibernateConfig) int {
	if s.awakeCap > 0 && s.awakeCap < hc.sessions {
		return s.awakeCap
	}
	return hc.sessions
}

// hasHelpers reports whether processes besides the server's serve its
// row: a Redis deployment, an upstream, subprocesses.
func (s serverSpec) hasHelpers() bool {
	return s.redis != "" || s.upstream != nil || s.subprocesses
}

// toolchain is where the binaries and runtimes come from.
type toolchain struct {
	repo        string // the tidemark repository root
	bin         string // directory holding tidemark and benchpeer
	baselineBin string // directory holding the baseline's tidemark and benchpeer ("" when no --baseline)
	node        string // node executable ("" when not found)
	nodeModules string // node_modules with @modelcontextprotocol/sdk ("" when not found)
	tsScript    string // bench/peers/ts/server.mjs
}

// specs returns the servers of the comparison, in table order: Tidemark
// with the memory store and the SDK-free engine; with --baseline, those
// built from the baseline commit; `tidemark serve` on each other store
// (durable, and the Redis deployments of fleet) and with metrics on; the
// rows of --tidemark-variant; the two gateways; the peers and the ceiling.
// Each `tidemark serve` row but the memory store's is a variant, divided by
// its reference row in the report, and has its baseline row too.
func specs(tc toolchain, variants []variant, fleet *redisDeployments, issuer *authIssuer) []serverSpec {
	tidemarkServeFrom := func(bin string, extra ...string) func(int) []string {
		return func(port int) []string {
			args := []string{filepath.Join(bin, "tidemark"), "serve",
				"--addr", "127.0.0.1:" + strconv.Itoa(port),
				// (c) replays 10,000 events of one stream that also holds a
				// priming event and a response: the default of 10,000
				// events per session would compact the oldest.
				"--retention-events", "100000",
				// (d) holds 10,000 sessions besides the warm-up session.
				"--max-sessions", "20000",
				// Peers log nothing per request; Tidemark logs session
				// creation and resumption at INFO.
				"--log-level", "WARN",
			}
			return append(args, extra...)
		}
	}
	tidemarkServe := func(extra ...string) func(int) []string { return tidemarkServeFrom(tc.bin, extra...) }
	peerFrom := func(bin, kind string) func(int) []string {
		return func(port int) []string {
			return []string{filepath.Join(bin, "benchpeer"), "--kind", kind, "--addr", "127.0.0.1:" + strconv.Itoa(port)}
		}
	}
	peer := func(kind string) func(int) []string { return peerFrom(tc.bin, kind) }
	out := []serverSpec{
		{name: "tidemark", role: roleTidemark, argv: tidemarkServe(), tasks: true, hibernates: true,
			label: "Tidemark: `tidemark serve` (go-sdk mcp.Server engine, memory store)"},
		{name: "tidemark-min", role: roleTidemark, argv: peer("tidemark-min"),
			label: "Tidemark transport + memory store + minimal SDK-free engine (bench/peers/minengine)"},
	}
	if tc.baselineBin != "" {
		out = append(out,
			serverSpec{name: "tidemark" + baselineSuffix, role: roleBaseline, argv: tidemarkServeFrom(tc.baselineBin),
				label: "`tidemark` built from the baseline commit (--baseline)"},
			serverSpec{name: "tidemark-min" + baselineSuffix, role: roleBaseline, argv: peerFrom(tc.baselineBin, "tidemark-min"),
				label: "`tidemark-min` built from the baseline commit (--baseline)"})
	}
	type builtin struct {
		variant
		redis, versus, means, what string
		tasks                      bool // runs workload (t)
		hibernates                 bool // runs (d)'s hibernated part
	}
	rows := []builtin{
		{variant{"durable", []string{"--data-dir", tmpdirPlaceholder}}, "", "tidemark", "durable ÷ memory",
			"the durable store (Pebble), a new empty directory per process", true, true},
		{variant{"redis", []string{"--redis", redisPlaceholder(redisOne)}}, redisOne, "tidemark", "Redis ÷ memory",
			"one Redis", true, true},
		{variant{"sentinel", []string{"--redis", redisPlaceholder(redisSentinel)}}, redisSentinel, "redis", "Sentinel ÷ one Redis",
			"Redis Sentinel: a primary, one replica, three sentinels; every write waits for the replica (`--redis-replicas` 0)", false, false},
		{variant{"cluster", []string{"--redis", redisPlaceholder(redisCluster)}}, redisCluster, "redis", "Cluster ÷ one Redis",
			"Redis Cluster: three primaries, one replica each; every write waits for its primary's replica (`--redis-replicas` 0)", false, false},
		{variant{"metrics", []string{"--metrics-addr", metricsPlaceholder}}, "", "tidemark", "metrics on ÷ off",
			"memory store with Prometheus metrics on (`--metrics-addr`, scraped once after each workload)", false, false},
		{variant{"auth", []string{"--auth-issuer", issuerPlaceholder, "--auth-audience", benchAudience, "--auth-tool-scope", "countdown=" + benchScope}}, "", "tidemark", "auth on ÷ off",
			"memory store as an OAuth 2.1 resource server: every request carries an ES256 JWT of a loopback issuer, verified (signature, issuer, audience, expiry) and checked for countdown's scope", false, false},
	}
	for _, v := range variants {
		kind := ""
		for _, k := range []string{redisOne, redisSentinel, redisCluster} {
			if slices.ContainsFunc(v.args, func(a string) bool { return strings.Contains(a, redisPlaceholder(k)) }) {
				kind = k
			}
		}
		rows = append(rows, builtin{variant: v, redis: kind, versus: "tidemark", means: v.name + " ÷ memory", what: "a row of --tidemark-variant"})
	}
	for _, v := range rows {
		var iss *authIssuer
		if slices.ContainsFunc(v.args, func(a string) bool { return strings.Contains(a, issuerPlaceholder) }) {
			iss = issuer
		}
		out = append(out, serverSpec{name: v.name, role: roleVariant, argv: tidemarkServe(v.args...), redis: v.redis, fleet: fleet,
			versus: v.versus, versusMeans: v.means, tasks: v.tasks, hibernates: v.hibernates, issuer: iss,
			label: "Tidemark: `tidemark serve " + strings.Join(v.args, " ") + "`: " + v.what})
		if tc.baselineBin != "" {
			out = append(out, serverSpec{name: v.name + baselineSuffix, role: roleBaseline, argv: tidemarkServeFrom(tc.baselineBin, v.args...),
				redis: v.redis, fleet: fleet, issuer: iss,
				label: "`tidemark serve " + strings.Join(v.args, " ") + "` built from the baseline commit (--baseline)"})
		}
	}
	gosdk := serverSpec{name: "gosdk", role: rolePeer, argv: peer("gosdk"),
		label: "go-sdk v1.8.0 StreamableHTTPHandler + MemoryEventStore (same internal/demo server)"}
	out = append(out, gatewaySpec(tidemarkServe, gosdk), stdioGatewaySpec(tidemarkServe, tc.bin))
	out = append(out,
		gosdk,
		serverSpec{name: "mcpgo", role: rolePeer, argv: peer("mcpgo"),
			label: "mcp-go v1.2.1 StreamableHTTPServer + InMemoryEventStore"},
		serverSpec{name: "ts", role: rolePeer, argv: func(port int) []string {
			return []string{tc.node, tc.tsScript, "--port", strconv.Itoa(port), "--node-modules", tc.nodeModules}
		}, label: "TypeScript SDK StreamableHTTPServerTransport + InMemoryEventStore (Node)"},
		serverSpec{name: "ceiling", role: roleCeiling, argv: peer("ceiling"),
			label: "ceiling: bare net/http handler writing the same SSE frames, no MCP"},
	)
	return out
}

// tmpdirPlaceholder in a variant's arguments is replaced by a new empty
// directory for each server process, e.g. 'durable=--data-dir {tmpdir}':
// every workload starts on an empty store.
const tmpdirPlaceholder = "{tmpdir}"

// metricsPlaceholder in a server's arguments is replaced by 127.0.0.1 and
// a free port, for --metrics-addr; the benchmark reads /metrics there once
// the workload is over.
const metricsPlaceholder = "{metrics-addr}"

// variant is an extra `tidemark serve` row: --tidemark-variant name=args.
type variant struct {
	name string
	args []string
}

// server is one running server process.
type server struct {
	spec serverSpec
	cmd  *exec.Cmd
	pid  int
	url  string
	log  string // path of its stdout+stderr
	done chan struct{}
	err  error // exit status once done
	// upstream is the server this one fronts (serverSpec.upstream), or nil.
	upstream *server
	// helpers are the processes besides this one and its upstream that
	// serve its row: its Redis deployment's.
	helpers []int
	// metricsAddr is its --metrics-addr (metricsPlaceholder), or "".
	metricsAddr string
	// dataDirs are the directories of tmpdirPlaceholder, removed by stop.
	dataDirs []string
	// authorization is the Authorization header every request to it
	// carries (serverSpec.issuer), or "".
	authorization string
}

// startServer starts spec on a free loopback port and waits until it
// accepts connections. logDir receives its output.
func startServer(ctx context.Context, spec serverSpec, logDir, tag string, extraArgs ...string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	argv := append(spec.argv(port), extraArgs...)
	var up *server
	if spec.upstream != nil {
		if up, err = startServer(ctx, *spec.upstream, logDir, tag+"-upstream"); err != nil {
			return nil, fmt.Errorf("%s: its upstream: %w", spec.name, err)
		}
		for i, a := range argv {
			argv[i] = strings.ReplaceAll(a, upstreamPlaceholder, up.url)
		}
	}
	stopUpstream := func() {
		if up != nil {
			up.stop()
		}
	}
	var helpers []int
	if spec.redis != "" {
		d := spec.fleet.get(spec.redis)
		if d == nil {
			stopUpstream()
			return nil, fmt.Errorf("%s: %w", spec.name, errNoDeployment)
		}
		if err := d.reset(ctx); err != nil {
			stopUpstream()
			return nil, fmt.Errorf("%s: %w", spec.name, err)
		}
		helpers = d.pids()
		for i, a := range argv {
			argv[i] = strings.ReplaceAll(a, redisPlaceholder(spec.redis), d.url)
		}
	}
	authorization := ""
	if spec.issuer != nil {
		url, token, err := spec.issuer.start()
		if err != nil {
			stopUpstream()
			return nil, fmt.Errorf("%s: its authorization server: %w", spec.name, err)
		}
		for i, a := range argv {
			argv[i] = strings.ReplaceAll(a, issuerPlaceholder, url)
		}
		authorization = "Bearer " + token
	}
	metricsAddr := ""
	var dataDirs []string
	removeDirs := func() {
		for _, d := range dataDirs {
			os.RemoveAll(d)
		}
	}
	for i, a := range argv {
		if strings.Contains(a, tmpdirPlaceholder) {
			dir, err := os.MkdirTemp(logDir, spec.name+"-"+tag+"-data-")
			if err != nil {
				stopUpstream()
				removeDirs()
				return nil, err
			}
			dataDirs = append(dataDirs, dir)
			argv[i] = strings.ReplaceAll(a, tmpdirPlaceholder, dir)
		}
		if strings.Contains(a, metricsPlaceholder) {
			mp, err := freePort()
			if err != nil {
				stopUpstream()
				removeDirs()
				return nil, err
			}
			metricsAddr = fmt.Sprintf("127.0.0.1:%d", mp)
			argv[i] = strings.ReplaceAll(a, metricsPlaceholder, metricsAddr)
		}
	}
	logPath := filepath.Join(logDir, spec.name+"-"+tag+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		stopUpstream()
		removeDirs()
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// The server dies with the benchmark, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		stopUpstream()
		removeDirs()
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	s := &server{spec: spec, cmd: cmd, pid: cmd.Process.Pid, url: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), log: logPath,
		done: make(chan struct{}), upstream: up, helpers: helpers, metricsAddr: metricsAddr, dataDirs: dataDirs,
		authorization: authorization}
	go func() {
		s.err = cmd.Wait()
		lf.Close()
		close(s.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			s.stop() // its upstream, its directories
			return nil, fmt.Errorf("%s exited before listening (%v): %s", spec.name, s.err, tail(logPath))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s did not listen within 30s: %s", spec.name, tail(logPath))
		}
	}
}

// stop ends the server, then its upstream if it has one: SIGTERM, then
// SIGKILL after 3 seconds; then it removes the server's data directories.
func (s *server) stop() {
	defer func() {
		for _, d := range s.dataDirs {
			os.RemoveAll(d)
		}
		if s.upstream != nil {
			s.upstream.stop()
		}
	}()
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(3 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// alive reports whether the process, and its upstream if it has one,
// still run.
func (s *server) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return s.upstream == nil || s.upstream.alive()
	}
}

// helperPids returns the processes that serve this server's row besides
// its own: its upstream's (and theirs), its Redis deployment's, and its
// descendants (the stdio gateway's subprocesses), found now.
func (s *server) helperPids() []int {
	out := append([]int(nil), s.helpers...)
	if s.upstream != nil {
		out = append(out, s.upstream.pid)
		out = append(out, s.upstream.helperPids()...)
	}
	return append(out, descendants(s.pid)...)
}

// descendants returns the processes whose parent, or an ancestor's
// parent, is pid, from /proc/*/stat.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		parent, _ := strconv.Atoi(f[1]) // field 4: ppid
		children[parent] = append(children[parent], child)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, children[p]...)
		queue = append(queue, children[p]...)
	}
	return out
}

// scrapeMetrics reads http://addr/metrics once, as Prometheus would, and
// checks that it holds Tidemark's metrics: the row with --metrics-addr
// measured them on.
func scrapeMetrics(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scraping the metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("scraping the metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("tidemark_events_appended_total")) {
		return fmt.Errorf("scraping the metrics: status %d, %d bytes without tidemark_events_appended_total", resp.StatusCode, len(body))
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last lines of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, " | ")
}

// procStat is a snapshot of a process's counters from /proc (proc(5)).
type procStat struct {
	cpu    time.Duration // utime + stime of all its threads
	rss    int64         // VmRSS, bytes
	writes int64         // write-family system calls (syscw of /proc/PID/io)
	reads  int64         // read-family system calls (syscr of /proc/PID/io)
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat; 100
// on every Linux architecture Go supports.
const clockTicks = 100

func readProc(pid int) (procStat, error) {
	var ps procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, err
	}
	// The command name may contain spaces; fields start after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ps, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return ps, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14: utime
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15: stime
	ps.cpu = time.Duration(ut+st) * time.Second / clockTicks

	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			ps.rss = kb << 10
		}
	}
	status.Close()

	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err == nil {
		for _, line := range strings.Split(string(io), "\n") {
			if v, ok := strings.CutPrefix(line, "syscw: "); ok {
				ps.writes, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "syscr: "); ok {
				ps.reads, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return ps, nil
}

// machineCPU returns the busy time of all CPUs (everything but idle and
// iowait, from the first line of /proc/stat) and this process's own CPU
// time, so a window can tell how much of the machine other processes used.
func machineCPU() (busy, self time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		var total, idle int64
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			if i >= 8 { // guest time is already in user
				break
			}
			total += n
			if i == 3 || i == 4 {
				idle += n
			}
		}
		busy = time.Duration(total-idle) * time.Second / clockTicks
	}
	if ps, err := readProc(os.Getpid()); err == nil {
		self = ps.cpu
	}
	return busy, self
}

// window measures one workload window: the server's counters, its
// helpers' CPU time (serverSpec's Redis deployment, upstream, subprocesses:
// server.helperPids) and the share of the machine that neither the server,
// its helpers nor the load generator used (other processes).
type window struct {
	pid         int
	helpers     []int
	start       time.Time
	before      procStat
	helpers0    time.Duration
	busy0, gen0 time.Duration
}

// openWindow opens a window on the server pid with the helper processes
// helpers, as found at its start (a helper started later is not counted).
func openWindow(pid int, helpers ...int) *window {
	w := &window{pid: pid, helpers: helpers}
	w.before, _ = readProc(pid)
	w.helpers0 = cpuOf(helpers)
	w.busy0, w.gen0 = machineCPU()
	w.start = time.Now()
	return w
}

// cpuOf returns the CPU time (user+sys) the processes pids used so far;
// those that have exited count nothing.
func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		if ps, err := readProc(pid); err == nil {
			sum += ps.cpu
		}
	}
	return sum
}

// close returns the server's deltas, its helpers' CPU time over the
// window, and the fraction of the machine's capacity (all CPUs over the
// window) used by other processes.
func (w *window) close() (delta procStat, helpers time.Duration, foreign float64) {
	elapsed := time.Since(w.start)
	after, _ := readProc(w.pid)
	helpers = max(0, cpuOf(w.helpers)-w.helpers0)
	busy, gen := machineCPU()
	delta = procStat{cpu: after.cpu - w.before.cpu, writes: after.writes - w.before.writes, reads: after.reads - w.before.reads, rss: after.rss}
	other := (busy - w.busy0) - (gen - w.gen0) - delta.cpu - helpers
	capacity := elapsed * time.Duration(runtime.NumCPU())
	if elapsed < 200*time.Millisecond {
		return delta, helpers, -1 // too short for 10 ms CPU ticks: unknown
	}
	if capacity > 0 {
		foreign = max(0, float64(other)/float64(capacity))
	}
	return delta, helpers, foreign
}
