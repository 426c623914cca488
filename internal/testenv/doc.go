package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/markdown"
)

// DocSection returns the text of the section of the Markdown document at
// path (relative to the module root, such as "README.md" or
// "docs/operating.md") under the heading written as heading (at any level,
// without its "#" markers, inline code with its backquotes), up to the next heading of
// the same or a higher level. It calls t.Fatal when the document or the
// heading is missing, naming both: a test that checks a document's text
// must fail when that text moves, not pass on nothing.
func DocSection(t testing.TB, path, heading string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(ModuleRoot(t), path))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	section, ok := markdown.Parse(src).Section(heading)
	if !ok {
		t.Fatalf("testenv: %s has no heading %q", path, heading)
	}
	return section
}
