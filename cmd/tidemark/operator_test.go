package main

// The operator's listener (--metrics-addr) as a browser page, a scraper and
// a person with curl meet it: the Host and Origin checks of the MCP
// listener, content negotiation of /metrics, and the methods it serves.

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// operatorRequest sends method path to the operator's listener at addr
// with the header lines of hdr ("Host" sets the request's host) and
// returns the answer, its body read.
func operatorRequest(t *testing.T, method, addr, path string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// TestOperatorListenerChecksHostAndOrigin: every endpoint of the operator's
// listener refuses a foreign Host (a DNS-rebinding page) with 403
// host_forbidden and a foreign Origin with 403 origin_forbidden, as the MCP
// listener does, and serves the loopback names.
func TestOperatorListenerChecksHostAndOrigin(t *testing.T) {
	_, _, addr := startObserved(t, nil)
	awaitReady(t, addr, http.StatusOK, "", 10*time.Second)
	_, port, _ := net.SplitHostPort(addr)
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/debug/sessions", "/debug/sessions/ABC", "/debug/tasks"} {
		for _, tc := range []struct {
			hdr    map[string]string
			status int
			reason string
		}{
			{map[string]string{"Host": "evil.example"}, http.StatusForbidden, "host_forbidden"},
			{map[string]string{"Host": "evil.example:" + port}, http.StatusForbidden, "host_forbidden"},
			{map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden, "origin_forbidden"},
			{map[string]string{"Host": "localhost:" + port}, http.StatusOK, ""},
			{map[string]string{"Host": "127.0.0.1:" + port}, http.StatusOK, ""},
			{map[string]string{"Host": "[::1]:" + port}, http.StatusOK, ""},
			{map[string]string{"Host": "localhost:" + port, "Origin": "http://localhost:3000"}, http.StatusOK, ""},
		} {
			resp, body := operatorRequest(t, http.MethodGet, addr, path, tc.hdr)
			want := tc.status
			if path == "/debug/sessions/ABC" && want == http.StatusOK {
				want = http.StatusNotFound // no session has that prefix
			}
			if resp.StatusCode != want {
				t.Errorf("GET %s %v: %d %s, want %d", path, tc.hdr, resp.StatusCode, body, want)
				continue
			}
			if tc.reason == "" {
				continue
			}
			e, err := mcptest.ParseError(body)
			if err != nil || e.Reason != tc.reason || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("GET %s %v: body %s (%v), want a JSON-RPC error with reason %s", path, tc.hdr, body, err, tc.reason)
			}
		}
	}
}
