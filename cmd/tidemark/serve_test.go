package main

import (
	"bytes"
	"strings"
	"testing"
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
		{[]string{"--max-sessions", "0"}, "--max-sessions 0: want a positive number of sessions"},
		{[]string{"--max-calls-per-session", "0"}, "--max-calls-per-session 0: want a positive number of requests"},
		{[]string{"--retention-events", "-5"}, "--retention-events -5: want a positive number, or -1 for no limit"},
		{[]string{"--retention-bytes", "0"}, "--retention-bytes 0: want a positive number, or -1 for no limit"},
		{[]string{"--retry", "0s"}, "--retry 0: want a positive duration, or a negative one for no retry field"},
		{[]string{"--shutdown-grace", "-1s"}, "--shutdown-grace -1s: want zero or a positive duration"},
		{[]string{"--max-processes", "0"}, "--max-processes 0: want a positive number, or -1 for no limit"},
	} {
		var stderr bytes.Buffer
		code := run(append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...), &bytes.Buffer{}, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "goroutine") {
			t.Errorf("serve %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
