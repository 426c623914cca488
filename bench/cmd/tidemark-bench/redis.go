package main

// The Redis deployments of the rows that keep their sessions in Redis,
// started by the benchmark itself on free loopback ports: one redis-server
// (`redis`), a primary with one replica watched by three redis-sentinel
// processes (`sentinel`), and a Redis Cluster of three primaries with one
// replica each (`cluster`). Each is started once per run, before the first
// round, and stopped when the run ends, Ctrl-C included; every process also
// gets SIGKILL from the kernel if the benchmark dies first (Pdeathsig).
// Before each `tidemark serve` process of a row starts, its deployment is
// emptied (FLUSHALL on every primary, its replicas caught up, the
// append-only files rewritten), so every workload starts on an empty store
// as the --data-dir rows do.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The deployments, by the name their rows and placeholders use.
const (
	redisOne      = "redis"
	redisSentinel = "sentinel"
	redisCluster  = "cluster"
)

// redisPlaceholder returns the placeholder that a row's arguments hold for
// the URL of the deployment kind, e.g. {sentinel}.
func redisPlaceholder(kind string) string { return "{" + kind + "}" }

// redisServerArgs are the settings of every redis-server the benchmark
// starts, besides its port and directory. Every write is in the append-only
// file and fsynced before Redis answers (docs/fleet.md, "Redis restarts": the
// setting under which a restarted Redis keeps every acknowledged event);
// no RDB snapshots; no automatic rewrite of the append-only file, which
// would fork in the middle of a measured window (resets rewrite it
// instead).
var redisServerArgs = []string{
	"--bind", "127.0.0.1",
	"--daemonize", "no",
	"--logfile", "",
	"--save", "",
	"--appendonly", "yes",
	"--appendfsync", "always",
	"--auto-aof-rewrite-percentage", "0",
	"--repl-diskless-sync-delay", "0",
}

// clusterNodeArgs are added for the nodes of the Cluster. The node timeout
// is Redis's default: no node is declared failed because the benchmark
// kept the machine busy for a few seconds.
var clusterNodeArgs = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "15000"}

// sentinelMaster is the name under which the sentinels monitor the primary.
const sentinelMaster = "bench"

// sentinelConfig is a redis-sentinel configuration (format: PORT, DIR,
// primary host, primary port). A primary is declared down after 60 s
// without an answer: long enough that no failover happens because a
// benchmark window kept the machine busy.
const sentinelConfig = `port %d
bind 127.0.0.1
daemonize no
logfile ""
dir %s
sentinel monitor ` + sentinelMaster + ` %s %s 2
sentinel down-after-milliseconds ` + sentinelMaster + ` 60000
sentinel failover-timeout ` + sentinelMaster + ` 180000
`

// redisReady bounds how long a process may take to answer PING, a replica
// to sync and a deployment to agree on its topology.
const redisReady = 30 * time.Second

// redisProcess is one redis-server or redis-sentinel process.
type redisProcess struct {
	addr string // 127.0.0.1:PORT
	cmd  *exec.Cmd
	log  string // its output
	done chan struct{}
}

// redisDeployment is one deployment of redisDeployments.
type redisDeployment struct {
	kind      string
	url       string // the --redis URL of tidemark serve
	primaries []*redisProcess
	replicas  []*redisProcess
	sentinels []*redisProcess
}

// redisDeployments are the deployments of one run.
type redisDeployments struct {
	dir  string // parent of every process's directory
	byID map[string]*redisDeployment
}

func newRedisDeployments(dir string) *redisDeployments {
	return &redisDeployments{dir: dir, byID: map[string]*redisDeployment{}}
}

// redisTools returns the executables a deployment kind needs.
func redisTools(kind string) []string {
	switch kind {
	case redisSentinel:
		return []string{"redis-server", "redis-sentinel"}
	case redisCluster:
		return []string{"redis-server", "redis-cli"}
	default:
		return []string{"redis-server"}
	}
}

// missingRedisTools returns the tools of kinds not found in PATH, with the
// Debian package of each.
func missingRedisTools(kinds []string) []string {
	pkg := map[string]string{"redis-server": "redis-server", "redis-sentinel": "redis-sentinel", "redis-cli": "redis-tools"}
	var out []string
	for _, k := range kinds {
		for _, tool := range redisTools(k) {
			if _, err := exec.LookPath(tool); err != nil && !slices.Contains(out, tool+" (apt-get install -y "+pkg[tool]+")") {
				out = append(out, tool+" (apt-get install -y "+pkg[tool]+")")
			}
		}
	}
	return out
}

// start starts the deployment kind, unless it runs already.
func (ds *redisDeployments) start(ctx context.Context, kind string) (*redisDeployment, error) {
	if d := ds.byID[kind]; d != nil {
		return d, nil
	}
	d := &redisDeployment{kind: kind}
	ds.byID[kind] = d // stop() stops whatever part of it started
	var err error
	switch kind {
	case redisOne:
		err = ds.startOne(ctx, d)
	case redisSentinel:
		err = ds.startSentinel(ctx, d)
	case redisCluster:
		err = ds.startCluster(ctx, d)
	default:
		err = fmt.Errorf("unknown Redis deployment %q", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("starting the %s deployment: %w", kind, err)
	}
	return d, nil
}

// get returns the started deployment kind, or nil.
func (ds *redisDeployments) get(kind string) *redisDeployment {
	if ds == nil {
		return nil
	}
	return ds.byID[kind]
}

// stop ends every process of every deployment: SIGTERM, then SIGKILL for
// those still running after 3 s.
func (ds *redisDeployments) stop() {
	if ds == nil {
		return
	}
	var all []*redisProcess
	for _, d := range ds.byID {
		all = append(all, d.processes()...)
	}
	for _, p := range all {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(3 * time.Second)
	for _, p := range all {
		select {
		case <-p.done:
		case <-deadline:
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func (ds *redisDeployments) startOne(ctx context.Context, d *redisDeployment) error {
	p, err := ds.server(ctx, "redis", nil)
	if err != nil {
		return err
	}
	d.primaries = append(d.primaries, p)
	d.url = "redis://" + p.addr + "/0"
	return nil
}

func (ds *redisDeployments) startSentinel(ctx context.Context, d *redisDeployment) error {
	primary, err := ds.server(ctx, "sentinel-primary", nil)
	if err != nil {
		return err
	}
	d.primaries = append(d.primaries, primary)
	pHost, pPort, _ := strings.Cut(primary.addr, ":")
	replica, err := ds.server(ctx, "sentinel-replica", []string{"--replicaof", pHost, pPort})
	if err != nil {
		return err
	}
	d.replicas = append(d.replicas, replica)
	if err := waitFor(ctx, "the replica's initial sync", func() bool { return inSync(ctx, replica.addr) }); err != nil {
		return err
	}
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		return err
	}
	for i := range 3 {
		s, err := ds.process(ctx, fmt.Sprintf("sentinel-%d", i+1), func(port int, dir string) ([]string, error) {
			conf := filepath.Join(dir, "sentinel.conf")
			return []string{bin, conf}, os.WriteFile(conf, fmt.Appendf(nil, sentinelConfig, port, dir, pHost, pPort), 0o600)
		})
		if err != nil {
			return err
		}
		d.sentinels = append(d.sentinels, s)
	}
	// Every sentinel knows the replica and the two other sentinels.
	want := "slaves=1,sentinels=3"
	err = waitFor(ctx, "the sentinels to find the replica and each other", func() bool {
		for _, s := range d.sentinels {
			if !strings.Contains(redisInfo(ctx, s.addr, "sentinel")["master0"], want) {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	d.url = fmt.Sprintf("redis://%s/0?master_name=%s&addr=%s&addr=%s", d.sentinels[0].addr, sentinelMaster, d.sentinels[1].addr, d.sentinels[2].addr)
	return nil
}

func (ds *redisDeployments) startCluster(ctx context.Context, d *redisDeployment) error {
	var nodes []*redisProcess
	args := []string{"--cluster", "create"}
	for i := range 6 {
		p, err := ds.server(ctx, fmt.Sprintf("cluster-%d", i+1), clusterNodeArgs)
		if err != nil {
			return err
		}
		nodes = append(nodes, p)
		args = append(args, p.addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		d.primaries = nodes // stopped with the rest
		return fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	err := waitFor(ctx, "every node to report cluster_state:ok", func() bool {
		for _, n := range nodes {
			if !strings.Contains(redisDo(ctx, n.addr, "CLUSTER", "INFO"), "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		if redisInfo(ctx, n.addr, "replication")["role"] == "master" {
			d.primaries = append(d.primaries, n)
		} else {
			d.replicas = append(d.replicas, n)
		}
	}
	if err != nil {
		return err
	}
	if len(d.primaries) != 3 || len(d.replicas) != 3 {
		return fmt.Errorf("the cluster has %d primaries and %d replicas, want 3 and 3", len(d.primaries), len(d.replicas))
	}
	for _, r := range d.replicas {
		if err := waitFor(ctx, "the replica "+r.addr+" to sync", func() bool { return inSync(ctx, r.addr) }); err != nil {
			return err
		}
	}
	d.url = "redis://" + d.primaries[0].addr + "?addr=" + d.primaries[1].addr + "&addr=" + d.primaries[2].addr
	return nil
}

// server starts a redis-server with redisServerArgs and extra.
func (ds *redisDeployments) server(ctx context.Context, name string, extra []string) (*redisProcess, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	return ds.process(ctx, name, func(port int, dir string) ([]string, error) {
		args := append([]string{bin, "--port", strconv.Itoa(port), "--dir", dir}, redisServerArgs...)
		return append(args, extra...), nil
	})
}

// process starts the command argv returns for a free port and a new
// directory of its own, and waits until it answers PING. A port taken by
// another process between the choice and the start is tried again with
// another.
func (ds *redisDeployments) process(ctx context.Context, name string, argv func(port int, dir string) ([]string, error)) (*redisProcess, error) {
	dir, err := os.MkdirTemp(ds.dir, name+"-")
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args, err := argv(port, dir)
		if err != nil {
			return nil, err
		}
		p := &redisProcess{addr: "127.0.0.1:" + strconv.Itoa(port), log: filepath.Join(dir, "output.log"), done: make(chan struct{})}
		lf, err := os.Create(p.log)
		if err != nil {
			return nil, err
		}
		p.cmd = exec.Command(args[0], args[1:]...)
		p.cmd.Stdout, p.cmd.Stderr = lf, lf
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := p.cmd.Start(); err != nil {
			lf.Close()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		go func() {
			p.cmd.Wait()
			lf.Close()
			close(p.done)
		}()
		err = waitFor(ctx, name+" to answer PING", func() bool {
			select {
			case <-p.done:
				return true
			default:
			}
			return redisDo(ctx, p.addr, "PING") == "PONG"
		})
		select {
		case <-p.done:
			if attempt < 3 && ctx.Err() == nil {
				continue // e.g. "Address already in use"
			}
			return nil, fmt.Errorf("%s exited: %s", name, tail(p.log))
		default:
		}
		if err != nil {
			p.cmd.Process.Kill()
			<-p.done
			return nil, fmt.Errorf("%w: %s", err, tail(p.log))
		}
		return p, nil
	}
}

// processes returns every process of the deployment.
func (d *redisDeployment) processes() []*redisProcess {
	return slices.Concat(d.primaries, d.replicas, d.sentinels)
}

// pids returns the process IDs of the deployment's processes, whose CPU
// time counts as the row's helpers'.
func (d *redisDeployment) pids() []int {
	var out []int
	for _, p := range d.processes() {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

// describe says what the deployment is, for the report.
func (d *redisDeployment) describe() string {
	switch d.kind {
	case redisSentinel:
		return "a primary and one replica (`--replicaof`), watched by three `redis-sentinel` processes (quorum 2, `down-after-milliseconds` 60000); URL `redis://SENTINEL1/0?master_name=" + sentinelMaster + "&addr=SENTINEL2&addr=SENTINEL3`"
	case redisCluster:
		return "a Redis Cluster of three primaries with one replica each (`" + strings.Join(clusterNodeArgs, " ") + "`, joined by `redis-cli --cluster create … --cluster-replicas 1`); URL `redis://PRIMARY1?addr=PRIMARY2&addr=PRIMARY3`"
	default:
		return "one redis-server; URL `redis://127.0.0.1:PORT/0`"
	}
}

// reset empties the deployment before a new server process uses it:
// FLUSHALL on every primary, WAIT until its replicas have applied it, then
// BGREWRITEAOF on every node and a wait until the rewrites are over, so
// that the append-only files do not grow over the run and no rewrite
// overlaps a measured window.
func (d *redisDeployment) reset(ctx context.Context) error {
	for _, p := range d.primaries {
		c := redisClient(p.addr)
		err := c.FlushAll(ctx).Err()
		if err == nil {
			replicas, _ := strconv.Atoi(redisInfo(ctx, p.addr, "replication")["connected_slaves"])
			if replicas > 0 {
				err = c.Do(ctx, "WAIT", replicas, 10000).Err()
			}
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("emptying Redis %s: %w", p.addr, err)
		}
	}
	nodes := slices.Concat(d.primaries, d.replicas)
	for _, n := range nodes {
		c := redisClient(n.addr)
		err := c.BgRewriteAOF(ctx).Err()
		c.Close()
		if err != nil && !strings.Contains(err.Error(), "already in progress") {
			return fmt.Errorf("BGREWRITEAOF on %s: %w", n.addr, err)
		}
	}
	return waitFor(ctx, "the append-only files' rewrite", func() bool {
		for _, n := range nodes {
			m := redisInfo(ctx, n.addr, "persistence")
			if m["aof_rewrite_in_progress"] != "0" || m["aof_rewrite_scheduled"] != "0" {
				return false
			}
		}
		return true
	})
}

// waitFor polls ok every 20 ms until it holds; an error names what after
// redisReady or when ctx ends.
func waitFor(ctx context.Context, what string, ok func() bool) error {
	deadline := time.Now().Add(redisReady)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %v for %s", redisReady, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// redisClient returns a client of the one server at addr, without
// retries: a poll tries again on its own.
func redisClient(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, PoolSize: 1})
}

// redisDo sends one command to addr and returns its answer as text ("" on
// any error).
func redisDo(ctx context.Context, addr string, args ...any) string {
	c := redisClient(addr)
	defer c.Close()
	s, err := c.Do(ctx, args...).Text()
	if err != nil {
		return ""
	}
	return s
}

// redisInfo returns the fields of an INFO section of addr (empty on any
// error).
func redisInfo(ctx context.Context, addr, section string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(redisDo(ctx, addr, "INFO", section), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// inSync reports whether the replica at addr has its link to the primary
// up and its initial sync over.
func inSync(ctx context.Context, addr string) bool {
	m := redisInfo(ctx, addr, "replication")
	return m["master_link_status"] == "up" && m["master_sync_in_progress"] == "0"
}

// errNoDeployment is returned for a row whose deployment was not started.
var errNoDeployment = errors.New("its Redis deployment is not running")

// deployments writes what the Redis placeholders of the servers' commands
// stood for in this run.
func (r *report) deployments(b *strings.Builder) {
	var kinds []string
	for _, row := range r.rows {
		if row.spec.redis != "" && !slices.Contains(kinds, row.spec.redis) {
			kinds = append(kinds, row.spec.redis)
		}
	}
	if len(kinds) == 0 {
		return
	}
	fmt.Fprintf(b, "\nThe Redis deployments, started by the benchmark on free loopback ports for the whole run, and emptied (FLUSHALL, then BGREWRITEAOF) before each server process; every redis-server (%s) runs with `%s`:\n\n",
		redisVersion(), shellJoin(redisServerArgs))
	for _, k := range kinds {
		if d := r.fleet.get(k); d != nil {
			fmt.Fprintf(b, "- `%s`: %s\n", redisPlaceholder(k), d.describe())
		}
	}
	fmt.Fprintf(b, "\n")
}

// redisVersion returns the first line of `redis-server --version`.
func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "version unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
