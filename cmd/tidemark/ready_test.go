package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/replay"
)

// TestReady: `tidemark ready` exits 0 printing "ready" while the operator's
// listener's /readyz answers 200, and 1 naming /readyz's reason and error
// while it answers 503, or when nothing listens at --metrics-addr; usage
// errors exit 2. This is the health check of the compose fleet
// (deploy/compose), whose image has no shell or HTTP client.
func TestReady(t *testing.T) {
	var notReady atomic.Pointer[admin.NotReadyError]
	srv := httptest.NewServer(admin.Handler(admin.Options{Ready: []func(context.Context) error{
		func(context.Context) error {
			if e := notReady.Load(); e != nil {
				return e
			}
			return nil
		},
	}}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	// A port nothing listens on: a listener closed at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	for _, tc := range []struct {
		name       string
		notReady   *admin.NotReadyError
		args       []string
		code       int
		stdout     string
		stderrHas  string
		stderrNone bool
	}{
		{"ready", nil, []string{"--metrics-addr", addr}, 0, "ready\n", "", true},
		{"ready, a URL", nil, []string{"--metrics-addr", "http://" + addr + "/"}, 0, "ready\n", "", true},
		{"draining", &admin.NotReadyError{Reason: replay.ReasonShutdown, Err: errors.New("the server is shutting down")},
			[]string{"--metrics-addr", addr}, 1, "", "tidemark ready: not ready (503): shutdown: the server is shutting down\n", false},
		{"store down", &admin.NotReadyError{Reason: replay.ReasonUnavailable, Err: errors.New("the store cannot be reached: dial tcp: connection refused")},
			[]string{"--metrics-addr", addr, "--timeout", "2s"}, 1, "", "tidemark ready: not ready (503): unavailable: the store cannot be reached: dial tcp: connection refused\n", false},
		{"nothing listens", nil, []string{"--metrics-addr", closed}, 1, "", "(is tidemark serve running with --metrics-addr " + closed + "?)\n", false},
		{"no address", nil, nil, 2, "", "tidemark ready: --metrics-addr is required", false},
		{"an argument", nil, []string{"--metrics-addr", addr, "extra"}, 2, "", `tidemark ready: unexpected argument "extra"`, false},
		{"zero timeout", nil, []string{"--metrics-addr", addr, "--timeout", "0s"}, 2, "", "tidemark ready: --timeout 0s: want a positive duration", false},
	} {
		notReady.Store(tc.notReady)
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"ready"}, tc.args...), &stdout, &stderr)
		if code != tc.code || stdout.String() != tc.stdout || !strings.Contains(stderr.String(), tc.stderrHas) || (tc.stderrNone && stderr.Len() > 0) {
			t.Errorf("%s: tidemark ready %v: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
				tc.name, tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderrHas)
		}
	}
}
