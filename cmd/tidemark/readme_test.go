package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEFlags checks that README.md's flag tables of `tidemark serve`,
// `tidemark probe` and `tidemark inspect` list exactly the flags each command declares, with
// their defaults and help texts.
func TestREADMEFlags(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	serveFS, _ := serveFlags(io.Discard)
	checkFlagTable(t, string(readme), "## `tidemark serve` flags", serveFS)
	probeFS, _ := probeFlags(io.Discard)
	checkFlagTable(t, string(readme), "## `tidemark probe` flags", probeFS)
	inspectFS, _ := inspectFlags(io.Discard)
	checkFlagTable(t, string(readme), "## `tidemark inspect` flags", inspectFS)
}

// checkFlagTable compares the table under heading in readme with fs.
func checkFlagTable(t *testing.T, readme, heading string, fs *flag.FlagSet) {
	t.Helper()
	_, section, ok := strings.Cut(readme, heading)
	if !ok {
		t.Errorf("README.md has no section %q", heading)
		return
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `([^`]*)` \\| (.*) \\|$")
	documented := map[string][2]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = [2]string{m[2], m[3]}
	}
	fs.VisitAll(func(f *flag.Flag) {
		doc, ok := documented[f.Name]
		if !ok {
			t.Errorf("%s: flag --%s is not in README.md; add: | `--%s` | `%s` | %s |", heading, f.Name, f.Name, f.DefValue, f.Usage)
			return
		}
		if doc[0] != f.DefValue || doc[1] != f.Usage {
			t.Errorf("%s: README.md row of --%s = (%q, %q); the code says (%q, %q)", heading, f.Name, doc[0], doc[1], f.DefValue, f.Usage)
		}
		delete(documented, f.Name)
	})
	for name := range documented {
		t.Errorf("%s: README.md documents --%s, which the command does not declare", heading, name)
	}
}
