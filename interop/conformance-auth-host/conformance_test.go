package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// suiteTimeout bounds the run of the whole suite (its scenarios run in
// parallel, each client allowed 30 s).
const suiteTimeout = 4 * time.Minute

// check is one entry of the suite's checks.json.
type check struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Message string `json:"errorMessage"`
}

// pkce are the checks of PKCE S256 that every authorization passes.
var pkce = []string{"pkce-code-challenge-sent", "pkce-code-verifier-sent", "pkce-s256-method-used", "pkce-verifier-matches-challenge"}

// resource are the checks of the resource parameter (RFC 8707).
var resource = []string{"resource-parameter-consistency", "resource-parameter-in-authorization", "resource-parameter-in-token", "resource-parameter-matches-prm", "resource-parameter-valid-uri"}

// TestConformanceAuthSuite runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in scripts/npm) in client
// mode with --suite auth, every scenario of which (the extensions are not
// in it) runs this host, which runs `tidemark connect --oauth-browser
// fetch`: the bridge is the OAuth client. Each scenario must pass with no
// failure and no warning, with exactly the number of successful checks
// listed and among them the ones that name what it tests; each leaves one
// token file of mode 0600 in a directory of mode 0700 under
// $XDG_CONFIG_HOME/tidemark/tokens.
func TestConformanceAuthSuite(t *testing.T) {
	testenv.NeedNode(t)
	tidemark := testenv.BuildTidemark(t)
	host := testenv.Build(t, "./interop/conformance-auth-host")
	node := testenv.Node(t)
	suite := testenv.NPMBin(t, "conformance")
	scenarios := []struct {
		name      string
		successes int      // checks that succeed, repeats counted
		want      []string // checks that must be among them
	}{
		{"auth/basic-cimd", 13, append([]string{"cimd-client-id-used", "valid-bearer-token"}, pkce...)},
		{"auth/metadata-default", 18, append([]string{"prm-pathbased-requested", "authorization-server-metadata", "client-registration", "valid-bearer-token"}, resource...)},
		{"auth/metadata-var1", 18, append([]string{"prm-pathbased-requested", "authorization-server-metadata", "client-registration", "valid-bearer-token"}, resource...)},
		{"auth/metadata-var2", 18, append([]string{"prm-pathbased-requested", "authorization-server-metadata", "client-registration", "valid-bearer-token"}, resource...)},
		{"auth/metadata-var3", 18, append([]string{"prm-pathbased-requested", "authorization-server-metadata", "client-registration", "valid-bearer-token"}, resource...)},
		{"auth/pre-registration", 13, []string{"pre-registration-auth", "valid-bearer-token"}},
		{"auth/scope-from-scopes-supported", 14, []string{"scope-from-scopes-supported", "valid-bearer-token"}},
		{"auth/scope-from-www-authenticate", 14, []string{"scope-from-www-authenticate", "valid-bearer-token"}},
		{"auth/scope-omitted-when-undefined", 14, []string{"scope-omitted-when-undefined", "valid-bearer-token"}},
		// The server refuses every scope upgrade: one authorization per
		// request, never a loop; the host's call fails (403).
		{"auth/scope-retry-limit", 10, []string{"scope-retry-limit"}},
		{"auth/scope-step-up", 23, []string{"scope-step-up-initial", "scope-step-up-escalation", "valid-bearer-token"}},
		{"auth/token-endpoint-auth-basic", 19, []string{"token-endpoint-auth-method", "valid-bearer-token"}},
		{"auth/token-endpoint-auth-none", 19, []string{"token-endpoint-auth-method", "valid-bearer-token"}},
		{"auth/token-endpoint-auth-post", 19, []string{"token-endpoint-auth-method", "valid-bearer-token"}},
	}
	out := t.TempDir()
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	run := testenv.StartProcess(t, node, suite, "client", "--suite", "auth", "--command", host+" -tidemark "+tidemark, "-o", out)
	select {
	case <-run.Done():
	case <-time.After(suiteTimeout):
		t.Fatalf("conformance suite still running after %v; output:\n%s", suiteTimeout, run.Output())
	}
	if err := run.Wait(); err != nil {
		t.Errorf("conformance client --suite auth: %v", err)
	}
	ran := readSuite(t, filepath.Join(out, "auth"))
	var names []string
	for name := range ran {
		names = append(names, "auth/"+name)
	}
	slices.Sort(names)
	var want []string
	for _, sc := range scenarios {
		want = append(want, sc.name)
	}
	if !slices.Equal(names, want) {
		t.Errorf("scenarios run = %v, want %v", names, want)
	}
	for _, sc := range scenarios {
		checks := ran[strings.TrimPrefix(sc.name, "auth/")]
		var succeeded []string
		for _, c := range checks {
			switch c.Status {
			case "SUCCESS":
				succeeded = append(succeeded, c.ID)
			case "FAILURE", "WARNING":
				t.Errorf("%s: check %s: %s: %s", sc.name, c.ID, c.Status, c.Message)
			}
		}
		if len(succeeded) != sc.successes {
			t.Errorf("%s: %d checks succeeded, want %d: %v", sc.name, len(succeeded), sc.successes, succeeded)
		}
		for _, id := range sc.want {
			if !slices.Contains(succeeded, id) {
				t.Errorf("%s: check %s did not succeed; succeeded: %v", sc.name, id, succeeded)
			}
		}
	}
	if t.Failed() {
		t.Logf("suite output:\n%s", run.Output())
	}
	dir := filepath.Join(config, "tidemark", "tokens")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("token directory %s: %v, %v; want mode 0700", dir, fi, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != len(scenarios) {
		t.Errorf("%d token files, want %d (one per scenario's server): %v", len(files), len(scenarios), files)
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("token file %s: mode %v, %v; want 0600", f, fi.Mode().Perm(), err)
		}
	}
}

// readSuite reads the checks.json of each scenario the suite ran under dir
// (one directory per scenario, named for it and the time), by scenario.
func readSuite(t *testing.T, dir string) map[string][]check {
	t.Helper()
	ran := make(map[string][]check)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "checks.json" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var checks []check
		if err := json.Unmarshal(b, &checks); err != nil {
			return err
		}
		// The directory is <scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>.
		name := filepath.Base(filepath.Dir(path))
		if len(name) > len("-2006-01-02T15-04-05-000Z") {
			name = name[:len(name)-len("-2006-01-02T15-04-05-000Z")]
		}
		ran[name] = checks
		return nil
	})
	if err != nil {
		t.Fatalf("reading the suite's results: %v", err)
	}
	return ran
}
