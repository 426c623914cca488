package interop

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// backend is a `tidemark serve` process on a free loopback port, behind a
// relay, that a test restarts the way an operator's process dies: kill -9
// or SIGTERM, then the same command again.
type backend struct {
	args  []string
	proc  *testenv.Process
	relay *relay
}

// store says where a backend keeps its sessions.
type store int

const (
	// memoryStore is the default: a restart forgets every session, whose
	// tokens then answer 404 session_not_found.
	memoryStore store = iota
	// durableStore is --data-dir: a restart keeps every session, which
	// continues at generation+1; its old cursors answer 409
	// generation_mismatch.
	durableStore
)

// serverRetry is the SSE retry field the backend sends, so clients that
// honour it reconnect within a tenth of a second of a cut.
const serverRetry = "100ms"

// startBackend starts `tidemark serve --retry 100ms` with the given store
// and extra flags, and a relay in front of it.
func startBackend(t *testing.T, st store, extra ...string) *backend {
	t.Helper()
	args := []string{"serve", "--addr", "127.0.0.1:0", "--retry", serverRetry}
	if st == durableStore {
		args = append(args, "--data-dir", filepath.Join(t.TempDir(), "data"))
	}
	b := &backend{args: append(args, extra...), relay: newRelay(t)}
	b.start(t)
	return b
}

func (b *backend) start(t *testing.T) {
	t.Helper()
	b.proc = testenv.StartProcess(t, testenv.BuildTidemark(t), b.args...)
	b.relay.setTarget(t, testenv.ServeURL(t, b.proc))
}

// URL is the MCP endpoint clients use (the relay's).
func (b *backend) URL() string { return b.relay.URL() }

// restart stops the server with sig (SIGKILL: as kill -9; SIGTERM: the
// graceful shutdown, whose grace the test set with --shutdown-grace),
// waits for it to exit, and starts it again with the same flags. Requests
// that arrive meanwhile wait in the relay, so a client's reconnection
// reaches the new process. It returns when the new process serves.
func (b *backend) restart(t *testing.T, sig syscall.Signal) {
	t.Helper()
	b.relay.hold()
	if sig == syscall.SIGKILL {
		b.proc.Kill()
	} else if err := b.proc.Signal(sig); err != nil {
		t.Fatalf("signal tidemark serve: %v", err)
	}
	select {
	case <-b.proc.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("tidemark serve still running 20s after %v", sig)
	}
	b.start(t)
}

// loseCall runs call, a long countdown, restarts b with sig after the
// countdown's killAfter-th progress notification, and returns call's
// error and how long after the new process served it came.
func (b *backend) loseCall(t *testing.T, sig syscall.Signal, call func() error) (error, time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	b.relay.waitProgress(t, killAfter, clientBound)
	b.restart(t, sig)
	restarted := time.Now()
	select {
	case err := <-done:
		return err, time.Since(restarted)
	case <-time.After(clientBound):
		t.Fatalf("the call still runs %v after the restart", clientBound)
		return nil, 0
	}
}

// toolCall calls a tool with a client under test and returns the text of
// its result.
type toolCall func(name string, args map[string]any) (string, error)

// checkCutFailsAtOnce calls the countdown, whose stream the relay cuts,
// and asserts that the call fails at once and that the next call (an
// echo) works. It returns the countdown's error.
func checkCutFailsAtOnce(t *testing.T, call toolCall) error {
	t.Helper()
	start := time.Now()
	_, err := call("countdown", countdownArgs(steps))
	if err == nil {
		t.Errorf("the cut call succeeded")
	}
	if d := time.Since(start); d > fastFail*time.Millisecond {
		t.Errorf("the cut call failed after %v, want at once (within %d ms)", d, fastFail)
	}
	if text, err := call("echo", map[string]any{"text": "after"}); err != nil || text != "after" {
		t.Errorf("call after the cut: %q, %v; want %q", text, err, "after")
	}
	return err
}
