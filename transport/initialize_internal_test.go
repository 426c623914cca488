// initialize_internal_test.go runs the table of initialize's params
// (testdata/initialize) against initializeParams, the pure function of
// the rule.

package transport

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

func TestInitializeParams(t *testing.T) {
	datadriven.RunTest(t, "testdata/initialize", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "check" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		var params json.RawMessage
		if in := strings.TrimSpace(d.Input); in != "(absent)" {
			params = json.RawMessage(in)
		}
		if why := initializeParams(params); why != "" {
			return why + "\n"
		}
		return "ok\n"
	})
}
