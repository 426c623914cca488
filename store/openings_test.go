package store_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/store"
)

// TestOpeningsTrimmed runs testdata/openings: each "trim" command removes
// the events of its input, one a line (SEQ STREAM KIND [end] [DATA]),
// from a log whose record keeps the openings left by the commands before
// it ("reset" empties them), and prints the openings after, one a line
// (STREAM DATA, STREAM (N bytes) past 64 bytes, or STREAM mark for the
// mark, Openings.Dropped), or "none", and whether the last event changed them.
func TestOpeningsTrimmed(t *testing.T) {
	datadriven.Walk(t, "testdata/openings", func(t *testing.T, path string) {
		var o store.Openings
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "reset":
				o = nil
				return "ok\n"
			case "trim":
				var changed bool
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					var err error
					if o, changed, err = trimLine(o, line); err != nil {
						d.Fatalf(t, "%s: %v", line, err)
					}
				}
				var b strings.Builder
				if len(o) == 0 {
					b.WriteString("none\n")
				}
				for _, op := range o {
					if len(op.Data) == 0 {
						fmt.Fprintf(&b, "%d mark\n", op.Stream)
						continue
					}
					if len(op.Data) > 64 {
						fmt.Fprintf(&b, "%d (%d bytes)\n", op.Stream, len(op.Data))
						continue
					}
					fmt.Fprintf(&b, "%d %s\n", op.Stream, op.Data)
				}
				fmt.Fprintf(&b, "changed=%t\n", changed)
				return b.String()
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

// trimLine applies one removed event, written SEQ STREAM KIND [end] [DATA]
// with KIND one of message, priming, close, and DATA with ~N meaning N
// bytes of the id 1 repeated inside a JSON array.
func trimLine(o store.Openings, line string) (store.Openings, bool, error) {
	f := strings.Fields(line)
	if len(f) < 3 {
		return o, false, fmt.Errorf("want SEQ STREAM KIND [end] [DATA]")
	}
	seq, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return o, false, err
	}
	stream, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return o, false, err
	}
	kinds := map[string]store.Kind{"message": store.KindMessage, "priming": store.KindPriming, "close": store.KindClose}
	kind, ok := kinds[f[2]]
	if !ok {
		return o, false, fmt.Errorf("kind %q", f[2])
	}
	rest := f[3:]
	end := len(rest) > 0 && rest[0] == "end"
	if end {
		rest = rest[1:]
	}
	var data []byte
	if len(rest) > 0 {
		data = []byte(rest[0])
		if n, err := strconv.Atoi(strings.TrimPrefix(rest[0], "~")); err == nil && strings.HasPrefix(rest[0], "~") {
			data = []byte("[" + strings.Repeat("1", n-2) + "]")
		}
	}
	out, changed := o.Trimmed(seq, stream, kind, end, data)
	return out, changed, nil
}
