package interop

import (
	"bytes"
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// The documents' claims about clients (docs/clients.md) and README's curl
// walkthrough, checked against the tests and against a running server.

// clientsDoc is the page whose tables say what each client does with
// Tidemark's answers, and clientsHeading its title.
const (
	clientsDoc     = "docs/clients.md"
	clientsHeading = "What MCP clients do with Tidemark's answers"
)

// clientTestFiles hold the tests docs/clients.md cites; every test
// in them must be cited.
var clientTestFiles = []string{"typescript_test.go", "inspector_test.go", "mcpremote_test.go", "gosdk_test.go", "mcpgo_test.go"}

var testNameRE = regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")

// TestDocsClientTables checks that every row of the tables of
// docs/clients.md ("What MCP clients do with Tidemark's answers") names a test, that every
// test it names exists in this package, and that every test of the client
// test files is named there.
func TestDocsClientTables(t *testing.T) {
	section := testenv.DocSection(t, clientsDoc, clientsHeading)
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
			t.Errorf("%s: a row cites no test: %s", clientsDoc, line)
		}
		for _, m := range names {
			cited[m[1]] = true
			if _, ok := defined[m[1]]; !ok {
				t.Errorf("%s cites %s, which package interop does not define", clientsDoc, m[1])
			}
		}
	}
	if want := 4 * len(clientTestFiles); rows != want {
		t.Errorf("%s: the client tables have %d rows, want %d (cut, 409, 404, 2026-07-28 for each of %d clients)", clientsDoc, rows, want, len(clientTestFiles))
	}
	for name, file := range defined {
		if slices.Contains(clientTestFiles, file) && !cited[name] {
			t.Errorf("%s (%s) is not cited in %s", name, file, clientsDoc)
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

// walkStep is one command of the walkthrough and the output README shows.
type walkStep struct {
	command string
	output  string
}

// walkthrough returns the commands of README's "One session with curl",
// in order: the "$ " lines of its console blocks (with their "\"
// continuations) and the lines after each, up to the next command.
func walkthrough(t *testing.T) []walkStep {
	t.Helper()
	section := testenv.DocSection(t, "README.md", "One session with curl")
	var steps []walkStep
	inBlock, inCommand := false, false
	for line := range strings.SplitSeq(section, "\n") {
		switch {
		case line == "```console":
			inBlock = true
		case line == "```":
			inBlock, inCommand = false, false
		case !inBlock:
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, walkStep{command: strings.TrimPrefix(line, "$ ")})
			inCommand = strings.HasSuffix(line, `\`)
		case inCommand:
			steps[len(steps)-1].command += "\n" + line
			inCommand = strings.HasSuffix(line, `\`)
		default:
			steps[len(steps)-1].output += line + "\n"
		}
	}
	if len(steps) == 0 {
		t.Fatal("README's curl walkthrough has no commands")
	}
	return steps
}

// The values that differ from one run to the next: README shows its own,
// the test substitutes the server's.
var (
	cursorRE   = regexp.MustCompile(`\b[0-9a-f]{8}-[0-9]+-[0-9]+-[0-9]+\b`)
	tokenRE    = regexp.MustCompile(`\b[A-Z2-7]{26}\b`)
	readmeBase = "http://127.0.0.1:8080/mcp"
)

// TestREADMECurlWalkthrough runs README's curl walkthrough as written
// against `tidemark serve` with its default flags, and checks that each
// command prints what README shows. The session token and the cursors
// differ from run to run: the test pairs README's values with the
// server's by their order of appearance in each output, and substitutes
// them in later commands and expected outputs.
func TestREADMECurlWalkthrough(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"curl", "bash", "head"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := tool + " is not installed: apt-get install -y " + tool + " (scripts/deps.sh installs curl)"
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	steps := walkthrough(t)
	server := testenv.StartProcess(t, testenv.BuildTidemark(t), "serve", "--addr", "127.0.0.1:0")
	url := testenv.ServeURL(t, server)
	subst := substitution{}
	for i, s := range steps {
		cmd := strings.ReplaceAll(subst.apply(s.command), readmeBase, url)
		if unknown := subst.unknown(cmd); len(unknown) > 0 {
			t.Fatalf("command %d uses %v, which no earlier output of README shows", i+1, unknown)
		}
		got := runShell(t, cmd)
		subst.learn(t, s.output, got)
		if want := subst.apply(s.output); got != want {
			t.Errorf("command %d:\n%s\nprinted:\n%s\nREADME shows (values substituted):\n%s", i+1, cmd, got, want)
		}
	}
}

// runShell runs cmd with bash and returns its stdout; it fails the test
// when cmd exits non-zero or runs over 30 seconds.
func runShell(t *testing.T, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-c", cmd)
	c.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("%s\n: %v; stderr:\n%s", cmd, err, stderr.String())
	}
	return stdout.String()
}

// substitution maps README's session tokens and cursors to the server's.
type substitution map[string]string

// learn pairs the k-th token and cursor of README's output with the k-th
// of the server's.
func (s substitution) learn(t *testing.T, readme, server string) {
	t.Helper()
	for _, re := range []*regexp.Regexp{tokenRE, cursorRE} {
		want, got := re.FindAllString(readme, -1), re.FindAllString(server, -1)
		for i := range min(len(want), len(got)) {
			if prev, ok := s[want[i]]; ok && prev != got[i] {
				t.Errorf("README's %s stands for both %s and %s", want[i], prev, got[i])
			}
			s[want[i]] = got[i]
		}
	}
	for readmeToken, serverToken := range s {
		if tokenRE.MatchString(readmeToken) {
			// Messages name a session by its first 8 characters.
			s[readmeToken[:8]+"…"] = serverToken[:8] + "…"
		}
	}
}

// apply replaces every README value s knows in text.
func (s substitution) apply(text string) string {
	for from, to := range s {
		if strings.HasSuffix(from, "…") {
			text = strings.ReplaceAll(text, from, to)
		}
	}
	replace := func(v string) string {
		if to, ok := s[v]; ok {
			return to
		}
		return v
	}
	return cursorRE.ReplaceAllStringFunc(tokenRE.ReplaceAllStringFunc(text, replace), replace)
}

// unknown returns the README values in cmd that s cannot map yet (a
// command citing a token or cursor before any output showed it).
func (s substitution) unknown(cmd string) []string {
	var out []string
	for _, re := range []*regexp.Regexp{tokenRE, cursorRE} {
		for _, v := range re.FindAllString(cmd, -1) {
			if !slices.Contains(slices.Collect(maps.Values(s)), v) {
				out = append(out, v)
			}
		}
	}
	return out
}

// TestProbeToolThatAsksTheClient backs the advice of docs/probe.md on
// servers whose tools ask the client: `tidemark probe --tool confirm --args
// '{"question":"ok?"}'`, as that page writes it, against `tidemark serve`
// stops before any check with exit 1, because the probe declares no
// elicitation capability and the demo's elicitation tool fails without
// asking.
func TestProbeToolThatAsksTheClient(t *testing.T) {
	t.Parallel()
	bin := testenv.BuildTidemark(t)
	server := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0")
	url := testenv.ServeURL(t, server)
	probe := testenv.StartProcess(t, bin, "probe", "--tool", "confirm", "--args", `{"question":"ok?"}`, url)
	waitExit(t, probe, clientBound)
	var exit *exec.ExitError
	if err := probe.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("probe exited with %v, want exit status 1", err)
	}
	for _, want := range []string{"the baseline call failed", "confirm needs a client that answers elicitation requests"} {
		if !strings.Contains(probe.Output(), want) {
			t.Errorf("probe output lacks %q:\n%s", want, probe.Output())
		}
	}
}
