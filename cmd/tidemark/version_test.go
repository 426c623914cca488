package main

import (
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

// TestVersion: `tidemark version`, `tidemark --version` and `tidemark
// serve --version` print the same five lines, exit 0; a test binary holds
// no commit (the toolchain embeds none without version control), so those
// read unknown.
func TestVersion(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	want := "version:  (devel)\ncommit:   unknown\nmodified: unknown\ndate:     unknown\ngo:       " + runtime.Version() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"serve", "--version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil || string(out) != want {
			t.Errorf("tidemark %v: %v, stdout:\n%s\nwant:\n%s", args, err, out, want)
		}
	}
	var stdout strings.Builder
	printVersion(&stdout, admin.BuildOf(&debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/tidemark-mcp/tidemark", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "40aecafd7b910c398eb60a709f2e43068fb44d8b"},
			{Key: "vcs.time", Value: "2026-12-06T00:55:33Z"}, {Key: "vcs.modified", Value: "true"},
		},
	}))
	want = "version:  v1.2.3\ncommit:   40aecafd7b910c398eb60a709f2e43068fb44d8b\nmodified: true\ndate:     2026-12-06T00:55:33Z\ngo:       go1.26.8\n"
	if stdout.String() != want {
		t.Errorf("a build from a checkout prints:\n%s\nwant:\n%s", stdout.String(), want)
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
