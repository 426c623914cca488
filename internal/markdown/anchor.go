package markdown

import (
	"strconv"
	"strings"
	"unicode"
)

// Anchor returns the fragment GitHub gives a heading whose text a reader
// sees is text (Heading.Text, "tidemark serve flags" for
// "## `tidemark serve` flags"), before duplicates are numbered: the text
// lowercased, every character that is not a letter, a number, a mark, '-'
// or '_' removed, and each space turned into '-' (github-slugger, the rule
// github.com applies to rendered Markdown). "Fleet, 2026-07-28" gives
// "fleet-2026-07-28", "A — B" gives "a--b".
func Anchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-', r == '_', unicode.IsLetter(r), unicode.IsNumber(r), unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors numbers the anchors of one document as GitHub does: the first
// heading with a given anchor keeps it, the next ones get "-1", "-2", …,
// skipping any anchor an earlier heading already has.
type anchors map[string]int

// next returns the anchor of the next heading whose Anchor is base.
func (a anchors) next(base string) string {
	anchor := base
	for {
		if _, taken := a[anchor]; !taken {
			break
		}
		a[base]++
		anchor = base + "-" + strconv.Itoa(a[base])
	}
	a[anchor] = 0
	return anchor
}
