package main

import (
	"slices"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// suiteTimeout bounds one scenario run; the suite allows the client 30 s.
const suiteTimeout = 2 * time.Minute

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
	for _, tc := range []struct {
		scenario string
		want     []string // IDs of the checks that must succeed, sorted
	}{
		{"initialize", []string{"mcp-client-initialization"}},
		{"tools_call", []string{"tool-add-numbers", "wire-schema-valid"}},
		{"sse-retry", []string{"client-sse-graceful-reconnect", "client-sse-last-event-id", "client-sse-retry-timing"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			checks, output, err := testenv.RunConformanceClient(t, bin, tc.scenario, suiteTimeout)
			if err != nil {
				t.Errorf("conformance client --scenario %s: %v; output:\n%s", tc.scenario, err, output)
			}
			for _, c := range checks {
				if c.ID == "client-sse-retry-timing" {
					t.Logf("reconnected %v ms after the stream closed (retry %v ms)", c.Details["actualDelayMs"], c.Details["expectedRetryMs"])
				}
			}
			if succeeded := testenv.Succeeded(t, checks); !slices.Equal(succeeded, tc.want) {
				t.Errorf("succeeded checks = %v, want %v", succeeded, tc.want)
			}
		})
	}
}
