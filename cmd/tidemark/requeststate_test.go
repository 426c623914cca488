package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		{"", []string{"--request-state-single-use", "--request-state-used-max", "0"}, 2, "--request-state-used-max 0: want a positive number of states"},
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

// TestKeyRingSameStartWarns: a key ring in which two keys start to seal at
// the same time (the same not-before time, or none) loads, with one WARN
// line naming those keys by ID, never by their secret: which of them
// seals depends on their order in each replica's file. A ring whose keys
// start at distinct times loads without it.
func TestKeyRingSameStartWarns(t *testing.T) {
	const (
		keyA = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=" // ID 1a15a15e
		keyB = "+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/s="
		keyC = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="
	)
	ids := func(text string) []string {
		r, err := requeststate.ParseRing(text)
		if err != nil {
			t.Fatal(err)
		}
		return r.IDs()
	}
	idA, idB, idC := ids(keyA)[0], ids(keyB)[0], ids(keyC)[0]
	os.Unsetenv(requeststate.EnvKeys)
	for _, tc := range []struct {
		name, ring string
		want       string // the WARN line's message and keys, "" for none
	}{
		{"same not-before", keyA + "\n" + keyB + " 2026-11-07T12:00:00Z\n" + keyC + " 2026-11-07T12:00:00Z\n",
			`level=WARN msg="request state keys start to seal at the same time: the later in each replica's ring seals, so replicas whose rings order them differently seal with different keys; give each key its own not-before time" reason=` +
				"ambiguous_key keys=\"[" + idB + " " + idC + "]\" not_before=2026-11-07T12:00:00Z"},
		{"no not-before", keyA + "\n" + keyB + "\n", `keys="[` + idA + " " + idB + `]" not_before=always`},
		{"distinct", keyA + "\n" + keyB + " 2026-11-07T12:00:00Z\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "keys")
			if err := os.WriteFile(file, []byte(tc.ring), 0o600); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			c := &stateConfig{keysFile: file, ttl: time.Minute, usedMax: 1}
			if _, err := c.sealer(slog.New(slog.NewTextHandler(&log, nil)), &fleetConfig{}); err != nil {
				t.Fatal(err)
			}
			warns := 0
			for line := range strings.SplitSeq(log.String(), "\n") {
				if strings.Contains(line, "level=WARN") {
					warns++
				}
			}
			switch {
			case tc.want == "" && warns != 0:
				t.Errorf("log:\n%s\nwant no WARN line", log.String())
			case tc.want != "" && (warns != 1 || !strings.Contains(log.String(), tc.want)):
				t.Errorf("log:\n%s\nwant one WARN line with %s", log.String(), tc.want)
			}
			for _, secret := range []string{keyA, keyB, keyC, keyA[:20], keyB[:20], keyC[:20]} {
				if strings.Contains(log.String(), secret) {
					t.Errorf("the log holds key material %q:\n%s", secret, log.String())
				}
			}
		})
	}
}
