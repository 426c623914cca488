// conformance.go holds runs of the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in scripts/npm) and the checks
// they saved: RunConformance against a server URL, RunConformanceClient
// with a client command.

package testenv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"
)

// ConformanceCheck is one check a scenario of the suite saved in its
// checks.json.
type ConformanceCheck struct {
	ID, Status, ErrorMessage string // Status: SUCCESS, FAILURE, WARNING or INFO
	// Details are the figures the check recorded (e.g. actualDelayMs).
	Details map[string]any
}

// Conformance is what one run of the suite found.
type Conformance struct {
	// Scenarios is how many scenarios the suite announced; every one of
	// them saved its checks.
	Scenarios int
	// Checks holds each scenario's checks, by scenario name, in the order
	// the scenario saved them.
	Checks map[string][]ConformanceCheck
	// Output is the suite's stdout and stderr.
	Output string
	// Err is the suite's exit status (nil: 0).
	Err error
}

var (
	conformanceAnnounced = regexp.MustCompile(`Running \S+ suite \((\d+) scenarios\)`)
	conformanceSaved     = regexp.MustCompile(`(?m)^=== Running scenario: (\S+) ===\n(?:.*\n)*?Results saved to (\S+)$`)
)

// RunConformance runs every server scenario of the suite for the protocol
// version ("2025-11-25", "2026-07-28") against url and reads the checks
// each scenario saved. It fails the test when Node.js or the suite is
// missing (NeedNode's rules), when the run takes longer than timeout, or
// when not every scenario the suite announces saved its checks.
func RunConformance(t testing.TB, url, version string, timeout time.Duration) Conformance {
	t.Helper()
	outDir := t.TempDir()
	run := StartProcess(t, Node(t), NPMBin(t, "conformance"),
		"server", "--url", url, "--suite", "all", "--spec-version", version, "-o", outDir)
	select {
	case <-run.Done():
	case <-time.After(timeout):
		t.Fatalf("conformance suite still running after %v; output:\n%s", timeout, run.Output())
	}
	c := Conformance{Output: run.Output(), Err: run.Wait(), Checks: make(map[string][]ConformanceCheck)}
	m := conformanceAnnounced.FindStringSubmatch(c.Output)
	if m == nil {
		t.Fatalf("no scenario count in the suite's output:\n%s", c.Output)
	}
	c.Scenarios, _ = strconv.Atoi(m[1])
	saved := conformanceSaved.FindAllStringSubmatch(c.Output, -1)
	if len(saved) != c.Scenarios || c.Scenarios == 0 {
		t.Fatalf("%d scenarios saved results, the suite announced %d; output:\n%s", len(saved), c.Scenarios, c.Output)
	}
	for _, sc := range saved {
		b, err := os.ReadFile(filepath.Join(sc[2], "checks.json"))
		if err != nil {
			t.Fatalf("scenario %s: %v", sc[1], err)
		}
		var checks []ConformanceCheck
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatalf("scenario %s: checks.json: %v", sc[1], err)
		}
		c.Checks[sc[1]] = checks
	}
	return c
}

// RunConformanceClient runs one scenario of the suite in client mode,
// `conformance client --command command --scenario scenario`, and returns
// the checks it saved, its output, and its exit status (nil: 0). It fails
// the test when Node.js or the suite is missing (NeedNode's rules), when
// the run takes longer than timeout, or when the scenario saved no one
// checks.json.
func RunConformanceClient(t testing.TB, command, scenario string, timeout time.Duration) ([]ConformanceCheck, string, error) {
	t.Helper()
	outDir := t.TempDir()
	run := StartProcess(t, Node(t), NPMBin(t, "conformance"),
		"client", "--command", command, "--scenario", scenario, "-o", outDir)
	select {
	case <-run.Done():
	case <-time.After(timeout):
		t.Fatalf("conformance suite still running after %v; output:\n%s", timeout, run.Output())
	}
	err := run.Wait()
	// The suite saves under a directory named for the scenario and the time.
	paths, _ := filepath.Glob(filepath.Join(outDir, "*", "checks.json"))
	if len(paths) != 1 {
		t.Fatalf("found %d checks.json under %s, want 1; output:\n%s", len(paths), outDir, run.Output())
	}
	b, rerr := os.ReadFile(paths[0])
	if rerr != nil {
		t.Fatal(rerr)
	}
	var checks []ConformanceCheck
	if jerr := json.Unmarshal(b, &checks); jerr != nil {
		t.Fatalf("checks.json: %v", jerr)
	}
	return checks, run.Output(), err
}

// Succeeded fails t for each check that is a FAILURE or a WARNING and
// returns the IDs of those that succeeded, sorted.
func Succeeded(t testing.TB, checks []ConformanceCheck) []string {
	t.Helper()
	var ids []string
	for _, c := range checks {
		switch c.Status {
		case "SUCCESS":
			ids = append(ids, c.ID)
		case "FAILURE", "WARNING":
			t.Errorf("check %s: %s: %s", c.ID, c.Status, c.ErrorMessage)
		}
	}
	slices.Sort(ids)
	return ids
}
