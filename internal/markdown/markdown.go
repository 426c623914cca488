// Package markdown reads the repository's Markdown documents (README.md,
// docs/*.md) for the tests that check them against the code and against
// each other: their headings with the anchors GitHub gives them, their
// links, and the text of a section. Documents are parsed as CommonMark
// (github.com/yuin/goldmark), so a line such as "# comment" inside a fenced
// code block is no heading, and a link inside a code span is no link.
package markdown

import (
	"bytes"
	"html"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// Heading is one heading of a document.
type Heading struct {
	Level  int    // 1 for "#", up to 6
	Source string // the heading as written, without its "#" markers: "`tidemark serve` flags"
	Text   string // the text a reader sees: "tidemark serve flags"
	Anchor string // the fragment that links to it on GitHub: "tidemark-serve-flags" (see Anchor)
	Line   int    // 1-based line of the heading in the source
	start  int    // byte offset of the heading's line in the source
	end    int    // byte offset just after the heading's line (its newline included)
}

// Link is one link or image of a document, inline or by reference.
type Link struct {
	Destination string // as written, backslash escapes resolved: "docs/fleet.md#fencing", "https://…"
	Line        int    // 1-based line of the link's text in the source
}

// Doc is a parsed Markdown document.
type Doc struct {
	source   []byte
	Headings []Heading // in the order of the source
	Links    []Link    // in the order of the source
}

// Parse parses src as CommonMark. It never fails: any text is a Markdown
// document.
func Parse(src []byte) *Doc {
	d := &Doc{source: src}
	numbered := anchors{}
	root := goldmark.DefaultParser().Parse(text.NewReader(src))
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			h := d.heading(n)
			h.Anchor = numbered.next(Anchor(h.Text))
			d.Headings = append(d.Headings, h)
		case *ast.Link:
			d.Links = append(d.Links, Link{Destination: string(n.Destination), Line: d.lineOf(n)})
		case *ast.Image:
			d.Links = append(d.Links, Link{Destination: string(n.Destination), Line: d.lineOf(n)})
		}
		return ast.WalkContinue, nil
	})
	return d
}

// heading returns h's Heading, its Anchor not yet numbered.
func (d *Doc) heading(h *ast.Heading) Heading {
	src := d.source
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
	return Heading{
		Level:  h.Level,
		Source: string(bytes.TrimSpace(written)),
		Text:   inlineText(h, src),
		Line:   bytes.Count(src[:start], []byte("\n")) + 1,
		start:  start,
		end:    end,
	}
}

// lineOf returns the 1-based line on which n's text starts: that of its
// first text, else that of the block that holds it.
func (d *Doc) lineOf(n ast.Node) int {
	at := -1
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if t, ok := c.(*ast.Text); ok && entering {
			at = t.Segment.Start
			return ast.WalkStop, nil
		}
		return ast.WalkContinue, nil
	})
	for p := n; at < 0 && p != nil; p = p.Parent() {
		if p.Type() == ast.TypeBlock && p.Lines().Len() > 0 {
			at = p.Lines().At(0).Start
		}
	}
	if at < 0 {
		return 0
	}
	return bytes.Count(d.source[:at], []byte("\n")) + 1
}

// Section returns the source text under the first heading written as
// heading (Heading.Source), from the line after it up to the next heading
// of the same or a higher level (a smaller Level), or the end of the
// document; ok is false when no heading is written so.
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
			if _, code := c.Parent().(*ast.CodeSpan); code {
				b.Write(c.Value(src))
			} else {
				b.WriteString(html.UnescapeString(string(c.Value(src))))
			}
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
