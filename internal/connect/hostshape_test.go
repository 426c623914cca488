package connect_test

import (
	"encoding/json"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/internal/connect"
)

// TestHostShape runs testdata/hostshape. Commands, each with a JSON value
// as input:
//
//	result method=METHOD
//	notification
//
// print what connect.ResultForHost (the result of a request of METHOD) and
// connect.NotificationForHost (a notification's params) give the host.
func TestHostShape(t *testing.T) {
	datadriven.RunTest(t, "testdata/hostshape", func(t *testing.T, d *datadriven.TestData) string {
		in := json.RawMessage(d.Input)
		switch d.Cmd {
		case "result":
			var method string
			d.ScanArgs(t, "method", &method)
			return string(connect.ResultForHost(method, in)) + "\n"
		case "notification":
			return string(connect.NotificationForHost(in)) + "\n"
		}
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		return ""
	})
}
