// Binaries of this module built once per test binary.

package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// builds remembers the binaries this test binary built, so each package is
// compiled once however many tests ask for it. It is package-level state on
// purpose: its lifetime is the test binary's.
var builds = struct {
	sync.Mutex
	m map[string]*build
}{m: make(map[string]*build)}

type build struct {
	once sync.Once
	path string
	err  error
}

// BuildTidemark returns the path of the tidemark command (./cmd/tidemark),
// built once per test binary; see Build.
func BuildTidemark(t testing.TB) string {
	t.Helper()
	return Build(t, "./cmd/tidemark")
}

// Build compiles the main package pkg, a path relative to the module root
// ("./examples/everything") or an import path, once per test binary, and
// returns the executable's path. When this test binary was built with
// -race, the executable is too. Executables live in
// <Cache>/bin/test-<pid>/ and are removed by a later test binary once this
// process has exited. It calls t.Fatal with the compiler's output when the
// build fails.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	return buildOnce(t, pkg, raceEnabled)
}

// BuildNoRace is Build without the race detector, whatever this test
// binary was built with: for tests that measure the memory of the process
// they start, which the race detector multiplies.
func BuildNoRace(t testing.TB, pkg string) string {
	t.Helper()
	return buildOnce(t, pkg, false)
}

func buildOnce(t testing.TB, pkg string, race bool) string {
	t.Helper()
	key := pkg
	if race != raceEnabled {
		key += " (no race)"
	}
	builds.Lock()
	b, ok := builds.m[key]
	if !ok {
		b = &build{}
		builds.m[key] = b
	}
	builds.Unlock()
	root, cache := ModuleRoot(t), Cache(t) // outside once: they may t.Fatal
	b.once.Do(func() { b.path, b.err = compile(root, cache, pkg, race) })
	if b.err != nil {
		t.Fatalf("testenv: build %s: %v", pkg, b.err)
	}
	return b.path
}

func compile(root, cache, pkg string, race bool) (string, error) {
	binDir := filepath.Join(cache, "bin")
	sweep(binDir)
	dir := filepath.Join(binDir, "test-"+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, path.Base(pkg))
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	} else if raceEnabled {
		out += "-norace"
		args[2] = out
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v\n%s", err, msg)
	}
	return out, nil
}

// sweep removes the build directories of test binaries that have exited.
func sweep(binDir string) {
	entries, _ := os.ReadDir(binDir)
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "test-"))
		if err != nil || !strings.HasPrefix(e.Name(), "test-") || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(filepath.Join(binDir, e.Name()))
		}
	}
}
