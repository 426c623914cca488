package main

// The usage errors of the --upstream flags of `tidemark serve`.

import (
	"bytes"
	"strings"
	"testing"
)

// TestServeUpstreamUsage: --upstream flags that cannot work exit 2 with a
// message naming what is wrong, before anything is served.
func TestServeUpstreamUsage(t *testing.T) {
	const up, tok = "http://127.0.0.1:1/mcp", "http://127.0.0.1:1/token"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", up, "--stdio", "--", "cat"}, "--upstream and --stdio exclude each other"},
		{[]string{"--upstream", up, "--upstream-header", "no colon"}, `tidemark serve: --upstream-header: want NAME: VALUE, e.g. "Authorization: Bearer TOKEN"`},
		{[]string{"--upstream", up, "--upstream-forward-header", "A: b"}, `want a header name, not "A: b"`},
		{[]string{"--upstream", up, "--upstream-timeout", "0s"}, "must be positive"},
		{[]string{"--upstream", "ftp://127.0.0.1/mcp"}, `--upstream "ftp://127.0.0.1/mcp": want an absolute http:// or https:// URL`},
		{[]string{"--upstream", up, "--upstream-forward-header", "Mcp-Session-Id"}, "header Mcp-Session-Id is set by the gateway itself"},
		{[]string{"--upstream", up, "--upstream-oauth-token-url", tok}, "want --upstream-oauth-client-id too"},
		{[]string{"--upstream", up, "--upstream-oauth-token-url", tok, "--upstream-oauth-client-id", "gw"}, "--upstream-oauth-client-id needs its secret"},
		{[]string{"--upstream", up, "--upstream-oauth-token-url", tok, "--upstream-oauth-client-id", "gw", "--upstream-oauth-client-secret-file", "/nonexistent"}, `--upstream-oauth-client-secret-file "/nonexistent": no such file`},
		{[]string{"--upstream", up, "--upstream-oauth-token-url", tok, "--upstream-oauth-client-id", "gw", "--upstream-forward-header", "authorization"}, "--upstream-forward-header Authorization and --upstream-oauth-token-url both set"},
		{[]string{"--upstream", up, "--upstream-oauth-token-url", tok, "--upstream-oauth-client-id", "gw", "--upstream-header", "Authorization: Bearer x"}, "--upstream-header Authorization and --upstream-oauth-token-url both set"},
		{[]string{"--upstream", up, "--upstream-oauth-token-url", "ftp://x/token", "--upstream-oauth-client-id", "gw"}, `--upstream-oauth-token-url "ftp://x/token": want an absolute http:// or https:// URL`},
	} {
		var stderr bytes.Buffer
		code := run(append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...), &bytes.Buffer{}, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
