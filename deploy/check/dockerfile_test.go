package check

import (
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"golang.org/x/mod/modfile"
)

// The final stage's bases the image may have: no shell, no libc, nothing
// but what a static binary needs.
var finalBases = []string{"gcr.io/distroless/static-debian12:nonroot", "scratch"}

// opsPort is the operator's listener's port in every deployment file
// (the binary has no default --metrics-addr: the listener is off unless
// asked for). The Dockerfile's CMD states it; the others must agree.
func opsPort(t testing.TB) string {
	t.Helper()
	d := parseDockerfile(t)
	cmd := dockerCmd(t, d)
	for i, a := range cmd {
		if a == "--metrics-addr" && i+1 < len(cmd) {
			return port(t, "Dockerfile CMD", cmd[i+1])
		}
	}
	t.Fatalf("Dockerfile: CMD %q has no --metrics-addr HOST:PORT", cmd)
	return ""
}

// dockerCmd returns the final stage's CMD (exec form).
func dockerCmd(t testing.TB, d *dockerfile) []string {
	t.Helper()
	for _, c := range d.final.Commands {
		if cmd, ok := c.(*instructions.CmdCommand); ok {
			if cmd.PrependShell {
				t.Fatalf("Dockerfile: CMD %q is in the shell form; the image has no shell: use the exec form", cmd.CmdLine)
			}
			return cmd.CmdLine
		}
	}
	t.Fatal("Dockerfile: the image has no CMD")
	return nil
}

// entrypoint returns the final stage's ENTRYPOINT (exec form, one
// element: the binary).
func entrypoint(t testing.TB, d *dockerfile) string {
	t.Helper()
	for _, c := range d.final.Commands {
		if e, ok := c.(*instructions.EntrypointCommand); ok {
			if e.PrependShell || len(e.CmdLine) != 1 {
				t.Fatalf("Dockerfile: ENTRYPOINT %q; want the exec form naming the binary alone", e.CmdLine)
			}
			return e.CmdLine[0]
		}
	}
	t.Fatal("Dockerfile: the image has no ENTRYPOINT")
	return ""
}

// TestDockerfile: the image is built in two stages; the builder is the Go
// release of go.mod; the go build is static (CGO_ENABLED=0), -trimpath,
// and links VERSION into main.version; the image is distroless (or
// scratch) with the binary as its ENTRYPOINT, runs as a numeric non-root
// user, exposes the MCP port (the binary's default --addr port) and the
// operator's port, and its CMD uses flags the binary declares on those
// ports.
func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t)
	bin := imageBinary(t)
	flags := serveFlags(t, bin)

	// The builder's Go is go.mod's.
	mod, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.ParseLax("go.mod", mod, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "golang:" + mf.Go.Version + "-"; !strings.HasPrefix(d.build.BaseName, want) {
		t.Errorf("Dockerfile: the build stage is FROM %s; want %s… (go.mod's go %s)", d.build.BaseName, want, mf.Go.Version)
	}

	// The go build command line.
	env, args, out := d.buildCommand(t)
	for _, want := range []string{"CGO_ENABLED=0", "GOOS=" + runtime.GOOS, "GOARCH=" + runtime.GOARCH} {
		if !slices.Contains(env, want) {
			t.Errorf("Dockerfile: go build runs with %q; want %s among them", env, want)
		}
	}
	if !slices.Contains(args, "-trimpath") {
		t.Errorf("Dockerfile: go build %q has no -trimpath", args)
	}
	ldflags := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "-ldflags="); ok {
			ldflags = v
		}
	}
	if !regexp.MustCompile(`(^| )-X main\.version=` + regexp.QuoteMeta(testVersion) + `( |$)`).MatchString(ldflags) {
		t.Errorf("Dockerfile: go build -ldflags=%q; want -X main.version=${VERSION}", ldflags)
	}
	if args[len(args)-1] != "./cmd/tidemark" {
		t.Errorf("Dockerfile: go build %q; want ./cmd/tidemark last", args)
	}

	// The image.
	if !slices.Contains(finalBases, d.final.BaseName) {
		t.Errorf("Dockerfile: the image is FROM %s; want one of %q", d.final.BaseName, finalBases)
	}
	imageUser(t, d)
	var exposed []string
	copied := map[string]string{} // destination: source, of COPY --from=build
	for _, c := range d.final.Commands {
		switch c := c.(type) {
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.CopyCommand:
			if c.From == d.build.Name {
				for _, src := range c.SourcePaths {
					copied[c.DestPath] = src
				}
			}
		case *instructions.RunCommand:
			t.Errorf("Dockerfile: the image stage runs %q; it has no shell to run it", c.CmdLine)
		}
	}
	ep := entrypoint(t, d)
	if copied[ep] != out {
		t.Errorf("Dockerfile: ENTRYPOINT %s is copied from %q; want go build's -o %s", ep, copied[ep], out)
	}
	mcpPort := port(t, "serve's default --addr", flags["addr"].def)
	if want := []string{mcpPort, opsPort(t)}; !slices.Equal(exposed, want) {
		t.Errorf("Dockerfile: EXPOSE %q; want %q (the MCP port, the operator's port)", exposed, want)
	}
	cmd := dockerCmd(t, d)
	if len(cmd) == 0 || cmd[0] != "serve" {
		t.Fatalf("Dockerfile: CMD %q; want serve first", cmd)
	}
	got := serveArgs(t, "Dockerfile CMD", flags, cmd[1:])
	if p := port(t, "Dockerfile CMD --addr", value(got, flags, "addr")); p != mcpPort {
		t.Errorf("Dockerfile: CMD listens on port %s; want %s, the port EXPOSEd", p, mcpPort)
	}
	for _, name := range []string{"addr", "metrics-addr"} {
		if host, _, _ := strings.Cut(got[name], ":"); host != "0.0.0.0" {
			t.Errorf("Dockerfile: CMD --%s=%s; want 0.0.0.0:PORT, every interface of the container", name, got[name])
		}
	}
}

// TestImageBinary: the binary built as the Dockerfile builds it is
// statically linked (no program interpreter, no shared library), records
// the Dockerfile's build settings, and prints the VERSION it was given.
func TestImageBinary(t *testing.T) {
	bin := imageBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the image's binary has a %v program header: it is dynamically linked, and would not run on %s", p.Type, finalBases[0])
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the image's binary needs shared libraries %q (%v)", libs, err)
	}

	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": runtime.GOOS, "GOARCH": runtime.GOARCH} {
		if settings[k] != want {
			t.Errorf("the image's binary records %s=%q; want %q", k, settings[k], want)
		}
	}
	if _, ok := settings["vcs.revision"]; ok {
		t.Errorf("the image's binary records a VCS revision; the build context has no .git, so the Dockerfile's build must not depend on one")
	}

	out, err := exec.Command(bin, "version").Output()
	want := "tidemark " + testVersion + " " + info.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH +
		" (commit " + testCommit + ", built " + testBuilt + ")\n"
	if err != nil || string(out) != want {
		t.Errorf("tidemark version: %q (%v); want %q", out, err, want)
	}
}

// imageUser returns the uid of the image's USER, failing the test unless
// it is a number other than 0: Kubernetes' runAsNonRoot can check only a
// numeric user.
func imageUser(t testing.TB, d *dockerfile) int64 {
	t.Helper()
	user := ""
	for _, c := range d.final.Commands {
		if u, ok := c.(*instructions.UserCommand); ok {
			user = u.User
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	n, err := strconv.ParseInt(uid, 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("Dockerfile: USER %q; want a numeric non-root user (65532:65532, distroless's nonroot), which runAsNonRoot can check", user)
	}
	return n
}
