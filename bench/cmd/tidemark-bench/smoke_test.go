package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// The smoke tests share one build of tidemark and benchpeer (bench builds
// them once per run otherwise): the build is not what they time out on.
var binaries struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

// prebuilt returns a directory holding tidemark and benchpeer built from
// this tree, built on the first call.
func prebuilt(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		tc, err := findToolchain(options{})
		if err != nil {
			binaries.err = err
			return
		}
		if binaries.dir, binaries.err = os.MkdirTemp("", "tidemark-bench-test-"); binaries.err != nil {
			return
		}
		tc.bin = binaries.dir
		binaries.err = build(context.Background(), tc)
	})
	if binaries.err != nil {
		t.Fatalf("building tidemark and benchpeer: %v", binaries.err)
	}
	return binaries.dir
}

// TestQuickRun runs `tidemark-bench --quick` against Tidemark and the
// ceiling (real processes on loopback, built from this tree) and checks that
// every workload produced figures: calls answered without error, every
// progress event delivered in order, exact replays, every idle session and
// stream accounted for, and a storm answered in full. It asserts behaviour,
// not speed: speed is what the report is for.
func TestQuickRun(t *testing.T) {
	bin := prebuilt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	rep, err := bench(ctx, options{quick: true, bin: bin, servers: "tidemark,ceiling", workloads: "a,b,c,d,e",
		args: []string{"--quick", "--servers", "tidemark,ceiling"}}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	noneLeft(t, nil)
	cfg := quickConfig()
	if len(rep.rows) != 2 || rep.rows[0].spec.name != "tidemark" || rep.rows[1].spec.name != "ceiling" {
		t.Fatalf("rows = %v, want tidemark and ceiling", rep.rows)
	}
	for _, r := range rep.rows {
		name := r.spec.name
		if r.failure != "" || len(r.notes) > 0 {
			t.Errorf("%s: failure %q notes %q\n%s", name, r.failure, r.notes, stderr.String())
			continue
		}
		if len(r.a) != len(cfg.aConc) {
			t.Errorf("%s (a): %d levels measured, want %d", name, len(r.a), len(cfg.aConc))
		}
		for _, a := range r.a {
			if a.calls == 0 || a.errors != 0 || a.p50 <= 0 || a.p99 < a.p50 {
				t.Errorf("%s (a) %d sessions: calls %d errors %d (%s) p50 %v p99 %v", name, a.conc, a.calls, a.errors, a.firstErr, a.p50, a.p99)
			}
		}
		if !r.hasB || r.b1.received != cfg.b1N || r.b1.lost != 0 || r.b1.failedCalls != 0 {
			t.Errorf("%s (b) 1 stream: received %d of %d, lost %d, failed calls %d (%s)", name, r.b1.received, cfg.b1N, r.b1.lost, r.b1.failedCalls, r.b1.note)
		}
		if want := cfg.bStreams * cfg.bN; r.bN.received != want || r.bN.lost != 0 || r.bN.failedCalls != 0 {
			t.Errorf("%s (b) %d streams: received %d of %d, lost %d, failed calls %d (%s)", name, cfg.bStreams, r.bN.received, want, r.bN.lost, r.bN.failedCalls, r.bN.note)
		}
		if !r.hasC || r.c.na != "" || r.c.runs != cfg.cRuns || r.c.wrong != 0 || r.c.median <= 0 {
			t.Errorf("%s (c): na %q runs %d wrong %d (%s) median %v", name, r.c.na, r.c.runs, r.c.wrong, r.c.example, r.c.median)
		}
		if !r.hasD || r.d.sessions != cfg.dSessions || r.d.streams != cfg.dStreamCap || r.d.streamErr != "" {
			t.Errorf("%s (d): sessions %d streams %d of %d (%s)", name, r.d.sessions, r.d.streams, cfg.dStreamCap, r.d.streamErr)
		}
		if !r.hasE || r.e.na != "" || r.e.wrong != 0 || r.e.unanswered != 0 || r.e.all <= 0 {
			t.Errorf("%s (e): na %q wrong %d unanswered %d (%s) all %v", name, r.e.na, r.e.wrong, r.e.unanswered, r.e.example, r.e.all)
		}
		// (d)'s hibernated part: every session hibernated (the wait would
		// have failed otherwise), and every one woke at its first request
		// with the countdown's result, at the same generation.
		dh, n := r.dh, int64(cfg.hibernate.sessions)
		if got := r.spec.hibernates; got != (name == "tidemark") || r.hasDH != got {
			t.Errorf("%s: hibernates %v, (d) hibernated measured %v; want both for tidemark only", name, got, r.hasDH)
		} else if got && (dh.sessions != cfg.hibernate.sessions || dh.sessionsAwake != cfg.hibernate.sessions || dh.peakAwake <= 0 || dh.peakAwake > n+1 || dh.wakes != cfg.hibernate.sessions || dh.wrong != 0 || dh.woken != n || dh.wokenSame != n ||
			dh.rssAwake <= dh.rssBase || dh.rssHibernated <= 0 || dh.p50 <= 0 || dh.p99 < dh.p50) {
			t.Errorf("%s (d) hibernated: %d sessions (%d awake, at most %d awake at once while hibernating), %d woken of %d (%d wrong: %s), %d woken by the server's count (%d at the same generation), RSS %d → %d awake, %d hibernated, p50 %v p99 %v",
				name, dh.sessions, dh.sessionsAwake, dh.peakAwake, dh.wakes-dh.wrong, dh.wakes, dh.wrong, dh.example, dh.woken, dh.wokenSame, dh.rssBase, dh.rssAwake, dh.rssHibernated, dh.p50, dh.p99)
		}
	}
	md := stdout.String()
	for _, want := range []string{"## (a) tools/call round trips", "## (e) reconnect storm", "### Hibernated sessions", "### tidemark ÷ …", "## Goals"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestQuickGateway runs `tidemark-bench --quick` on the gateway row
// (tidemark serve --upstream in front of a gosdk process) and on gosdk
// served directly, workloads (a), (b) and (d): every call is answered,
// every progress event delivered, and the report divides the gateway's
// figures by gosdk's. The gateway's sessions hibernate in (d), both of
// its processes opening the quick count (its awake process's bound is
// past it), and every one wakes at its first request with the
// countdown's result, at the next generation (the gateway's hibernation
// is lossy); gosdk's do not.
func TestQuickGateway(t *testing.T) {
	bin := prebuilt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	rep, err := bench(ctx, options{quick: true, bin: bin, servers: "gateway,gosdk", workloads: "a,b,d",
		args: []string{"--quick", "--servers", "gateway,gosdk", "--workloads", "a,b,d"}}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	noneLeft(t, nil)
	cfg := quickConfig()
	if len(rep.rows) != 2 || rep.rows[0].spec.name != "gateway" || rep.rows[1].spec.name != "gosdk" {
		t.Fatalf("rows = %v, want gateway and gosdk", rep.rows)
	}
	for _, r := range rep.rows {
		checkAB(t, r, cfg, stderr.String())
	}
	gw, n := rep.rows[0], int64(cfg.hibernate.sessions)
	if dh := gw.dh; !gw.hasDH || dh.sessions != cfg.hibernate.sessions || dh.sessionsAwake != cfg.hibernate.sessions || dh.peakAwake <= 0 || dh.peakAwake > n+1 || dh.wakes != cfg.hibernate.sessions || dh.wrong != 0 || dh.woken != n || dh.wokenSame != 0 ||
		dh.rssAwake <= dh.rssBase || dh.rssHibernated <= 0 || dh.p50 <= 0 || dh.p99 < dh.p50 {
		t.Errorf("gateway (d) hibernated: measured %v, %d sessions (%d awake, at most %d awake at once while hibernating), %d woken of %d (%d wrong: %s), %d woken by the server's count (%d at the same generation), RSS %d → %d awake, %d hibernated, p50 %v p99 %v\n%s",
			gw.hasDH, dh.sessions, dh.sessionsAwake, dh.peakAwake, dh.wakes-dh.wrong, dh.wakes, dh.wrong, dh.example, dh.woken, dh.wokenSame, dh.rssBase, dh.rssAwake, dh.rssHibernated, dh.p50, dh.p99, stderr.String())
	}
	if rep.rows[1].hasDH {
		t.Errorf("gosdk measured (d) hibernated: it does not hibernate")
	}
	md := stdout.String()
	_, dhTable, _ := strings.Cut(md, "### Hibernated sessions\n")
	dhTable, _, _ = strings.Cut(dhTable, "\n#")
	if !strings.Contains(dhTable, fmt.Sprintf("\n| gateway | %d | ", cfg.hibernate.sessions)) || strings.Contains(dhTable, "| gosdk |") {
		t.Errorf("the hibernated sessions' table lacks the gateway's row, or has gosdk's:\n%s", dhTable)
	}
	_, section, ok := strings.Cut(md, "## Tidemark's configurations\n")
	if !ok {
		t.Fatalf("report lacks the configurations section:\n%s", md)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	if !strings.Contains(section, "| metric | gateway ÷ gosdk |") {
		t.Errorf("configurations section lacks the column gateway ÷ gosdk:\n%s", section)
	}
	for _, want := range []string{"| (a) calls/s, 1 sessions ↑ |", "| (b) events/s, 1 stream ↑ |"} {
		if !strings.Contains(section, want) || strings.Contains(section, want+" – |") {
			t.Errorf("configurations section lacks a figure for %q:\n%s", want, section)
		}
	}
}

// TestQuickConfigurations runs `tidemark-bench --quick` on every row of
// Tidemark's configurations: the durable store, one Redis, Sentinel and
// Cluster (deployments the benchmark starts), metrics on, and the stdio
// gateway, with the memory store as their reference, workloads (a), (b),
// (c) and (e) ((d) is the same code for every row; TestQuickRun runs it).
// Every workload produces figures (the stdio gateway's (e) is N/A, one
// subprocess per session), the report divides each row by its reference,
// and no process of the run is left once it returns.
func TestQuickConfigurations(t *testing.T) {
	testenv.Need(t, testenv.RedisServer, testenv.RedisSentinel, testenv.RedisCLI)
	bin := prebuilt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const servers = "tidemark,durable,redis,sentinel,cluster,metrics,gateway-stdio"
	var stdout, stderr bytes.Buffer
	rep, err := bench(ctx, options{quick: true, bin: bin, servers: servers, workloads: "a,b,c,e",
		args: []string{"--quick", "--servers", servers, "--workloads", "a,b,c,e"}}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	noneLeft(t, nil)
	cfg := quickConfig()
	var names []string
	for _, r := range rep.rows {
		names = append(names, r.spec.name)
		name := r.spec.name
		if !checkAB(t, r, cfg, stderr.String()) {
			continue
		}
		if !r.hasC || r.c.na != "" || r.c.wrong != 0 || r.c.median <= 0 {
			t.Errorf("%s (c): na %q wrong %d (%s) median %v", name, r.c.na, r.c.wrong, r.c.example, r.c.median)
		}
		if name == "gateway-stdio" {
			if !r.hasE || r.e.na == "" {
				t.Errorf("%s: (e) ran (na %q), want N/A", name, r.e.na)
			}
			continue
		}
		if !r.hasE || r.e.na != "" || r.e.wrong != 0 || r.e.unanswered != 0 {
			t.Errorf("%s (e): na %q wrong %d unanswered %d (%s)", name, r.e.na, r.e.wrong, r.e.unanswered, r.e.example)
		}
	}
	if want := strings.Split(servers, ","); !slices.Equal(names, want) {
		t.Fatalf("rows %q, want %q", names, want)
	}
	md := stdout.String()
	_, section, ok := strings.Cut(md, "## Tidemark's configurations\n")
	if !ok {
		t.Fatalf("report lacks the configurations section:\n%s", md)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	head := "| metric | durable ÷ tidemark | redis ÷ tidemark | sentinel ÷ redis | cluster ÷ redis | metrics ÷ tidemark | gateway-stdio ÷ tidemark |"
	if !strings.Contains(section, head) {
		t.Errorf("configurations section lacks %q:\n%s", head, section)
	}
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| (a) calls/s") || strings.HasPrefix(line, "| (b) events/s") {
			if strings.Contains(line, "–") {
				t.Errorf("a ratio is missing: %s", line)
			}
		}
	}
	for _, want := range []string{"- `{sentinel}`: a primary and one replica", "- `{cluster}`: a Redis Cluster", "| gateway-stdio | N/A | – | – | – | – | one subprocess per session"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestInterrupted cancels a run (what Ctrl-C does) while a Redis
// deployment, a stdio gateway and its subprocesses run: bench returns the
// context's error and every process the run started is gone.
func TestInterrupted(t *testing.T) {
	testenv.Need(t, testenv.RedisServer)
	bin := prebuilt(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var running []int
	stderr := &watch{match: "gateway-stdio  (a)  16 sessions", then: func() {
		running = descendants(os.Getpid())
		cancel()
	}}
	_, err := bench(ctx, options{quick: true, bin: bin, servers: "redis,gateway-stdio", workloads: "a",
		args: []string{"--quick"}}, io.Discard, stderr)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("bench = %v, want context.Canceled\n%s", err, stderr.buf.String())
	}
	if len(running) < 1+1+17 { // redis-server, tidemark, its 1 + 16 subprocesses at least
		t.Fatalf("%d processes ran when the run was cancelled, want at least 19:\n%s", len(running), stderr.buf.String())
	}
	noneLeft(t, running)
}

// watch is an io.Writer that calls then once, at the first write holding
// match.
type watch struct {
	buf   bytes.Buffer
	match string
	then  func()
	done  bool
}

func (w *watch) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if !w.done && bytes.Contains(p, []byte(w.match)) {
		w.done = true
		w.then()
	}
	return len(p), nil
}

// noneLeft fails the test when this process still has descendants, or
// when a process of pids still runs (one that a killed parent left to
// init), 5 s after the run returned.
func noneLeft(t *testing.T, pids []int) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = nil
		all := append(descendants(os.Getpid()), pids...)
		slices.Sort(all)
		for _, pid := range slices.Compact(all) {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !zombie(st) {
				left = append(left, strings.TrimSpace(string(st)))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Fatalf("%d processes of the run still run:\n%s", len(left), strings.Join(left, "\n"))
	}
}

// zombie reports whether a /proc/PID/stat line is a process that has
// exited and awaits its parent's wait (state Z).
func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// checkAB checks that row r of a quick run ran without failure or note,
// answered every (a) call and received every (b) event, and reports
// whether it ran (stderr is the run's, for the failure's message).
func checkAB(t *testing.T, r *row, cfg config, stderr string) bool {
	t.Helper()
	name := r.spec.name
	if r.failure != "" || len(r.notes) > 0 {
		t.Errorf("%s: failure %q notes %q\n%s", name, r.failure, r.notes, stderr)
		return false
	}
	for _, a := range r.a {
		if a.calls == 0 || a.errors != 0 {
			t.Errorf("%s (a) %d sessions: calls %d errors %d (%s)", name, a.conc, a.calls, a.errors, a.firstErr)
		}
	}
	if !r.hasB || r.b1.received != cfg.b1N || r.b1.lost != 0 || r.bN.received != cfg.bStreams*cfg.bN || r.bN.lost != 0 {
		t.Errorf("%s (b): received %d and %d, lost %d and %d", name, r.b1.received, r.bN.received, r.b1.lost, r.bN.lost)
	}
	return true
}

// TestQuickTasks runs `tidemark-bench --quick` on workload (t), the Tasks
// extension, with the memory store, --data-dir and one Redis (a deployment
// the benchmark starts): every store creates tasks, reads each completed
// with the countdown's result, and runs the countdown as a task and
// without one, none answered at once or failed; the server suggests the
// poll interval (t) starts it with; the report has both tables of (t), a
// row per store, and divides each store by the memory store.
func TestQuickTasks(t *testing.T) {
	testenv.Need(t, testenv.RedisServer)
	bin := prebuilt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const servers = "tidemark,durable,redis"
	var stdout, stderr bytes.Buffer
	rep, err := bench(ctx, options{quick: true, bin: bin, servers: servers, workloads: "t",
		args: []string{"--quick", "--servers", servers, "--workloads", "t"}}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	noneLeft(t, nil)
	var names []string
	for _, r := range rep.rows {
		names = append(names, r.spec.name)
		name := r.spec.name
		if r.failure != "" || len(r.notes) > 0 || !r.hasT || r.t.na != "" {
			t.Errorf("%s: failure %q notes %q (t) ran %v, N/A %q\n%s", name, r.failure, r.notes, r.hasT, r.t.na, stderr.String())
			continue
		}
		x := r.t
		if x.conc != 16 || x.pollMs != 1 || x.atOnce != 0 {
			t.Errorf("%s (t): %d clients, pollIntervalMs %d, %d answered at once; want 16, 1, 0", name, x.conc, x.pollMs, x.atOnce)
		}
		for _, w := range []struct {
			what string
			a    resultA
		}{{"created", x.create}, {"tasks/get", x.get}, {"as a task", x.asTask}, {"without", x.plain}} {
			if w.a.calls == 0 || w.a.errors != 0 || w.a.p50 <= 0 || w.a.p99 < w.a.p50 {
				t.Errorf("%s (t) %s: %d done, %d failed (%s), p50 %v p99 %v", name, w.what, w.a.calls, w.a.errors, w.a.firstErr, w.a.p50, w.a.p99)
			}
		}
		if x.polls < 1 {
			t.Errorf("%s (t): %.2f tasks/get per run, want at least 1", name, x.polls)
		}
	}
	if want := strings.Split(servers, ","); !slices.Equal(names, want) {
		t.Fatalf("rows %q, want %q", names, want)
	}
	md := stdout.String()
	_, section, ok := strings.Cut(md, "## (t) tasks\n")
	if !ok {
		t.Fatalf("report lacks section (t):\n%s", md)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	created, asTask, ok := strings.Cut(section, "### A countdown run as a task ÷ the same call without one\n")
	if !ok {
		t.Fatalf("section (t) lacks the table of a countdown as a task:\n%s", section)
	}
	for _, name := range names {
		if !strings.Contains(created, "\n| "+name+" | ") {
			t.Errorf("the table of tasks created lacks a row %s:\n%s", name, created)
		}
		// The ratios of the run as a task to the call without one: three
		// figures, then the failures.
		if !regexp.MustCompile(`\n\| ` + name + ` \|( [^|]+ \|){9}( \d+\.\d\d \|){3} 0 / 0 \|\n`).MatchString(asTask) {
			t.Errorf("the table of a countdown as a task lacks a row %s with three quotients:\n%s", name, asTask)
		}
	}
	_, configs, ok := strings.Cut(md, "## Tidemark's configurations\n")
	if !ok {
		t.Fatalf("report lacks the configurations section:\n%s", md)
	}
	configs, _, _ = strings.Cut(configs, "\n## ")
	for _, m := range []string{"(t) tasks created/s, 16 clients ↑", "(t) tasks/get/s, 16 clients ↑", "(t) countdowns run as tasks/s, 16 clients ↑"} {
		if !regexp.MustCompile(`\| ` + regexp.QuoteMeta(m) + ` \| \d+\.\d\d \| \d+\.\d\d \|\n`).MatchString(configs) {
			t.Errorf("configurations section lacks %q with durable ÷ tidemark and redis ÷ tidemark:\n%s", m, configs)
		}
	}
}

// TestQuickAuth runs `tidemark-bench --quick` on the `auth` row, `tidemark
// serve --auth-issuer` in front of the loopback authorization server the
// benchmark runs, beside the `tidemark` row it is divided by: every call
// carries the issuer's token and is answered (a server refusing the token
// would answer 401, an error of the row), the resumes of (c) carry it too,
// and the report divides auth by tidemark and states the goal of calls/s
// with auth on ÷ off. It checks the row's shape, not its speed.
func TestQuickAuth(t *testing.T) {
	bin := prebuilt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	rep, err := bench(ctx, options{quick: true, bin: bin, servers: "tidemark,auth", workloads: "a,b,c",
		args: []string{"--quick", "--servers", "tidemark,auth", "--workloads", "a,b,c"}}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	noneLeft(t, nil)
	cfg := quickConfig()
	if len(rep.rows) != 2 || rep.rows[0].spec.name != "tidemark" || rep.rows[1].spec.name != "auth" {
		t.Fatalf("rows = %v, want tidemark and auth", rep.rows)
	}
	for _, r := range rep.rows {
		if checkAB(t, r, cfg, stderr.String()) && (!r.hasC || r.c.na != "" || r.c.wrong != 0 || r.c.median <= 0) {
			t.Errorf("%s (c): na %q wrong %d (%s) median %v", r.spec.name, r.c.na, r.c.wrong, r.c.example, r.c.median)
		}
	}
	md := stdout.String()
	for _, want := range []string{
		"serve --addr 127.0.0.1:PORT --retention-events 100000 --max-sessions 20000 --log-level WARN --auth-issuer {auth-issuer} --auth-audience urn:tidemark-bench:mcp --auth-tool-scope countdown=bench:call`",
		"- `auth` ÷ `tidemark`: auth on ÷ off\n",
		"| metric | auth ÷ tidemark |",
		"| auth on ÷ off (auth ÷ tidemark), (a) calls/s, 16 sessions ≥ 0.90 | ",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	_, section, _ := strings.Cut(md, "## Tidemark's configurations\n")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| (a) ") && strings.Contains(line, "–") {
			t.Errorf("a ratio of (a) is missing: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", md)
	}
}
