// Package markdown reads the repository's Markdown documents (README.md,
// docs/*.md) for the tests that check them against the code: their
// headings and the text of a section. Documents are parsed as CommonMark
// (github.com/yuin/goldmark), so a line such as "# comment" inside a fenced
// code block is not a heading.
package markdown

import (
	"bytes"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// Heading is one heading of a document's top level (headings inside lists
// or block quotes are not sections and are not listed).
type Heading struct {
	Level  int    // 1 for "#", up to 6
	Source string // the heading as written, without its "#" markers: "`tidemark serve` flags"
	Text   string // the text a reader sees: "tidemark serve flags"
	Line   int    // 1-based line of the heading in the source
	start  int    // byte offset of the heading's line in the source
	end    int    // byte offset just after the heading's line (its newline included)
}

// Doc is a parsed Markdown document.
type Doc struct {
	source   []byte
	root     ast.Node
	Headings []Heading // in the order of the source
}

// Parse parses src as CommonMark. It never fails: any text is a Markdown
// document.
func Parse(src []byte) *Doc {
	d := &Doc{source: src, root: goldmark.DefaultParser().Parse(text.NewReader(src))}
	for n := d.root.FirstChild(); n != nil; n = n.NextSibling() {
		h, ok := n.(*ast.Heading)
		if !ok {
			continue
		}
		at := len(src)
		if h.Lines().Len() > 0 {
			at = h.Lines().At(0).Start
		}
		start := bytes.LastIndexByte(src[:at], '\n') + 1
		end := len(src)
		if i := bytes.IndexByte(src[at:], '\n'); i >= 0 {
			end = at + i + 1
		}
		var written []byte
		for i := range h.Lines().Len() {
			seg := h.Lines().At(i)
			written = append(written, seg.Value(src)...)
		}
		d.Headings = append(d.Headings, Heading{
			Level:  h.Level,
			Source: string(bytes.TrimSpace(written)),
			Text:   inlineText(h, src),
			Line:   bytes.Count(src[:start], []byte("\n")) + 1,
			start:  start,
			end:    end,
		})
	}
	return d
}

// Section returns the source text under the first top-level heading
// written as heading (Heading.Source), from the line after it up to the next heading of the
// same or a higher level (a smaller Level), or the end of the document;
// ok is false when no heading has that text.
func (d *Doc) Section(heading string) (section string, ok bool) {
	for i, h := range d.Headings {
		if h.Source != heading {
			continue
		}
		end := len(d.source)
		for _, next := range d.Headings[i+1:] {
			if next.Level <= h.Level {
				end = next.start
				break
			}
		}
		return string(d.source[h.end:end]), true
	}
	return "", false
}

// inlineText returns the text content of n's inline children, as an HTML
// rendering of them would show it without its tags.
func inlineText(n ast.Node, src []byte) string {
	var b bytes.Buffer
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Value(src))
			if c.SoftLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.RawHTML:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}
