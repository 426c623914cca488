package interop

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// README.md's claims about clients, checked against the tests.

// readmeSection returns the text of README.md's "## heading" section, up
// to the next "## " heading.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no section %q", "## "+heading)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// clientTestFiles hold the tests README's client section cites; every test
// in them must be cited.
var clientTestFiles = []string{"typescript_test.go", "inspector_test.go", "mcpremote_test.go", "gosdk_test.go", "mcpgo_test.go"}

var testNameRE = regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")

// TestREADMEClientSections checks that every row of the tables in README's
// "What MCP clients do with Tidemark's answers" names a test, that every
// test it names exists in this package, and that every test of the client
// test files is named there.
func TestREADMEClientSections(t *testing.T) {
	section := readmeSection(t, "What MCP clients do with Tidemark's answers")
	defined := testFuncs(t, ".") // test name → file
	cited := map[string]bool{}
	rows := 0
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| answer ") || strings.HasPrefix(line, "| ---") {
			continue
		}
		rows++
		names := testNameRE.FindAllStringSubmatch(line, -1)
		if len(names) == 0 {
			t.Errorf("README row cites no test: %s", line)
		}
		for _, m := range names {
			cited[m[1]] = true
			if _, ok := defined[m[1]]; !ok {
				t.Errorf("README cites %s, which package interop does not define", m[1])
			}
		}
	}
	if want := 4 * len(clientTestFiles); rows != want {
		t.Errorf("README's client tables have %d rows, want %d (cut, 409, 404, 2026-07-28 for each of %d clients)", rows, want, len(clientTestFiles))
	}
	for name, file := range defined {
		if slices.Contains(clientTestFiles, file) && !cited[name] {
			t.Errorf("%s (%s) is not cited in README's client section", name, file)
		}
	}
}

// testFuncs returns the Test functions of the _test.go files in dir, each
// with its file's name.
func testFuncs(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				out[fn.Name.Name] = filepath.Base(path)
			}
		}
	}
	return out
}
