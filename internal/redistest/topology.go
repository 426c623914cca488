package redistest

// topology.go starts the deployments that survive the loss of a server:
// a primary with replicas watched by three redis-sentinel processes
// (StartSentinels), and a Redis Cluster of primaries with a replica each
// (StartCluster), all on loopback ports, all killed when the test ends.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// MasterName is the name under which StartSentinels monitors the primary.
const MasterName = "tm"

// syncTimeout bounds how long a replica may take to sync, and a cluster
// to agree on its slots.
const syncTimeout = 20 * time.Second

// Info returns the fields of INFO section from the server (a sentinel
// too), e.g. Info("replication")["role"].
func (s *Server) Info(section string) map[string]string {
	s.t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	text, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, line := range strings.Split(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// WaitInSync waits until the replica s has its link to the primary up and
// has finished the initial sync; t.Fatal after 20 s.
func (s *Server) WaitInSync() {
	s.t.Helper()
	deadline := time.Now().Add(syncTimeout)
	for time.Now().Before(deadline) {
		if m := s.Info("replication"); m["master_link_status"] == "up" && m["master_sync_in_progress"] == "0" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: replica %s not in sync after %v: %v", s.Addr(), syncTimeout, s.Info("replication"))
}

// Pause stops the server's process (SIGSTOP) until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.proc.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %v to %s: %v", sig, s.Addr(), err)
	}
}

// Sentinels are three redis-sentinel processes watching one primary under
// MasterName, with a quorum of two and a down-after of one second, so a
// killed primary is replaced within a few seconds.
type Sentinels struct {
	t     testing.TB
	procs []*Server
}

// StartSentinels starts three sentinels watching primary. A missing
// redis-sentinel ends the test as testenv.NeedRedisSentinel does.
func StartSentinels(t testing.TB, primary *Server) *Sentinels {
	t.Helper()
	testenv.NeedRedisSentinel(t)
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		t.Fatalf("redistest: redis-sentinel: %v", err)
	}
	ss := &Sentinels{t: t}
	for i := range 3 {
		s := &Server{t: t, bin: bin, dir: t.TempDir()}
		for attempt := 1; ; attempt++ {
			s.port = testenv.FreePort(t)
			if s.startSentinel(primary.Addr()) {
				break
			}
			if attempt == 3 {
				t.Fatalf("redistest: sentinel %d did not start; output:\n%s", i, s.proc.Output())
			}
		}
		ss.procs = append(ss.procs, s)
	}
	return ss
}

// startSentinel writes a sentinel configuration (sentinels rewrite their
// file, so each has its own) and runs redis-sentinel on it.
func (s *Server) startSentinel(primary string) bool {
	host, port, _ := strings.Cut(primary, ":")
	conf := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
logfile ""
dir %s
sentinel monitor %s %s %s 2
sentinel down-after-milliseconds %[3]s 1000
sentinel failover-timeout %[3]s 10000
sentinel parallel-syncs %[3]s 1
`, s.port, s.dir, MasterName, host, port)
	path := filepath.Join(s.dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	s.proc = testenv.StartCmd(s.t, exec.Command(s.bin, path))
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.proc.Done():
			return false
		default:
		}
		if ping(s.Addr(), "") {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// URL returns the Sentinel URL of go-redis's ParseFailoverURL form:
// redis://S1/0?master_name=tm&addr=S2&addr=S3.
func (ss *Sentinels) URL() string {
	return fmt.Sprintf("redis://%s/0?master_name=%s&addr=%s&addr=%s",
		ss.procs[0].Addr(), MasterName, ss.procs[1].Addr(), ss.procs[2].Addr())
}

// WaitPrimary waits until every sentinel names addr as the primary (after
// a failover), and returns; t.Fatal after 30 s.
func (ss *Sentinels) WaitPrimary(addr string) {
	ss.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		agree := 0
		for _, s := range ss.procs {
			if strings.Contains(s.Info("sentinel")["master0"], "address="+addr+",") {
				agree++
			}
		}
		if agree == len(ss.procs) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	ss.t.Fatalf("redistest: sentinels do not name %s as primary after 30s: %v", addr, ss.procs[0].Info("sentinel"))
}

// Cluster is a Redis Cluster on loopback: Primaries[i] holds a third of
// the slots, Replicas[i] replicates it.
type Cluster struct {
	t         testing.TB
	Primaries []*Server
	Replicas  []*Server
}

// StartCluster starts three primaries and a replica of each with
// cluster-enabled, joins them with `redis-cli --cluster create
// --cluster-replicas 1`, and waits until every node reports
// cluster_state:ok and every replica is in sync.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	testenv.NeedRedisCLI(t)
	var nodes []*Server
	var addrs []string
	for range 6 {
		s := Start(t, Options{Cluster: true})
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c := &Cluster{t: t}
	for _, s := range nodes {
		s.waitClusterOK()
		if s.Info("replication")["role"] == "master" {
			c.Primaries = append(c.Primaries, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	for _, r := range c.Replicas {
		r.WaitInSync()
	}
	return c
}

// waitClusterOK waits until the node reports cluster_state:ok.
func (s *Server) waitClusterOK() {
	s.t.Helper()
	deadline := time.Now().Add(syncTimeout)
	for time.Now().Before(deadline) {
		if s.Info("cluster")["cluster_enabled"] == "1" && s.clusterState() == "ok" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: cluster node %s not ok after %v", s.Addr(), syncTimeout)
}

// clusterState returns the cluster_state field of CLUSTER INFO.
func (s *Server) clusterState() string {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	text, _ := c.ClusterInfo(ctx).Result()
	for _, line := range strings.Split(text, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cluster_state:"); ok {
			return v
		}
	}
	return ""
}

// URL returns the Cluster URL of go-redis's ParseClusterURL form, with
// every primary as a seed node: redis://P1?addr=P2&addr=P3.
func (c *Cluster) URL() string {
	return "redis://" + c.Primaries[0].Addr() + "?addr=" + c.Primaries[1].Addr() + "&addr=" + c.Primaries[2].Addr()
}

// ReplicaOf returns the replica of primary p.
func (c *Cluster) ReplicaOf(p *Server) *Server {
	c.t.Helper()
	_, port, _ := strings.Cut(p.Addr(), ":")
	for _, r := range c.Replicas {
		if r.Info("replication")["master_port"] == port {
			return r
		}
	}
	c.t.Fatalf("redistest: no replica of %s", p.Addr())
	return nil
}

// PrimaryFor returns the primary that holds key's slot.
func (c *Cluster) PrimaryFor(key string) *Server {
	c.t.Helper()
	cl := goredis.NewClient(&goredis.Options{Addr: c.Primaries[0].Addr(), MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		c.t.Fatalf("redistest: CLUSTER KEYSLOT %s: %v", key, err)
	}
	shards, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		c.t.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	for _, sh := range shards {
		if int64(sh.Start) <= slot && slot <= int64(sh.End) {
			for _, p := range c.Primaries {
				if p.Addr() == sh.Nodes[0].Addr {
					return p
				}
			}
		}
	}
	c.t.Fatalf("redistest: no primary holds slot %d", slot)
	return nil
}

// WaitReady waits until every sentinel knows the primary's replicas
// (replicas of them) and the two other sentinels, so that a failover can
// begin as soon as the primary is down; t.Fatal after 30 s.
func (ss *Sentinels) WaitReady(replicas int) {
	ss.t.Helper()
	want := fmt.Sprintf("slaves=%d,sentinels=3", replicas)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ready := 0
		for _, s := range ss.procs {
			if strings.Contains(s.Info("sentinel")["master0"], want) {
				ready++
			}
		}
		if ready == len(ss.procs) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	ss.t.Fatalf("redistest: sentinels not ready (want %s) after 30s: %v", want, ss.procs[0].Info("sentinel"))
}

// Do sends one command to the server and returns its error.
func (s *Server) Do(args ...any) error {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Err()
}

// WaitRole waits until INFO replication reports role (master or slave),
// and a cluster node also cluster_state:ok; t.Fatal after 20 s.
func (s *Server) WaitRole(role string) {
	s.t.Helper()
	deadline := time.Now().Add(syncTimeout)
	for time.Now().Before(deadline) {
		if s.Info("replication")["role"] == role && (!s.opts.Cluster || s.clusterState() == "ok") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: %s not %s after %v: %v", s.Addr(), role, syncTimeout, s.Info("replication"))
}

// WaitReplicaListed waits until replica is a replica of the primary s
// that every write on s waits for: s's INFO replication lists it online
// and, on a Cluster, CLUSTER REPLICAS of s lists it without the fail flag
// (the replicas the store counts, store/redis replicate.go); t.Fatal
// after 20 s.
func (s *Server) WaitReplicaListed(replica *Server) {
	s.t.Helper()
	deadline := time.Now().Add(syncTimeout)
	for time.Now().Before(deadline) {
		if s.online(replica) && (!s.opts.Cluster || s.clusterListed(replica)) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: %s not an online, listed replica of %s after %v: %v", replica.Addr(), s.Addr(), syncTimeout, s.Info("replication"))
}

// online reports whether s's INFO replication lists replica with
// state=online (fields slaveN: ip=…,port=…,state=…).
func (s *Server) online(replica *Server) bool {
	port := fmt.Sprintf("port=%d,", replica.port)
	for k, v := range s.Info("replication") {
		if strings.HasPrefix(k, "slave") && strings.Contains(v, port) && strings.Contains(v, "state=online") {
			return true
		}
	}
	return false
}

// clusterListed reports whether CLUSTER REPLICAS of the node s names
// replica without the fail flag.
func (s *Server) clusterListed(replica *Server) bool {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return false
	}
	lines, err := c.Do(ctx, "CLUSTER", "REPLICAS", id).StringSlice()
	if err != nil {
		return false
	}
	for _, line := range lines {
		// <id> <ip:port@cport> <flags> …
		f := strings.Fields(line)
		if len(f) > 2 && strings.HasPrefix(f[1], replica.Addr()+"@") && !strings.Contains(f[2], "fail") {
			return true
		}
	}
	return false
}

// WaitCaughtUp reads the replication offset of primary once and waits
// until the replica s has processed the stream up to it: s then holds
// every write primary took before the call; t.Fatal after 20 s.
func (s *Server) WaitCaughtUp(primary *Server) {
	s.t.Helper()
	want, err := strconv.ParseInt(primary.Info("replication")["master_repl_offset"], 10, 64)
	if err != nil {
		s.t.Fatalf("redistest: master_repl_offset of %s: %v", primary.Addr(), err)
	}
	deadline := time.Now().Add(syncTimeout)
	for time.Now().Before(deadline) {
		if got, err := strconv.ParseInt(s.Info("replication")["slave_repl_offset"], 10, 64); err == nil && got >= want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: replica %s did not reach offset %d of %s after %v: %v", s.Addr(), want, primary.Addr(), syncTimeout, s.Info("replication"))
}

// FailoverAndBack replaces the Cluster primary p twice, as an operator's
// forced failover followed by a crash would: CLUSTER FAILOVER FORCE on
// its replica, which becomes primary and p its replica; then, once p is
// listed as that replica (every later write waits for it) and holds every
// write the new primary took before (which could not wait for it), the new
// primary is killed (SIGKILL) and p is promoted back. It returns when p is
// a primary again; t.Fatal when a step does not happen within 20 s.
func (c *Cluster) FailoverAndBack(p *Server) {
	c.t.Helper()
	second := c.ReplicaOf(p)
	if err := second.Do("CLUSTER", "FAILOVER", "FORCE"); err != nil {
		c.t.Fatalf("redistest: CLUSTER FAILOVER FORCE on %s: %v", second.Addr(), err)
	}
	second.WaitRole("master")
	p.WaitInSync()
	second.WaitReplicaListed(p)
	p.WaitCaughtUp(second)
	second.Kill()
	p.WaitRole("master")
}
