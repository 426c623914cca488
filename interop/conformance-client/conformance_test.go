package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// suiteTimeout bounds one scenario run; the suite allows the client 30 s.
const suiteTimeout = 2 * time.Minute

// check is one entry of the suite's checks.json.
type check struct {
	ID      string         `json:"id"`
	Status  string         `json:"status"`
	Message string         `json:"errorMessage"`
	Details map[string]any `json:"details"`
}

// TestConformanceClient runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in scripts/npm) in client mode
// with this program as the client, for the scenarios initialize, tools_call
// and sse-retry, and requires exactly the listed checks to succeed, with no
// failure and no warning. sse-retry is the resumption scenario: the server
// closes the tool call's stream after a priming event with retry 500 ms,
// and the client must reconnect with GET and Last-Event-ID, no sooner.
func TestConformanceClient(t *testing.T) {
	testenv.NeedNode(t)
	bin := testenv.Build(t, "./interop/conformance-client")
	node := testenv.Node(t)
	suite := testenv.NPMBin(t, "conformance")
	for _, tc := range []struct {
		scenario string
		want     []string // IDs of the checks that must succeed, sorted
	}{
		{"initialize", []string{"mcp-client-initialization"}},
		{"tools_call", []string{"tool-add-numbers", "wire-schema-valid"}},
		{"sse-retry", []string{"client-sse-graceful-reconnect", "client-sse-last-event-id", "client-sse-retry-timing"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			out := t.TempDir()
			run := testenv.StartProcess(t, node, suite, "client", "--command", bin, "--scenario", tc.scenario, "-o", out)
			select {
			case <-run.Done():
			case <-time.After(suiteTimeout):
				t.Fatalf("conformance suite still running after %v; output:\n%s", suiteTimeout, run.Output())
			}
			if err := run.Wait(); err != nil {
				t.Errorf("conformance client --scenario %s: %v; output:\n%s", tc.scenario, err, run.Output())
			}
			checks := readChecks(t, out)
			var succeeded []string
			for _, c := range checks {
				switch c.Status {
				case "SUCCESS":
					succeeded = append(succeeded, c.ID)
				case "FAILURE", "WARNING":
					t.Errorf("check %s: %s: %s", c.ID, c.Status, c.Message)
				}
				if c.ID == "client-sse-retry-timing" {
					t.Logf("reconnected %v ms after the stream closed (retry %v ms)", c.Details["actualDelayMs"], c.Details["expectedRetryMs"])
				}
			}
			slices.Sort(succeeded)
			if !slices.Equal(succeeded, tc.want) {
				t.Errorf("succeeded checks = %v, want %v", succeeded, tc.want)
			}
		})
	}
}

// readChecks reads the checks.json the suite wrote under dir (in a
// directory named for the scenario and the time).
func readChecks(t *testing.T, dir string) []check {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*", "checks.json"))
	if len(paths) != 1 {
		t.Fatalf("found %d checks.json under %s, want 1", len(paths), dir)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var checks []check
	if err := json.Unmarshal(b, &checks); err != nil {
		t.Fatalf("checks.json: %v", err)
	}
	return checks
}
