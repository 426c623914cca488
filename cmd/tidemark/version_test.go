package main

import (
	"bytes"
	"runtime"
	"testing"
)

// TestVersion: `tidemark version` prints the release the linker set
// (-X main.version), the Go release and the platform on one line; without
// one it prints the version the go command recorded, which for a test
// binary is "(devel)". The Dockerfile's build is checked to set it by
// deploy/check.
func TestVersion(t *testing.T) {
	platform := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, tc := range []struct {
		linked string
		args   []string
		want   string
	}{
		{"", []string{"version"}, "tidemark (devel)" + platform},
		{"v1.4.0", []string{"version"}, "tidemark v1.4.0" + platform},
		{"v1.4.0-rc.1", []string{"--version"}, "tidemark v1.4.0-rc.1" + platform},
	} {
		version = tc.linked
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code != 0 || out.String() != tc.want || errb.Len() != 0 {
			t.Errorf("linked %q, tidemark %v: exit %d, stdout %q, stderr %q; want exit 0 and %q", tc.linked, tc.args, code, out.String(), errb.String(), tc.want)
		}
	}
	version = ""
}
