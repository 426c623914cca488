package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Roles of the servers in the ratios.
const (
	roleTidemark = "tidemark" // a Tidemark row: ratios are computed for it
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

// specs returns the servers of the comparison, in table order. variants are
// extra `tidemark serve` rows (name → extra arguments), for the durable and
// Redis stores as they land.
func specs(tc toolchain, variants []variant) []serverSpec {
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
		{name: "tidemark", role: roleTidemark, argv: tidemarkServe(),
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
	for _, v := range variants {
		out = append(out, serverSpec{name: v.name, role: roleTidemark, argv: tidemarkServe(v.args...),
			label: "Tidemark: `tidemark serve " + strings.Join(v.args, " ") + "`"})
		if tc.baselineBin != "" {
			out = append(out, serverSpec{name: v.name + baselineSuffix, role: roleBaseline, argv: tidemarkServeFrom(tc.baselineBin, v.args...),
				label: "`tidemark serve " + strings.Join(v.args, " ") + "` built from the baseline commit (--baseline)"})
		}
	}
	gosdk := serverSpec{name: "gosdk", role: rolePeer, argv: peer("gosdk"),
		label: "go-sdk v1.8.0 StreamableHTTPHandler + MemoryEventStore (same internal/demo server)"}
	out = append(out, gatewaySpec(tidemarkServe, gosdk))
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
	for i, a := range argv {
		if strings.Contains(a, tmpdirPlaceholder) {
			dir, err := os.MkdirTemp(logDir, spec.name+"-"+tag+"-data-")
			if err != nil {
				return nil, err
			}
			argv[i] = strings.ReplaceAll(a, tmpdirPlaceholder, dir)
		}
	}
	logPath := filepath.Join(logDir, spec.name+"-"+tag+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		stopUpstream()
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// The server dies with the benchmark, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		stopUpstream()
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	s := &server{spec: spec, cmd: cmd, pid: cmd.Process.Pid, url: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), log: logPath,
		done: make(chan struct{}), upstream: up}
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
// SIGKILL after 3 seconds.
func (s *server) stop() {
	defer func() {
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

// window measures one workload window: the server's counters and the
// share of the machine that neither the server nor the load generator
// used (other processes).
type window struct {
	pid         int
	start       time.Time
	before      procStat
	busy0, gen0 time.Duration
}

func openWindow(pid int) *window {
	w := &window{pid: pid}
	w.before, _ = readProc(pid)
	w.busy0, w.gen0 = machineCPU()
	w.start = time.Now()
	return w
}

// close returns the server's deltas and the fraction of the machine's
// capacity (all CPUs over the window) used by other processes.
func (w *window) close() (delta procStat, foreign float64) {
	elapsed := time.Since(w.start)
	after, _ := readProc(w.pid)
	busy, gen := machineCPU()
	delta = procStat{cpu: after.cpu - w.before.cpu, writes: after.writes - w.before.writes, reads: after.reads - w.before.reads, rss: after.rss}
	other := (busy - w.busy0) - (gen - w.gen0) - delta.cpu
	capacity := elapsed * time.Duration(runtime.NumCPU())
	if elapsed < 200*time.Millisecond {
		return delta, -1 // too short for 10 ms CPU ticks: unknown
	}
	if capacity > 0 {
		foreign = max(0, float64(other)/float64(capacity))
	}
	return delta, foreign
}
