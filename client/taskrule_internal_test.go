// taskrule_internal_test.go drives testdata/taskrule, which tables
// readTask on its own.

package client

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestReadTask runs testdata/taskrule. Command:
//
//	read [prev=DUR]
//	<the task answer's JSON result>
//
// prints the decision: "poll wait=DUR", "ask wait=DUR inputs=JSON",
// "complete result=JSON", "fail code=N message=M data=JSON", "cancelled",
// each followed by the task's id, status and message; or "error: ..." for
// an answer the client cannot follow.
func TestReadTask(t *testing.T) {
	datadriven.RunTest(t, "testdata/taskrule", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "read" {
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		var prev time.Duration
		if d.HasArg("prev") {
			var s string
			d.ScanArgs(t, "prev", &s)
			var err error
			if prev, err = time.ParseDuration(s); err != nil {
				t.Fatalf("%s: prev=%s: %v", d.Pos, s, err)
			}
		}
		s, err := readTask([]byte(d.Input), prev)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		var b strings.Builder
		b.WriteString(s.do.String())
		switch s.do {
		case doPoll:
			fmt.Fprintf(&b, " wait=%v", s.wait)
		case doAsk:
			fmt.Fprintf(&b, " wait=%v inputs=%s", s.wait, s.inputs)
		case doComplete:
			fmt.Fprintf(&b, " result=%s", s.result)
		case doFail:
			fmt.Fprintf(&b, " code=%d message=%q data=%s", s.err.Code, s.err.Message, s.err.Data)
		}
		fmt.Fprintf(&b, "\ntask=%s status=%s message=%q\n", s.id, s.status, s.message)
		return b.String()
	})
}
