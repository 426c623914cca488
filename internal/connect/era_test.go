package connect_test

import (
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/internal/connect"
)

// TestPickEra runs testdata/era. Command:
//
//	pick discovered=BOOL [supported=V1,V2,...]
//
// prints the era --protocol auto speaks.
func TestPickEra(t *testing.T) {
	datadriven.RunTest(t, "testdata/era", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "pick" {
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		var discovered bool
		d.ScanArgs(t, "discovered", &discovered)
		var supported []string
		if d.HasArg("supported") {
			var s string
			d.ScanArgs(t, "supported", &s)
			supported = strings.Split(s, ",")
		}
		return connect.PickEra(discovered, supported) + "\n"
	})
}
