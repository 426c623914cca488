package main

import (
	"net/url"
	"strings"
	"testing"
)

// TestInspectAddressForms: `tidemark inspect --metrics-addr` takes the
// operator's listener as host:port or as an http:// URL (with or without
// a trailing slash), and answers the same for each; an address that is
// neither is a one-line usage error (exit 2).
func TestInspectAddressForms(t *testing.T) {
	_, _, metricsAddr := startObserved(t, nil)
	want := "0 sessions live in this process\n"
	for _, addr := range []string{metricsAddr, "http://" + metricsAddr, "http://" + metricsAddr + "/"} {
		var stdout, stderr strings.Builder
		if code := run([]string{"inspect", "--metrics-addr", addr}, &stdout, &stderr); code != 0 || stdout.String() != want {
			t.Errorf("inspect --metrics-addr %s: exit %d, stdout %q, stderr %q; want 0 and %q", addr, code, stdout.String(), stderr.String(), want)
		}
	}
	for addr, wantErr := range map[string]string{
		"9464":                 `tidemark inspect: --metrics-addr "9464": want host:port or an http:// URL, e.g. 127.0.0.1:9464 or http://127.0.0.1:9464`,
		"ftp://127.0.0.1:9464": `tidemark inspect: --metrics-addr "ftp://127.0.0.1:9464": want host:port or an http:// URL, e.g. 127.0.0.1:9464 or http://127.0.0.1:9464`,
		"http://":              `tidemark inspect: --metrics-addr "http://": want host:port or an http:// URL, e.g. 127.0.0.1:9464 or http://127.0.0.1:9464`,
		"http://h:1/?n=3":      `tidemark inspect: --metrics-addr "http://h:1/?n=3": want host:port or an http:// URL, e.g. 127.0.0.1:9464 or http://127.0.0.1:9464`,
	} {
		var stdout, stderr strings.Builder
		if code := run([]string{"inspect", "--metrics-addr", addr}, &stdout, &stderr); code != 2 || stderr.String() != wantErr+"\n" {
			t.Errorf("inspect --metrics-addr %s: exit %d, stderr %q; want 2 and %q", addr, code, stderr.String(), wantErr)
		}
	}
}

// TestInspectPointedAtMCP: `tidemark inspect` pointed at the MCP listener
// instead of the operator's says, in one line, that it reached an MCP
// listener and which flag to point where; with --path / (the MCP endpoint
// answers every path) too.
func TestInspectPointedAtMCP(t *testing.T) {
	for _, path := range []string{"/mcp", "/"} {
		_, endpoint, _ := startObserved(t, nil, "--path", path)
		u, err := url.Parse(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		code := run([]string{"inspect", "--metrics-addr", u.Host}, &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		wantEnd := ": that is an MCP listener (tidemark serve --addr), not the operator's listener: point --metrics-addr at the address tidemark serve --metrics-addr listens on (its log line \"operator's listener\" names it)"
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "tidemark inspect: http://"+u.Host+"/debug/sessions?n=20 answered ") || !strings.HasSuffix(lines[0], wantEnd) {
			t.Errorf("--path %s: inspect of the MCP listener: exit %d, stderr %q; want 1 and one line ending %q", path, code, stderr.String(), wantEnd)
		}
	}
}
