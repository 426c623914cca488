package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEFlags checks that README.md's table of `tidemark serve` flags
// lists exactly the flags the command declares, with their defaults and
// help texts.
func TestREADMEFlags(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## `tidemark serve` flags")
	if !ok {
		t.Fatal("README.md has no section \"## `tidemark serve` flags\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `([^`]*)` \\| (.*) \\|$")
	documented := map[string][2]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = [2]string{m[2], m[3]}
	}
	fs, _ := serveFlags(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		doc, ok := documented[f.Name]
		if !ok {
			t.Errorf("flag --%s is not in README.md; add: | `--%s` | `%s` | %s |", f.Name, f.Name, f.DefValue, f.Usage)
			return
		}
		if doc[0] != f.DefValue || doc[1] != f.Usage {
			t.Errorf("README.md row of --%s = (%q, %q); the code says (%q, %q)", f.Name, doc[0], doc[1], f.DefValue, f.Usage)
		}
		delete(documented, f.Name)
	})
	for name := range documented {
		t.Errorf("README.md documents --%s, which tidemark serve does not declare", name)
	}
}
