package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark-mcp/tidemark/requeststate"
)

// TestServeRequestStateFlags: meaningless requestState flags are usage
// errors (exit 2); a key ring that cannot be loaded exits 1 before anything
// listens, with a message that names its source and never its keys.
func TestServeRequestStateFlags(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("AAAAAAAAAAAAAAAAAAAAAA==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  string // $TIDEMARK_REQUEST_STATE_KEYS, "" for unset
		args []string
		code int
		want string
	}{
		{"", []string{"--request-state-ttl", "0s"}, 2, "--request-state-ttl 0s: want a positive duration"},
		{"", []string{"--request-state-used-max", "0"}, 2, "--request-state-used-max 0: want a positive number of states"},
		{"", []string{"--request-state-keys", good, "--upstream", "http://127.0.0.1:9/mcp"}, 2,
			"--request-state-keys and --request-state-single-use apply to the demo server and --stdio, not to --upstream"},
		{"", []string{"--request-state-keys", bad}, 1,
			"tidemark serve: --request-state-keys: requeststate: key ring entry 1: the key is 16 bytes, want 32 (generate one with: openssl rand -base64 32) (in " + bad + ")"},
		{"", []string{"--request-state-keys", filepath.Join(dir, "none")}, 2,
			"tidemark serve: --request-state-keys \"" + filepath.Join(dir, "none") + "\": no such file: want the path of a key ring file: one base64 32-byte key per line"},
		{"not a key", nil, 1,
			"tidemark serve: --request-state-keys: requeststate: key ring entry 1: 3 fields, want a key and at most a not-before time (in $TIDEMARK_REQUEST_STATE_KEYS)"},
		{"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=", []string{"--request-state-keys", good}, 1,
			"tidemark serve: --request-state-keys: requeststate: keys are named twice, by the file " + good + " and by $TIDEMARK_REQUEST_STATE_KEYS: unset one"},
	} {
		t.Setenv(requeststate.EnvKeys, tc.env) // restored when the test ends
		if tc.env == "" {
			os.Unsetenv(requeststate.EnvKeys)
		}
		var stderr bytes.Buffer
		code := run(append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...), &bytes.Buffer{}, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "msg=serving") {
			t.Errorf("serve %v ($%s %q): exit %d, stderr %q; want exit %d and %q", tc.args, requeststate.EnvKeys, tc.env, code, stderr.String(), tc.code, tc.want)
		}
	}
}
