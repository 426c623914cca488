package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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

// TestReadyOtherServer: a 200 from a listener that is not tidemark serve's
// operator's listener (a page, another program's readiness) is not taken
// for readiness: exit 1, and stderr says what answered and where to point
// --metrics-addr (regression: any 200 printed "ready").
func TestReadyOtherServer(t *testing.T) {
	for _, tc := range []struct{ body, stderr string }{
		{"garbage not json", `answered 200 OK with the body "garbage not json", not the JSON of tidemark serve's operator's listener`},
		{`{"ready":false}`, `answered 200 OK with the body "{\"ready\":false}", not the JSON of tidemark serve's operator's listener`},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, tc.body)
		}))
		var stdout, stderr bytes.Buffer
		code := run([]string{"ready", "--metrics-addr", srv.Listener.Addr().String()}, &stdout, &stderr)
		srv.Close()
		if code != 1 || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("body %q: exit %d, stdout %q, stderr %q; want exit 1, no stdout, stderr with %q", tc.body, code, stdout.String(), stderr.String(), tc.stderr)
		}
	}
}
