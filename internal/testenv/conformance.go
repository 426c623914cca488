// conformance.go holds RunConformance: one run of the official MCP
// conformance suite (@modelcontextprotocol/conformance, pinned in
// scripts/npm) against a server URL, and the checks it saved.

package testenv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// ConformanceCheck is one check a scenario of the suite saved in its
// checks.json.
type ConformanceCheck struct {
	ID, Status, ErrorMessage string // Status: SUCCESS, FAILURE, WARNING or INFO
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
