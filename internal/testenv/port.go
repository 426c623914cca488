// port.go holds FreePort, for tests that must name a port before a process
// listens on it.

package testenv

import (
	"net"
	"testing"
)

// FreePort returns a loopback TCP port that was free a moment ago: a
// process started on it may still find it taken, and should be retried on
// another.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
