// client_test.go runs the rules of a client of the operator's listener
// from testdata/client: the address forms (address) and what an answer
// other than the inspector's says (answer).

package admin_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/admin"
)

func TestClientRules(t *testing.T) {
	datadriven.RunTest(t, "testdata/client", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "address":
			var b strings.Builder
			for _, line := range strings.Split(d.Input, "\n") {
				u, err := admin.BaseURL(line)
				if err != nil {
					fmt.Fprintf(&b, "%s: error: %v\n", line, err)
					continue
				}
				fmt.Fprintf(&b, "%s: %s\n", line, u)
			}
			return b.String()
		case "answer":
			var status int
			d.ScanArgs(t, "status", &status)
			return admin.Explain(status, []byte(d.Input), "--metrics-addr") + "\n"
		default:
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		}
	})
}
