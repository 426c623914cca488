package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestVersion: `tidemark version` prints the release the linker set
// (-X main.version), the Go release and the platform on one line; without
// one it prints the version the go command recorded, which for a test
// binary is "(devel)". `tidemark --version` and `tidemark serve --version`
// print the same. The Dockerfile's build is checked to set it by
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
		{"v1.4.0", []string{"serve", "--version"}, "tidemark v1.4.0" + platform},
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

// TestVersionOfACheckout: a binary built with version control (the go
// command records vcs.revision, vcs.time and vcs.modified) names its
// commit, whether the work tree was modified, and the commit's date.
func TestVersionOfACheckout(t *testing.T) {
	b := admin.BuildOf(&debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/tidemark-mcp/tidemark", Version: "v0.0.0-20261206005533-40aecafd7b91+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "40aecafd7b910c398eb60a709f2e43068fb44d8b"},
			{Key: "vcs.time", Value: "2026-12-06T00:55:33Z"}, {Key: "vcs.modified", Value: "true"},
		},
	})
	want := "tidemark v0.0.0-20261206005533-40aecafd7b91+dirty go1.26.8 linux/amd64 (commit 40aecafd7b910c398eb60a709f2e43068fb44d8b, modified, 2026-12-06T00:55:33Z)\n"
	if got := versionLine(b, "linux/amd64"); got != want {
		t.Errorf("a build from a modified checkout prints %q, want %q", got, want)
	}
	b.Modified = false
	want = "tidemark v0.0.0-20261206005533-40aecafd7b91+dirty go1.26.8 linux/amd64 (commit 40aecafd7b910c398eb60a709f2e43068fb44d8b, 2026-12-06T00:55:33Z)\n"
	if got := versionLine(b, "linux/amd64"); got != want {
		t.Errorf("a build from a clean checkout prints %q, want %q", got, want)
	}
}

// TestVersionOfAnImage: a binary linked with main.commit and main.built
// (the Dockerfile's COMMIT and BUILD_DATE, its context having no .git)
// names that commit and the build's time, in the line and in the Build
// that /healthz answers.
func TestVersionOfAnImage(t *testing.T) {
	version, commit, built = "v1.2.0", "0123456789abcdef0123456789abcdef01234567", "2026-12-06T01:00:00Z"
	defer func() { version, commit, built = "", "", "" }()
	b := currentBuild()
	if b.Version != "v1.2.0" || b.Revision != commit || b.Built != built || b.Time != "" || b.Modified {
		t.Errorf("currentBuild() = %+v; want version v1.2.0, revision %s, built %s, no commit time, not modified", b, commit, built)
	}
	want := "tidemark v1.2.0 " + b.GoVersion + " linux/amd64 (commit 0123456789abcdef0123456789abcdef01234567, built 2026-12-06T01:00:00Z)\n"
	if got := versionLine(b, "linux/amd64"); got != want {
		t.Errorf("an image's binary prints %q, want %q", got, want)
	}
}

// TestBuildOnOperatorListener: a running tidemark serve names its build
// in /healthz's JSON and in the tidemark_build_info gauge (value 1), which
// promtool accepts.
func TestBuildOnOperatorListener(t *testing.T) {
	_, _, metricsAddr := startObserved(t, nil)
	code, body := get(t, "http://"+metricsAddr+"/healthz")
	var health struct {
		Status string      `json:"status"`
		Build  admin.Build `json:"build"`
	}
	if err := json.Unmarshal([]byte(body), &health); err != nil || code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if want := (admin.Build{Version: "(devel)", GoVersion: runtime.Version()}); health.Status != "ok" || health.Build != want {
		t.Errorf("/healthz = %s, want status ok and build %+v", body, want)
	}
	_, metrics := get(t, "http://"+metricsAddr+"/metrics")
	gauge := regexp.MustCompile(`(?m)^tidemark_build_info\{.*\} 1$`).FindString(metrics)
	if want := `tidemark_build_info{goversion="` + runtime.Version() + `",revision="",version="(devel)"} 1`; gauge != want {
		t.Errorf("/metrics has %q, want %q", gauge, want)
	}
	t.Run("promtool", func(t *testing.T) {
		testenv.Need(t, testenv.Prometheus)
		check := exec.Command("promtool", "check", "metrics")
		check.Stdin = strings.NewReader(metrics)
		if out, err := check.CombinedOutput(); err != nil || len(out) != 0 {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})
}
