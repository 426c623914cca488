// design_test.go checks that the documents the code cites are in the
// repository, and that every citation of a design section names a
// heading the design document has, in the one form the project writes:
// (DESIGN.md, "Vocabulary").

package tidemark_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// designDoc is the design document's name. It is spelled in two parts
// so that this file cites nothing itself.
const designDoc = "DESIGN" + ".md"

var (
	// mdRef finds the name of a markdown file, with the path written
	// before it, that is not part of a URL (demo://a/b.md) or of a
	// longer name.
	mdRef = regexp.MustCompile(`(?:^|[^\w./:-])((?:[\w.-]+/)*[\w-]+\.md)\b`)
	// citation is a citation in the one form: the design document and a
	// quoted section, inside parentheses, alone or next to other sources
	// separated by semicolons.
	citation = regexp.MustCompile(`(\(|; )` + regexp.QuoteMeta(designDoc) + `, "([^"]+)"[);]`)
	// joint is a line break with the comment marker and indentation of
	// the next line: a citation may wrap across comment lines.
	joint = regexp.MustCompile("\n[ \t]*(?://|#)?[ \t]*")
	// heading is a markdown ATX heading of any level.
	heading = regexp.MustCompile(`^#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$`)
)

// TestDesignCitations fails when a Go file or a testdata file cites a
// markdown file the repository does not hold, when a citation of the
// design document is not in the one form, or when it names a section
// that is not a heading of the design document. The README and
// CONTRIBUTING documents at the root are checked for citations in the
// one form that name no heading.
func TestDesignCitations(t *testing.T) {
	headings := designHeadings(t)
	var problems []string
	for _, path := range citingFiles(t) {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(raw, 0) >= 0 {
			continue // binary testdata
		}
		text := string(raw)
		problems = append(problems, missingDocs(path, text)...)
		problems = append(problems, designCitations(path, text, headings, true)...)
	}
	for _, name := range []string{"README", "CONTRIBUTING"} {
		doc := name + ".md"
		raw, err := os.ReadFile(doc)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		problems = append(problems, designCitations(doc, string(raw), headings, false)...)
	}
	if len(problems) > 0 {
		t.Errorf("citations that lead nowhere: %d\n  %s\n\nCite a section as (%s, \"Heading\"), with a heading %s has:\n  %s",
			len(problems), strings.Join(problems, "\n  "), designDoc, designDoc, strings.Join(headings, "\n  "))
	}
}

// designHeadings returns the headings of the design document, of any
// level, in order; lines in fenced code blocks are not headings.
func designHeadings(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(designDoc)
	if err != nil {
		t.Fatalf("the design document must be at the repository root: %v", err)
	}
	defer f.Close()
	var hs []string
	fenced := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil && !fenced {
			hs = append(hs, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return hs
}

// citingFiles returns the Go files and the testdata files of the
// repository, relative to its root (the working directory): those git
// tracks, and new ones it does not ignore. Without git it walks the
// tree, leaving out hidden directories and node_modules.
func citingFiles(t *testing.T) []string {
	t.Helper()
	var all []string
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err == nil {
		all = strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	} else {
		t.Logf("git ls-files: %v; walking the tree instead", err)
		err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				all = append(all, filepath.ToSlash(path))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var files []string
	for _, path := range all {
		if !strings.HasSuffix(path, ".go") && !slices.Contains(strings.Split(path, "/"), "testdata") {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			continue // tracked, and deleted in the work tree
		}
		files = append(files, path)
	}
	if len(files) == 0 {
		t.Fatal("found no Go files to check")
	}
	return files
}

// missingDocs returns a problem for each markdown file that text, the
// content of path, names and that is not in the repository. A name is
// looked for next to path, then in each directory above it up to the
// repository root.
func missingDocs(path, text string) []string {
	var problems []string
	for _, m := range mdRef.FindAllStringSubmatchIndex(text, -1) {
		name := text[m[2]:m[3]]
		if !docExists(filepath.Dir(path), name) {
			problems = append(problems, location(path, text, m[2])+": cites "+name+", which is not in the repository")
		}
	}
	return problems
}

// docExists reports whether name, relative to dir or to a directory
// above it, is a file inside the repository.
func docExists(dir, name string) bool {
	for {
		p := filepath.Join(dir, name)
		if !strings.HasPrefix(p, "..") {
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return true
			}
		}
		if dir == "." {
			return false
		}
		dir = filepath.Dir(dir)
	}
}

// designCitations returns a problem for each citation of the design
// document in text, the content of path, that names a section the
// headings do not hold and, when strict, for each mention of the design
// document that is not a citation in the one form.
func designCitations(path, text string, headings []string, strict bool) []string {
	flat, lines := flatten(text)
	cited := map[int]bool{} // offsets in flat of the citations' document names
	var problems []string
	for _, m := range citation.FindAllStringSubmatchIndex(flat, -1) {
		cited[m[3]] = true
		section := flat[m[4]:m[5]]
		if !slices.Contains(headings, section) {
			problems = append(problems, fmt.Sprintf("%s:%d: cites %s, %q, which is not a heading of %s", path, lines[m[3]], designDoc, section, designDoc))
		}
	}
	if !strict {
		return problems
	}
	for i := 0; ; {
		j := strings.Index(flat[i:], designDoc)
		if j < 0 {
			break
		}
		i += j
		if !cited[i] {
			end := min(i+len(designDoc)+40, len(flat))
			problems = append(problems, fmt.Sprintf("%s:%d: cites %s not in the form (%s, \"Heading\"): %s",
				path, lines[i], designDoc, designDoc, strings.TrimSpace(flat[max(i-20, 0):end])))
		}
		i += len(designDoc)
	}
	return problems
}

// flatten joins text's lines, each line break with the next line's
// indentation and comment marker (// or #) becoming one space, so that a
// citation wrapped across comment lines reads as one. lines[i] is the
// line of text that flat[i] comes from.
func flatten(text string) (flat string, lines []int) {
	var b strings.Builder
	line, last := 1, 0
	for _, m := range joint.FindAllStringIndex(text, -1) {
		b.WriteString(text[last:m[0]])
		for range m[0] - last {
			lines = append(lines, line)
		}
		b.WriteByte(' ')
		lines = append(lines, line)
		line++
		last = m[1]
	}
	b.WriteString(text[last:])
	for range len(text) - last {
		lines = append(lines, line)
	}
	return b.String(), lines
}

// location returns path:line of offset i of text.
func location(path, text string, i int) string {
	return fmt.Sprintf("%s:%d", path, 1+strings.Count(text[:i], "\n"))
}
