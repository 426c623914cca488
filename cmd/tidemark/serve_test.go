package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// TestServeRefusesMeaninglessFlags: flag values with no meaning exit 2 with
// a message naming the flag, before anything listens (regression: --path
// mcp panicked with a stack trace; --max-body-bytes 0 silently meant 4 MiB).
func TestServeRefusesMeaninglessFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--path", "mcp"}, `--path "mcp": want a URL path starting with /`},
		{[]string{"--path", ""}, `--path "": want a URL path starting with /`},
		{[]string{"--path", "/a b"}, `--path "/a b": want a URL path starting with /`},
		{[]string{"--max-body-bytes", "0"}, "--max-body-bytes 0: want a positive number of bytes"},
		{[]string{"--max-body-bytes", "-1"}, "--max-body-bytes -1: want a positive number of bytes"},
		{[]string{"--max-inflight-bytes", "1000", "--max-body-bytes", "4096"}, "--max-inflight-bytes 1000 is below twice --max-body-bytes 4096 (a body counts twice its size): a POST body of more than half of it could never be served, and would be told to retry for ever; " +
			"set --max-inflight-bytes to at least 8192 (or -1 for no bound), or lower --max-body-bytes"},
		{[]string{"--max-inflight-bytes", "8388607"}, "--max-inflight-bytes 8388607 is below twice --max-body-bytes 4194304"},
		{[]string{"--max-listens", "0"}, "--max-listens 0: want a positive number of streams, or -1 for no bound"},
		{[]string{"--max-listens", "-2"}, "--max-listens -2: want a positive number of streams, or -1 for no bound"},
		{[]string{"--max-sessions", "0"}, "--max-sessions 0: want a positive number of sessions"},
		{[]string{"--max-calls-per-session", "0"}, "--max-calls-per-session 0: want a positive number of requests"},
		{[]string{"--retention-events", "-5"}, "--retention-events -5: want a positive number, or -1 for no limit"},
		{[]string{"--retention-bytes", "0"}, "--retention-bytes 0: want a positive number, or -1 for no limit"},
		{[]string{"--retry", "0s"}, "--retry 0: want a positive duration, or a negative one for no retry field"},
		{[]string{"--shutdown-grace", "-1s"}, "--shutdown-grace -1s: want zero or a positive duration"},
		{[]string{"--max-processes", "0", "--stdio", "--", "cat"}, "--max-processes 0: want a positive number, or -1 for no limit"},
		{[]string{"--hibernate-after", "-1s"}, "--hibernate-after -1s: want a positive duration, or 0 for never"},
		{[]string{"--task-ttl", "2h"}, "--task-ttl 2h0m0s: want a positive duration of at most 1h0m0s"},
		{[]string{"--task-max", "0"}, "--task-max 0: want a positive number of tasks"},
		{[]string{"--redis", "redis://127.0.0.1:1/0", "--advertise-url", "http://:8080/mcp"},
			`--advertise-url "http://:8080/mcp": the host is empty: want an absolute http:// or https:// URL of this replica's MCP endpoint, which the other replicas reach`},
		{[]string{"--redis", "redis://127.0.0.1:1/0", "--advertise-url", "http://$(POD_IP):8080/mcp"},
			`--advertise-url "http://$(POD_IP):8080/mcp": holds "$(", a variable its environment did not expand (Kubernetes leaves $(VAR) as written when VAR is not in the container's env): want an absolute http:// or https:// URL`},
		{[]string{"--redis", "redis://127.0.0.1:1/0", "--advertise-url", "http://pod*ip:8080/mcp"},
			`--advertise-url "http://pod*ip:8080/mcp": the host "pod*ip" has characters a host name cannot have: want an absolute http:// or https:// URL`},
		{[]string{"--redis", "redis://127.0.0.1:1/0", "--advertise-url", "http://fd00::1:8080/mcp"},
			`--advertise-url "http://fd00::1:8080/mcp": want an absolute http:// or https:// URL`},
	} {
		var stderr bytes.Buffer
		code := run(append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...), &bytes.Buffer{}, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "goroutine") {
			t.Errorf("serve %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestServeUnknownPath: a path other than --path gets 404 with a JSON-RPC
// error body naming the endpoint (reason path_not_found), not net/http's
// plain-text 404. Unclean spellings of the endpoint are other paths too
// (regression: "//mcp" and "/x/../mcp" got http.ServeMux's 307 redirect to
// /mcp, found by a tester).
func TestServeUnknownPath(t *testing.T) {
	endpoint := startTidemarkServe(t)
	base := strings.TrimSuffix(endpoint, "/mcp")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/", "/mcp/", "/sse", "/mcp/extra", "//mcp", "/x/../mcp", "/mcp/."} {
		resp, err := noRedirect.Post(base+path, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		if err != nil {
			t.Fatal(err)
		}
		se := mcptest.ReadStatusError(resp)
		if se.Status != http.StatusNotFound || se.Reason() != "path_not_found" || se.Body.Code != -32600 {
			t.Fatalf("POST %s: HTTP %d reason %q code %d (%s), want 404 path_not_found -32600", path, se.Status, se.Reason(), se.Body.Code, se.RawBody)
		}
		if !strings.Contains(se.Body.Message, "the endpoint is /mcp") {
			t.Fatalf("POST %s: message %q does not name the endpoint", path, se.Body.Message)
		}
	}
}

// TestHelpNamesTheDemo: `tidemark help` names every tool of the demo
// server and its resource, as README.md does ("The demo server").
func TestHelpNamesTheDemo(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"help"}, &out, &bytes.Buffer{}); code != 0 {
		t.Fatalf("tidemark help: exit %d", code)
	}
	for _, name := range []string{"countdown", "echo", "confirm", "notify", "demo://readme"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("tidemark help does not name %s:\n%s", name, out.String())
		}
	}
}

// TestServeSessionlessOnly: `tidemark serve --protocol 2026-07-28` lists
// 2026-07-28 alone in server/discover, serves a 2026-07-28 tools/call, and
// answers an initialize 400 with the JSON-RPC error -32022 naming the
// version it serves (docs/operating.md, "Serving 2026-07-28 alone").
func TestServeSessionlessOnly(t *testing.T) {
	endpoint := startTidemarkServe(t, "--protocol", "2026-07-28")
	post := func(method, name, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if method != "" {
			req.Header.Set("MCP-Protocol-Version", "2026-07-28")
			req.Header.Set("Mcp-Method", method)
		}
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	if status, body := post("server/discover", "", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+meta+`}}`); status != http.StatusOK || !strings.Contains(body, `"supportedVersions":["2026-07-28"]`) {
		t.Errorf("server/discover: %d %s, want 200 with supportedVersions [2026-07-28]", status, body)
	}
	if status, body := post("tools/call", "echo", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},`+meta+`}}`); status != http.StatusOK || !strings.Contains(body, `"text":"hi"`) {
		t.Errorf("a 2026-07-28 echo: %d %s, want 200 with the text hi", status, body)
	}
	want := `{"jsonrpc":"2.0","id":3,"error":{"code":-32022,"message":"protocol version \"2025-11-25\" is not served here: this server serves 2026-07-28 alone, which has no initialize and no sessions; send each request with its version in params._meta and in MCP-Protocol-Version","data":{"reason":"protocol_version","requested":"2025-11-25","supported":["2026-07-28"]}}}`
	if status, body := post("", "", `{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`); status != http.StatusBadRequest || body != want {
		t.Errorf("initialize: %d %s\nwant 400 %s", status, body, want)
	}
}

// TestCheckHTTPURLAccepts: host names, IPv4 and bracketed IPv6 addresses
// (a zone included) pass the URL check that refuses empty hosts and
// unexpanded variables.
func TestCheckHTTPURLAccepts(t *testing.T) {
	for _, v := range []string{
		"http://10.0.0.1:8080/mcp", "https://tidemark-0.tidemark.default.svc:8080/mcp", "http://my_host/mcp",
		"http://[fd00::1]:8080/mcp", "http://[fe80::1%25eth0]:8080/mcp", "http://localhost/mcp?x=$HOME",
	} {
		if err := checkHTTPURL("advertise-url", v, "x"); err != nil {
			t.Errorf("%s: %v, want accepted", v, err)
		}
	}
}
