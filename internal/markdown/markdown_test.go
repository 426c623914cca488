package markdown_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/internal/markdown"
)

// TestDataDriven runs the cases in testdata/: the anchors of headings
// (anchors), the links of a document (links) and its sections (sections).
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			doc := markdown.Parse([]byte(d.Input + "\n"))
			var b strings.Builder
			switch d.Cmd {
			case "anchors":
				for _, h := range doc.Headings {
					fmt.Fprintf(&b, "%s  <- %s\n", h.Anchor, h.Source)
				}
			case "links":
				for _, l := range doc.Links {
					fmt.Fprintf(&b, "%d %s\n", l.Line, l.Destination)
				}
			case "sections":
				for _, h := range doc.Headings {
					section, ok := doc.Section(h.Source)
					if !ok {
						t.Fatalf("%s: no section for heading %q", d.Pos, h.Source)
					}
					fmt.Fprintf(&b, "== %s\n%s", h.Source, section)
				}
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			}
			return b.String()
		})
	})
}
