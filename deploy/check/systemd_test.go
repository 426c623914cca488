package check

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// unitFile is the systemd unit, from the repository's root.
const unitFile = "deploy/systemd/tidemark.service"

// installedBinary is where the unit, and the image, have the binary.
const installedBinary = "/usr/local/bin/tidemark"

// hardening are the [Service] settings the unit must keep: they confine
// the process to its state directory and the network.
var hardening = map[string]string{
	"DynamicUser":             "yes",
	"NoNewPrivileges":         "yes",
	"CapabilityBoundingSet":   "",
	"ProtectSystem":           "strict",
	"ProtectHome":             "yes",
	"PrivateTmp":              "yes",
	"PrivateDevices":          "yes",
	"ProtectKernelTunables":   "yes",
	"ProtectKernelModules":    "yes",
	"ProtectControlGroups":    "yes",
	"RestrictNamespaces":      "yes",
	"RestrictSUIDSGID":        "yes",
	"MemoryDenyWriteExecute":  "yes",
	"SystemCallArchitectures": "native",
	"UMask":                   "0077",
}

// TestSystemdUnit: deploy/systemd/tidemark.service passes systemd-analyze
// verify without a word (its ExecStart pointed at the image's binary) and
// systemd-analyze security rates its exposure OK (2.0 or less); it runs
// tidemark serve with flags the binary declares on the image's ports, its
// --data-dir in its StateDirectory, its key ring from its credential, the
// hardening settings above, and a TimeoutStopSec above the process's own
// exit_within. Its ExecStart then runs here, the specifiers pointing at
// temporary directories: /readyz answers 200, and SIGTERM ends it within
// its exit_within.
func TestSystemdUnit(t *testing.T) {
	bin := imageBinary(t)
	flags := serveFlags(t, bin)
	ops := opsPort(t)
	mcpPort := port(t, "serve's default --addr", flags["addr"].def)
	d := parseDockerfile(t)
	if ep := entrypoint(t, d); ep != installedBinary {
		t.Errorf("Dockerfile: ENTRYPOINT %s; the unit and docs/deploying.md install the binary at %s", ep, installedBinary)
	}

	text, err := os.ReadFile(filepath.Join(repoRoot(t), unitFile))
	if err != nil {
		t.Fatal(err)
	}
	sections, err := unit.DeserializeSections(strings.NewReader(string(text)))
	if err != nil {
		t.Fatalf("%s: %v", unitFile, err)
	}
	service := map[string][]string{}
	for _, s := range sections {
		if s.Section != "Service" {
			continue
		}
		for _, e := range s.Entries {
			// go-systemd keeps a continued line's backslash and newline,
			// which systemd reads as a space (systemd.syntax(7)).
			service[e.Name] = append(service[e.Name], strings.ReplaceAll(e.Value, "\\\n", " "))
		}
	}
	one := func(name string) string {
		if len(service[name]) != 1 {
			t.Errorf("%s: [Service] has %d %s=; want one", unitFile, len(service[name]), name)
			return ""
		}
		return service[name][0]
	}
	for name, want := range hardening {
		if got := service[name]; !slices.Equal(got, []string{want}) {
			t.Errorf("%s: [Service] %s=%q; want %s=%s", unitFile, name, got, name, want)
		}
	}

	execStart := strings.Fields(one("ExecStart"))
	if len(execStart) < 2 || execStart[0] != installedBinary || execStart[1] != "serve" {
		t.Fatalf("%s: ExecStart=%q; want %s serve ...", unitFile, execStart, installedBinary)
	}
	args := serveArgs(t, unitFile, flags, execStart[2:])
	state := one("StateDirectory")
	if args["data-dir"] != "%S/"+state {
		t.Errorf("%s: --data-dir=%s; want %%S/%s, the StateDirectory= systemd creates for the service's user", unitFile, args["data-dir"], state)
	}
	credential, _, _ := strings.Cut(one("LoadCredential"), ":")
	if args["request-state-keys"] != "%d/"+credential {
		t.Errorf("%s: --request-state-keys=%s; want %%d/%s, the LoadCredential= file only the service reads", unitFile, args["request-state-keys"], credential)
	}
	if p := port(t, unitFile+" --addr", value(args, flags, "addr")); p != mcpPort {
		t.Errorf("%s: --addr port %s; want %s, serve's default", unitFile, p, mcpPort)
	}
	if p := port(t, unitFile+" --metrics-addr", value(args, flags, "metrics-addr")); p != ops {
		t.Errorf("%s: --metrics-addr port %s; want %s, as in the image", unitFile, p, ops)
	}
	if sig := service["KillSignal"]; sig != nil && !slices.Equal(sig, []string{"SIGTERM"}) {
		t.Errorf("%s: KillSignal=%q; tidemark serve drains on SIGTERM", unitFile, sig)
	}
	stopTimeout, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil {
		t.Errorf("%s: TimeoutStopSec: %v; want a duration with its unit, such as 30s", unitFile, err)
	}

	// systemd's own checks, on a copy whose ExecStart binary exists.
	testenv.Need(t, testenv.SystemdAnalyze)
	dir := t.TempDir()
	copied := filepath.Join(dir, "tidemark.service")
	if err := os.WriteFile(copied, []byte(strings.ReplaceAll(string(text), installedBinary, bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := execOutput("systemd-analyze", "verify", copied); err != nil || out != "" {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
	out, err := execOutput("systemd-analyze", "security", "--offline=yes", "--threshold=20", "--no-pager", copied)
	m := regexp.MustCompile(`Overall exposure level for tidemark\.service: ([0-9.]+) (\S+)`).FindStringSubmatch(out)
	if err != nil || m == nil || m[2] != "OK" {
		t.Errorf("systemd-analyze security %s: %v; want an exposure of 2.0 or less (OK):\n%s", unitFile, err, out)
	} else if level, _ := strconv.ParseFloat(m[1], 64); level > 2 {
		t.Errorf("systemd-analyze security %s: exposure %s", unitFile, m[1])
	}

	// ExecStart, run with %S and %d at temporary directories.
	stateRoot, creds := filepath.Join(dir, "state"), filepath.Join(dir, "credentials")
	for _, d := range []string{filepath.Join(stateRoot, state), creds} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(creds, credential), []byte(testKey()+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	var run []string
	for _, a := range execStart[1:] {
		run = append(run, strings.NewReplacer("%S", stateRoot, "%d", creds).Replace(a))
	}
	srv := startServe(t, bin, run, []string{"PATH=/usr/bin:/bin"})
	srv.p.WaitFor(t, `msg="request state keys" source="file `+regexp.QuoteMeta(creds), 5*time.Second)
	srv.awaitReady(t)
	within := srv.stop(t)
	if stopTimeout < within {
		t.Errorf("%s: TimeoutStopSec=%v; the process says it exits within %v of SIGTERM", unitFile, stopTimeout, within)
	}
	if strings.Contains(srv.p.Output(), "level=WARN") {
		t.Errorf("%s: tidemark serve warned:\n%s", unitFile, srv.p.Output())
	}
}

// execOutput runs name with args and returns its output, stdout and
// stderr together.
func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
