package check

// What every test of the deployment files shares: the repository, the
// Dockerfile parsed, the binary built as the image builds it, the flags
// and defaults that binary declares, and `tidemark serve` run with a
// deployment's arguments.

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// testVersion is the VERSION build argument the tests build with.
const testVersion = "v0.0.0-deploycheck"

// testCommit and testBuilt are the COMMIT and BUILD_DATE build arguments the
// tests build with.
const (
	testCommit = "0123456789abcdef0123456789abcdef01234567"
	testBuilt  = "2026-12-06T01:00:00Z"
)

// repoRoot returns the repository's root: this module lives at deploy/check.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// dockerfile is the repository's Dockerfile, parsed by BuildKit.
type dockerfile struct {
	build, final *instructions.Stage
	// goBuild is the build stage's RUN that runs go build, and words its
	// command line split as a shell splits it, with the build arguments
	// TARGETOS, TARGETARCH (this machine's) and VERSION (testVersion)
	// expanded.
	goBuild *instructions.RunCommand
	words   []string
}

// parseDockerfile parses the Dockerfile: exactly two stages, the first
// named "build", with one RUN whose command runs go build.
func parseDockerfile(t testing.TB) *dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(res.Warnings) > 0 {
		t.Errorf("Dockerfile: the parser warns: %+v", res.Warnings)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) != 2 || stages[0].Name != "build" {
		t.Fatalf("Dockerfile: %d stages, the first named %q; want two: build, then the image", len(stages), stages[0].Name)
	}
	d := &dockerfile{build: &stages[0], final: &stages[1]}
	env := shell.EnvsFromSlice([]string{"TARGETOS=" + runtime.GOOS, "TARGETARCH=" + runtime.GOARCH, "VERSION=" + testVersion, "COMMIT=" + testCommit, "BUILD_DATE=" + testBuilt})
	for _, c := range d.build.Commands {
		run, ok := c.(*instructions.RunCommand)
		if !ok || !strings.Contains(strings.Join(run.CmdLine, " "), "go build") {
			continue
		}
		if d.goBuild != nil {
			t.Fatalf("Dockerfile: two RUN instructions run go build")
		}
		if !run.PrependShell || len(run.CmdLine) != 1 {
			t.Fatalf("Dockerfile: the go build RUN is %q; want the shell form, one command", run.CmdLine)
		}
		words, err := shell.NewLex(res.EscapeToken).ProcessWords(run.CmdLine[0], env)
		if err != nil {
			t.Fatalf("Dockerfile: %v", err)
		}
		for _, w := range words {
			if w == "&&" || w == ";" || w == "|" || w == "||" {
				t.Fatalf("Dockerfile: the go build RUN %q chains commands; want go build alone, so that its command line is the binary's recipe", run.CmdLine[0])
			}
		}
		d.goBuild, d.words = run, words
	}
	if d.goBuild == nil {
		t.Fatal("Dockerfile: the build stage has no RUN of go build")
	}
	return d
}

// buildCommand splits the go build RUN's words into the environment
// assignments that precede the command, the arguments of go, and the
// value of -o.
func (d *dockerfile) buildCommand(t testing.TB) (env, args []string, out string) {
	t.Helper()
	words := d.words
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
		env, words = append(env, words[0]), words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		t.Fatalf("Dockerfile: the RUN's command is %q; want go build after the environment", words)
	}
	args = slices.Clone(words[1:])
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			out = args[i+1]
		}
	}
	if out == "" {
		t.Fatalf("Dockerfile: go build %q has no -o OUTPUT", args)
	}
	return env, args, out
}

// imageBuild is the binary built once per test binary by imageBinary.
var imageBuild struct {
	once      sync.Once
	dir, path string // dir holds the context's copy and the binary
	err       error
}

// imageBinary returns a tidemark binary built as the Dockerfile's build
// stage builds it: with its go build command line and environment, in a
// copy of the build context that .dockerignore leaves, with VERSION
// testVersion. It is built once per test binary.
func imageBinary(t testing.TB) string {
	t.Helper()
	d := parseDockerfile(t)
	root := repoRoot(t)
	env, args, out := d.buildCommand(t) // outside once: it may t.Fatal
	imageBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "tidemark-image-")
		if err != nil {
			imageBuild.err = err
			return
		}
		imageBuild.dir = dir
		ctx := filepath.Join(dir, "src")
		if imageBuild.err = copyContext(root, ctx); imageBuild.err != nil {
			return
		}
		bin := filepath.Join(dir, "tidemark")
		args[slices.Index(args, out)] = bin
		cmd := exec.Command("go", args...)
		cmd.Dir = ctx
		// The golang image sets none of these; the RUN sets its own.
		for _, kv := range os.Environ() {
			name, _, _ := strings.Cut(kv, "=")
			if !slices.Contains([]string{"GOFLAGS", "CGO_ENABLED", "GOOS", "GOARCH"}, name) {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			imageBuild.err = fmt.Errorf("%s in the build context: %v\n%s", strings.Join(cmd.Args, " "), err, msg)
			return
		}
		imageBuild.path = bin
	})
	if imageBuild.err != nil {
		t.Fatalf("building tidemark as the Dockerfile does: %v", imageBuild.err)
	}
	return imageBuild.path
}

// TestMain removes the image binary's directory after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if imageBuild.dir != "" {
		os.RemoveAll(imageBuild.dir)
	}
	os.Exit(code)
}

// copyContext copies the files of root that .dockerignore does not exclude
// into dst, as docker build sends its context.
func copyContext(root, dst string) error {
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		return err
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		return err
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return err
	}
	if pm.Exclusions() {
		return fmt.Errorf(".dockerignore has exceptions (!PATTERN); copyContext copies whole excluded directories out")
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		switch {
		case err != nil:
			return err
		case excluded && e.IsDir():
			return filepath.SkipDir
		case excluded:
			return nil
		case e.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !e.Type().IsRegular():
			return fmt.Errorf("%s: the build context holds only regular files and directories", rel)
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// serveFlag is a flag of `tidemark serve` as its help lists it.
type serveFlag struct {
	isBool bool
	def    string // the default as flag.Value's String: "10s", "127.0.0.1:8080", "" for a zero value
}

// serveFlags returns the flags `bin serve -h` lists, by name: what the
// binary accepts, with its defaults.
func serveFlags(t testing.TB, bin string) map[string]serveFlag {
	t.Helper()
	out, err := exec.Command(bin, "serve", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("%s serve -h: %v\n%s", bin, err, out)
	}
	flags := map[string]serveFlag{}
	name := regexp.MustCompile(`^  -([a-z0-9-]+)(?: (\S+))?$`)
	def := regexp.MustCompile(`\(default (.*)\)$`)
	var last string
	for _, line := range strings.Split(string(out), "\n") {
		if m := name.FindStringSubmatch(line); m != nil {
			last = m[1]
			flags[last] = serveFlag{isBool: m[2] == ""}
			continue
		}
		m := def.FindStringSubmatch(line)
		if m == nil || last == "" || !strings.HasPrefix(line, "    \t") {
			continue
		}
		v := m[1]
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		f := flags[last]
		f.def = v
		flags[last] = f
	}
	if len(flags) < 20 || flags["addr"].def == "" || flags["shutdown-grace"].def == "" {
		t.Fatalf("%s serve -h lists %d flags (%v); the parser of its help no longer fits:\n%s", bin, len(flags), flags, out)
	}
	return flags
}

// serveArgs reads the arguments of `tidemark serve` (without "serve") as
// the flag package does, --name=value, --name value or a bool --name,
// and returns the value of each flag, failing the test for a flag the
// binary does not declare or an argument that is no flag. where names the
// deployment file in messages.
func serveArgs(t testing.TB, where string, flags map[string]serveFlag, args []string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: serve argument %q is not a flag", where, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := flags[name]
		switch {
		case !ok:
			t.Errorf("%s: tidemark serve has no flag --%s (serve -h lists the flags)", where, name)
			continue
		case !hasValue && f.isBool:
			value = "true"
		case !hasValue && i+1 < len(args):
			i++
			value = args[i]
		case !hasValue:
			t.Errorf("%s: flag --%s has no value", where, name)
		}
		if _, dup := got[name]; dup {
			t.Errorf("%s: flag --%s is given twice", where, name)
		}
		got[name] = value
	}
	return got
}

// value returns the flag's value in args, else the binary's default.
func value(args map[string]string, flags map[string]serveFlag, name string) string {
	if v, ok := args[name]; ok {
		return v
	}
	return flags[name].def
}

// port returns the port of a host:port, failing the test otherwise.
func port(t testing.TB, where, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Errorf("%s: %q is not host:port: %v", where, hostport, err)
	}
	return p
}

// served is a `tidemark serve` a test started with a deployment's
// arguments.
type served struct {
	p *testenv.Process
	// adminAddr is the operator's listener's address.
	adminAddr string
	// memoryLimit is the serving line's memory_limit (bytes).
	memoryLimit int64
}

// startServe runs bin with args (a deployment's, "serve" first) and
// environment env, both listeners moved to free loopback ports
// (--addr and --metrics-addr become 127.0.0.1:0), and waits for its
// "serving" line, whose log format is JSON (the deployments'
// --log-format=json) or text.
func startServe(t testing.TB, bin string, args, env []string) *served {
	t.Helper()
	args = slices.Clone(args)
	for i, a := range args {
		for _, name := range []string{"--addr", "--metrics-addr"} {
			if strings.HasPrefix(a, name+"=") {
				args[i] = name + "=127.0.0.1:0"
			}
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	p := testenv.StartCmd(t, cmd)
	s := &served{p: p}
	m := p.WaitFor(t, `"msg":"operator's listener started","url":"http://([^"]+)"|msg="operator's listener started" url=http://(\S+)`, 30*time.Second)
	s.adminAddr = m[1] + m[2]
	m = p.WaitFor(t, `"msg":"serving",.*"memory_limit":(\d+)|msg=serving .*memory_limit=(\d+)`, 30*time.Second)
	s.memoryLimit, _ = strconv.ParseInt(m[1]+m[2], 10, 64)
	return s
}

// get answers GET path on the operator's listener: the status and the
// JSON body decoded.
func (s *served) get(t testing.TB, path string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get("http://" + s.adminAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %d, body not JSON: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode, body
}

// awaitReady waits up to 20 s for /readyz to answer 200.
func (s *served) awaitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := s.get(t, "/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz answers %d %v 20s after the start", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends SIGTERM, and returns the "shutting down" line's exit_within
// once the process has exited 0.
func (s *served) stop(t testing.TB) time.Duration {
	t.Helper()
	if err := s.p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Both log formats write a duration as time.Duration.String does.
	m := s.p.WaitFor(t, `"msg":"shutting down",.*"exit_within":"([^"]+)"|msg="shutting down" .*exit_within=(\S+)`, 10*time.Second)
	within, err := time.ParseDuration(m[1] + m[2])
	if err != nil {
		t.Fatalf("the shutting down line's exit_within: %v", err)
	}
	select {
	case <-s.p.Done():
	case <-time.After(within):
		t.Fatalf("tidemark serve did not exit within %v of SIGTERM, its own exit_within", within)
	}
	if err := s.p.Wait(); err != nil {
		t.Fatalf("tidemark serve after SIGTERM: %v, want exit status 0", err)
	}
	return within
}

// testKey returns a key ring of one fresh key: 32 random bytes in base64,
// as openssl rand -base64 32 prints one.
func testKey() string {
	key := make([]byte, 32)
	rand.Read(key)
	return base64.StdEncoding.EncodeToString(key)
}
