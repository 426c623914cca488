// Child processes of a test: their output, and their end with the test.

package testenv

import (
	"bytes"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a child process started by StartProcess: its stdout and
// stderr go, interleaved, to one buffer the test can read while it runs.
// It is killed, with every process it started, when the test ends.
type Process struct {
	name string
	cmd  *exec.Cmd
	out  *buffer
	done chan struct{} // closed when the process has exited
	err  error         // the exit status; read after done is closed
}

// StartProcess starts name with args in the test's working directory and
// environment; see StartCmd.
func StartProcess(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	return StartCmd(t, exec.Command(name, args...))
}

// StartCmd starts cmd (whose Dir and Env the caller may have set; its
// Stdout, Stderr and SysProcAttr are replaced) in a process group of its
// own. At the test's cleanup the whole group gets SIGKILL; if the test
// failed, the output is written to the test log; and output containing a
// race detector report ("WARNING: DATA RACE") fails the test. It calls
// t.Fatal when the process cannot start.
func StartCmd(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{name: cmd.Path, cmd: cmd, out: newBuffer(), done: make(chan struct{})}
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Bounds Wait when a grandchild the group kill missed holds the pipes.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("testenv: %s did not exit within 10s of SIGKILL", p.name)
		}
		out := p.Output()
		if strings.Contains(out, "WARNING: DATA RACE") {
			t.Errorf("testenv: %s reported a data race", p.name)
		}
		if t.Failed() {
			t.Logf("output of %s %s:\n%s", p.name, strings.Join(cmd.Args[1:], " "), out)
		}
	})
	return p
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output returns everything the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// Done returns a channel closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns its exit status as
// exec.Cmd.Wait does (nil for exit code 0, an *exec.ExitError otherwise).
// It may be called any number of times, from any goroutine.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Kill sends SIGKILL to the process and every process in its group. A
// process that has already exited is not an error.
func (p *Process) Kill() {
	err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		p.cmd.Process.Kill()
	}
}

// Signal sends sig to the process alone (not its group), e.g. SIGTERM to
// test a graceful shutdown. It returns os.ErrProcessDone once the process
// has exited.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// WaitFor waits until the output matches the regular expression pattern
// and returns the first match and its submatches (as FindStringSubmatch).
// It calls t.Fatal, with the output, when timeout passes first or the
// process exits without a match.
func (p *Process) WaitFor(t testing.TB, pattern string, timeout time.Duration) []string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		out, changed := p.out.snapshot()
		if m := re.FindStringSubmatch(out); m != nil {
			return m
		}
		select {
		case <-changed:
		case <-p.done:
			if m := re.FindStringSubmatch(p.Output()); m != nil {
				return m
			}
			t.Fatalf("testenv: %s exited (%v) before its output matched %q; output:\n%s", p.name, p.err, pattern, p.Output())
		case <-deadline.C:
			t.Fatalf("testenv: %s: no output matching %q within %v; output:\n%s", p.name, pattern, timeout, p.Output())
		}
	}
}

// ServeURL waits, up to 30 seconds, for the text-format log line a server
// of this module writes once it listens (`msg=serving url=http://…`, as
// `tidemark serve` and examples/everything log it, with the address
// resolved, so --addr 127.0.0.1:0 works) and returns the URL. It calls
// t.Fatal when the line does not come or the URL does not parse.
func ServeURL(t testing.TB, p *Process) string {
	t.Helper()
	m := p.WaitFor(t, `msg=serving url=(\S+)`, 30*time.Second)
	if _, err := url.Parse(m[1]); err != nil {
		t.Fatalf("testenv: %s logged an invalid URL: %v", p.name, err)
	}
	return m[1]
}

// buffer is an io.Writer that keeps everything written to it and tells
// waiters when it grows.
type buffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced on each Write
}

func newBuffer() *buffer { return &buffer{changed: make(chan struct{})} }

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return len(p), nil
}

func (b *buffer) String() string {
	s, _ := b.snapshot()
	return s
}

// snapshot returns the contents and a channel closed at the next Write.
func (b *buffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String(), b.changed
}
