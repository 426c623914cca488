// Package redistest runs a real redis-server for tests: on a free loopback
// port, with its data directory in the test's temporary directory, killed
// when the test ends. A test can kill it (SIGKILL, as a crash) and start it
// again on the same port and directory, which with append-only persistence
// on brings back everything Redis acknowledged.
//
// redis-server missing from PATH ends the test as testenv.NeedRedis does:
// a skip saying how to install it (scripts/deps.sh does, with apt-get), or
// a failure when the environment variable CI is set.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// Options configures a Server.
type Options struct {
	// AppendOnly turns on append-only persistence with `appendfsync always`:
	// Redis writes every command to its AOF and fsyncs it before it
	// replies, so a restart after SIGKILL keeps every acknowledged write.
	// Default (false): no persistence at all (`save ""`, `appendonly no`);
	// a restart starts empty.
	AppendOnly bool

	// ReplicaOf makes the server a replica of the primary at this
	// host:port (`replicaof`), syncing without the diskless-sync delay.
	// Start returns once the server answers PING, not once it is in sync:
	// see WaitInSync. Default (""): a primary.
	ReplicaOf string

	// Cluster starts the server with `cluster-enabled yes` and a node
	// timeout of 1 s, and replicas that fail over however long their link
	// was down, for StartCluster.
	Cluster bool

	// Password makes the server require it (`requirepass`): a client
	// must AUTH with it, e.g. through a URL redis://:PASSWORD@HOST:PORT/0.
	// Default (""): no password.
	Password string
}

// readyTimeout bounds how long Start waits for redis-server to accept
// connections and finish loading its data set.
const readyTimeout = 20 * time.Second

// Server is one redis-server process (and, after Restart, its successors)
// owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	opts Options
	proc *testenv.Process
}

// Start starts redis-server on 127.0.0.1 at a free port, with its working
// directory (AOF files) in t.TempDir(), and waits until it answers PING
// with PONG. The process is killed when the test ends. When redis-server
// is not installed it ends the test as testenv.NeedRedis does; it calls
// t.Fatal if redis-server does not become ready within 20 s.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	testenv.NeedRedis(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server: %v", err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), opts: opts}
	// The port is picked by the kernel, released and handed to
	// redis-server; another process may grab it in between, so a failed
	// start is retried with a new port.
	for attempt := 1; ; attempt++ {
		s.port = testenv.FreePort(t)
		if s.start() {
			return s
		}
		if attempt == 3 {
			t.Fatalf("redistest: redis-server did not start on a free port after %d attempts; output:\n%s", attempt, s.proc.Output())
		}
	}
}

// Addr returns the server's host:port (127.0.0.1:PORT).
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL returns redis://127.0.0.1:PORT/0, the form go-redis's ParseURL and
// the store's Options.URL take.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Pid returns the process id of the running redis-server.
func (s *Server) Pid() int { return s.proc.Pid() }

// Kill sends SIGKILL to redis-server and waits for it to exit: a crash,
// with no chance to flush anything. Connections to it are reset.
func (s *Server) Kill() {
	s.t.Helper()
	s.proc.Kill()
	select {
	case <-s.proc.Done():
	case <-time.After(10 * time.Second):
		s.t.Fatalf("redistest: redis-server pid %d did not exit within 10s of SIGKILL", s.proc.Pid())
	}
}

// Stop asks redis-server to shut down (SIGTERM), as an operator would, and
// waits for it to exit.
func (s *Server) Stop() {
	s.t.Helper()
	if err := s.proc.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("redistest: SIGTERM redis-server: %v", err)
	}
	select {
	case <-s.proc.Done():
	case <-time.After(10 * time.Second):
		s.t.Fatalf("redistest: redis-server pid %d did not exit within 10s of SIGTERM", s.proc.Pid())
	}
}

// Restart starts a new redis-server on the same port and directory, after
// Kill or Stop (it kills a running one first), and waits until it has
// loaded its data set and answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if !s.start() {
		s.t.Fatalf("redistest: redis-server did not restart on port %d; output:\n%s", s.port, s.proc.Output())
	}
}

// start runs redis-server on s.port and reports whether it became ready.
func (s *Server) start() bool {
	s.t.Helper()
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--save", "",
		"--logfile", "",
		// Background rewrites fork a child; tests keep the process tree flat.
		"--auto-aof-rewrite-percentage", "0",
	}
	if s.opts.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, "--repl-diskless-sync-delay", "0")
	if host, port, ok := strings.Cut(s.opts.ReplicaOf, ":"); ok {
		args = append(args, "--replicaof", host, port)
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	if s.opts.Cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0")
	}
	s.proc = testenv.StartCmd(s.t, exec.Command(s.bin, args...))
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.proc.Done():
			return false // e.g. the port was taken: "Address already in use"
		default:
		}
		if ping(s.Addr(), s.opts.Password) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// ping reports whether the server at addr answers PING with +PONG (a server
// still loading its AOF answers -LOADING instead), after AUTH with
// password when it is not empty.
func ping(addr, password string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(c)
	if password != "" {
		if _, err := fmt.Fprintf(c, "AUTH %s\r\n", password); err != nil {
			return false
		}
		if line, err := r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "+OK" {
			return false
		}
	}
	if _, err := fmt.Fprint(c, "PING\r\n"); err != nil {
		return false
	}
	line, err := r.ReadString('\n')
	return err == nil && strings.TrimSpace(line) == "+PONG"
}
