package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// suiteTimeout bounds one scenario run; the suite allows the client 30 s.
const suiteTimeout = 2 * time.Minute

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
			checks, output, err := testenv.RunConformanceClient(t, command, tc.scenario, suiteTimeout)
			if err != nil {
				t.Errorf("conformance client --scenario %s: %v; output:\n%s", tc.scenario, err, output)
			}
			for _, c := range checks {
				if c.ID == "client-sse-retry-timing" {
					t.Logf("the bridge reconnected %v ms after the stream closed (retry %v ms)", c.Details["actualDelayMs"], c.Details["expectedRetryMs"])
				}
			}
			if succeeded := testenv.Succeeded(t, checks); !slices.Equal(succeeded, tc.want) {
				t.Errorf("succeeded checks = %v, want %v; output:\n%s", succeeded, tc.want, output)
			}
		})
	}
}

// shellQuote quotes s for the POSIX shell the suite runs --command with.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
