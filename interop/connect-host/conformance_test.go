package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestConformanceThroughConnect runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in scripts/npm) in client mode
// with this program as the client: a host that speaks over stdio to
// `tidemark connect`, which speaks Streamable HTTP to the suite's server.
// For initialize, tools_call and sse-retry, exactly the listed checks
// succeed, none fails or warns: the same as interop/conformance-client,
// which uses the client package without a bridge.
func TestConformanceThroughConnect(t *testing.T) {
	testenv.NeedNode(t)
	host := testenv.Build(t, "./interop/connect-host")
	tidemark := testenv.BuildTidemark(t)
	node := testenv.Node(t)
	suite := testenv.NPMBin(t, "conformance")
	command := shellQuote(host) + " --tidemark " + shellQuote(tidemark) + " --arg --log-level --arg DEBUG"
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
			run := testenv.StartProcess(t, node, suite, "client", "--command", command, "--scenario", tc.scenario, "-o", out)
			select {
			case <-run.Done():
			case <-time.After(suiteTimeout):
				t.Fatalf("conformance suite still running after %v; output:\n%s", suiteTimeout, run.Output())
			}
			if err := run.Wait(); err != nil {
				t.Errorf("conformance client --scenario %s: %v; output:\n%s", tc.scenario, err, run.Output())
			}
			var succeeded []string
			for _, c := range readChecks(t, out) {
				switch c.Status {
				case "SUCCESS":
					succeeded = append(succeeded, c.ID)
				case "FAILURE", "WARNING":
					t.Errorf("check %s: %s: %s", c.ID, c.Status, c.Message)
				}
				if c.ID == "client-sse-retry-timing" {
					t.Logf("the bridge reconnected %v ms after the stream closed (retry %v ms)", c.Details["actualDelayMs"], c.Details["expectedRetryMs"])
				}
			}
			slices.Sort(succeeded)
			if !slices.Equal(succeeded, tc.want) {
				t.Errorf("succeeded checks = %v, want %v; output:\n%s", succeeded, tc.want, run.Output())
			}
		})
	}
}

// shellQuote quotes s for the POSIX shell the suite runs --command with.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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
