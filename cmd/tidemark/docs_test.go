package main

import (
	"flag"
	"io"
	"regexp"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestDocsFlagTables checks that the flag tables of `tidemark serve` and
// `tidemark inspect` (docs/operating.md), of `tidemark probe`
// (docs/probe.md), of `tidemark ready` (docs/deploying.md) and of
// `tidemark connect` (docs/connect.md) list exactly
// the flags each command declares, with their defaults and help texts.
func TestDocsFlagTables(t *testing.T) {
	serveFS, _ := serveFlags(io.Discard)
	checkFlagTable(t, "docs/operating.md", "`tidemark serve` flags", serveFS)
	probeFS, _ := probeFlags(io.Discard)
	checkFlagTable(t, "docs/probe.md", "`tidemark probe` flags", probeFS)
	inspectFS, _ := inspectFlags(io.Discard)
	checkFlagTable(t, "docs/operating.md", "`tidemark inspect` flags", inspectFS)
	readyFS, _ := readyFlags(io.Discard)
	checkFlagTable(t, "docs/deploying.md", "`tidemark ready` flags", readyFS)
	connectFS, _ := connectFlags(io.Discard)
	checkFlagTable(t, "docs/connect.md", "`tidemark connect` flags", connectFS)
}

// checkFlagTable compares the table under the heading "## heading" of the
// document doc with fs.
func checkFlagTable(t *testing.T, doc, heading string, fs *flag.FlagSet) {
	t.Helper()
	section := testenv.DocSection(t, doc, heading)
	where := doc + ", " + heading
	row := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `([^`]*)` \\| (.*) \\|$")
	documented := map[string][2]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = [2]string{m[2], m[3]}
	}
	fs.VisitAll(func(f *flag.Flag) {
		doc, ok := documented[f.Name]
		if !ok {
			t.Errorf("%s: flag --%s is not in the table; add: | `--%s` | `%s` | %s |", where, f.Name, f.Name, f.DefValue, f.Usage)
			return
		}
		if doc[0] != f.DefValue || doc[1] != f.Usage {
			t.Errorf("%s: the row of --%s = (%q, %q); the code says (%q, %q)", where, f.Name, doc[0], doc[1], f.DefValue, f.Usage)
		}
		delete(documented, f.Name)
	})
	for name := range documented {
		t.Errorf("%s: documents --%s, which the command does not declare", where, name)
	}
}
