package main

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestEveryFlagFromEnv: each flag of tidemark serve but --version is read
// from its variable TIDEMARK_<FLAG> (--request-state-keys from
// TIDEMARK_REQUEST_STATE_KEYS_FILE): a bad value there exits 2 with one
// stderr line naming the variable, the flag and what it accepts.
func TestEveryFlagFromEnv(t *testing.T) {
	bad := badValues(t)["serve"]
	fs, _ := serveFlags(nil)
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if f.Name == "version" {
			if name != "" {
				t.Errorf("--version is read from %s, want from no variable", name)
			}
			return
		}
		args := []string{"serve", "--addr=127.0.0.1:0"}
		if f.Name == "addr" {
			args = args[:1]
		}
		code, stderr := runBinary(t, []string{name + "=" + bad[f.Name]}, args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "tidemark serve: ") ||
			!strings.Contains(lines[0], name) || !strings.Contains(lines[0], "--"+f.Name) || !strings.Contains(lines[0], "want") {
			t.Errorf("%s=%q tidemark serve: exit %d, stderr:\n%s\nwant exit 2 and one line naming %s, --%s and what it accepts", name, bad[f.Name], code, stderr, name, f.Name)
		}
	})
	for env, want := range map[string]string{
		"TIDEMARK_LOG_LEVEL=LOUD":                              "tidemark serve: TIDEMARK_LOG_LEVEL \"LOUD\" (--log-level): want DEBUG, INFO, WARN or ERROR\n",
		"TIDEMARK_MAX_SESSIONS=0":                              "tidemark serve: --max-sessions (from TIDEMARK_MAX_SESSIONS) 0: want a positive number of sessions\n",
		"TIDEMARK_UPSTREAM_HEADER=Authorization Bearer s3cret": "tidemark serve: TIDEMARK_UPSTREAM_HEADER (--upstream-header): want NAME: VALUE, e.g. \"Authorization: Bearer TOKEN\"\n",
	} {
		if code, stderr := runBinary(t, []string{env}, "serve", "--addr=127.0.0.1:0"); code != 2 || stderr != want {
			t.Errorf("%s tidemark serve: exit %d, stderr %q; want 2 and %q", env, code, stderr, want)
		}
	}
}

// TestEnvAndFlagPrecedence: a variable sets its flag when the command
// line does not (TIDEMARK_PATH serves at its path; a repeatable flag's
// variable holds one value per line), and the command line wins when
// both do.
func TestEnvAndFlagPrecedence(t *testing.T) {
	_, endpoint, _ := startObserved(t, []string{"TIDEMARK_PATH=/from-env"})
	if !strings.HasSuffix(endpoint, "/from-env") {
		t.Errorf("TIDEMARK_PATH=/from-env: serving at %s, want the path /from-env", endpoint)
	}
	_, endpoint, _ = startObserved(t, []string{"TIDEMARK_PATH=/from-env"}, "--path", "/from-flag")
	if !strings.HasSuffix(endpoint, "/from-flag") {
		t.Errorf("TIDEMARK_PATH=/from-env --path /from-flag: serving at %s, want the flag's path /from-flag", endpoint)
	}
	// The second line of TIDEMARK_UPSTREAM_FORWARD_HEADER is refused as
	// the flag would refuse it.
	code, stderr := runBinary(t, []string{"TIDEMARK_UPSTREAM_FORWARD_HEADER=X-Tenant\nMcp-Session-Id"}, "serve", "--addr=127.0.0.1:0", "--upstream=http://127.0.0.1:9/mcp")
	if want := "tidemark serve: upstream: header Mcp-Session-Id is set by the gateway itself and cannot be forwarded or added\n"; code != 2 || stderr != want {
		t.Errorf("two forwarded headers from the environment: exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}

// TestSecretsNeverLogged: the Redis password (in the --redis URL, in
// --redis-password-file, in $TIDEMARK_REDIS_PASSWORD, in
// $TIDEMARK_REDIS_PASSWORD_FILE) and the requestState key ring (in
// $TIDEMARK_REQUEST_STATE_KEYS, in $TIDEMARK_REQUEST_STATE_KEYS_FILE)
// reach what needs them (serve connects to a Redis that requires the
// password, and serves) and appear nowhere in its output at DEBUG, from
// its start to its stop; nor in the one line of a refused start
// (regression: the error of an unreachable --redis printed its URL with
// the password, and the serving line an --upstream URL with its
// password).
func TestSecretsNeverLogged(t *testing.T) {
	const (
		password = "s3cret-redis-password-6c1f"
		key      = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
	)
	srv := redistest.Start(t, redistest.Options{Password: password})
	dir := t.TempDir()
	passFile, keyFile := filepath.Join(dir, "redis-password"), filepath.Join(dir, "keys")
	if err := os.WriteFile(passFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withPassword := strings.Replace(srv.URL(), "redis://", "redis://:"+password+"@", 1)
	secrets := []string{password, password[:12], key, key[:16]}
	leaks := func(what, out string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s: the output holds the secret %q:\n%s", what, s, out)
			}
		}
	}
	bin := testenv.BuildTidemark(t)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"password file, keys in the environment", []string{"TIDEMARK_REQUEST_STATE_KEYS=" + key}, []string{"--redis", srv.URL(), "--redis-password-file", passFile}},
		{"password in the environment, key file in the environment", []string{"TIDEMARK_REDIS_PASSWORD=" + password, "TIDEMARK_REQUEST_STATE_KEYS_FILE=" + keyFile}, []string{"--redis", srv.URL()}},
		{"everything in the environment", []string{"TIDEMARK_REDIS=" + srv.URL(), "TIDEMARK_REDIS_PASSWORD_FILE=" + passFile, "TIDEMARK_REQUEST_STATE_KEYS=" + key}, nil},
		{"password in the URL, key file flag", nil, []string{"--redis", withPassword, "--request-state-keys", keyFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--log-level", "DEBUG"}, tc.args...)...)
			cmd.Env = append(os.Environ(), tc.env...)
			p := testenv.StartCmd(t, cmd)
			url := testenv.ServeURL(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := (&mcptest.Client{URL: url}).Initialize(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "hi"}, nil)); err != nil {
				t.Fatal(err)
			}
			p.Signal(syscall.SIGTERM)
			p.WaitFor(t, `msg=stopped`, 30*time.Second)
			leaks(tc.name, p.Output())
		})
	}
	t.Run("upstream URL with a password", func(t *testing.T) {
		p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--upstream", "http://gateway:"+password+"@127.0.0.1:9/mcp")
		testenv.ServeURL(t, p)
		if !strings.Contains(p.Output(), "upstream=http://gateway:xxxxx@127.0.0.1:9/mcp") {
			t.Errorf("the serving line does not name the upstream with its password redacted:\n%s", p.Output())
		}
		leaks("upstream URL", p.Output())
	})
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"a wrong password", []string{"TIDEMARK_REDIS_PASSWORD=" + password + "-wrong"}, []string{"--redis", srv.URL()}, 1, "tidemark serve: --redis redis://:xxxxx@" + srv.Addr() + "/0: cannot reach Redis (redis store: connect " + srv.Addr() + ": store unavailable: WRONGPASS"},
		{"the password twice", []string{"TIDEMARK_REDIS_PASSWORD=" + password}, []string{"--redis", withPassword}, 2,
			"tidemark serve: the Redis password is named by the --redis URL and $TIDEMARK_REDIS_PASSWORD: want one of them\n"},
		{"a URL go-redis cannot read", nil, []string{"--redis", withPassword + "?bogus=1"}, 2,
			"tidemark serve: --redis \"redis://:xxxxx@" + srv.Addr() + "/0?bogus=1\": redis: unexpected option: bogus: want redis://HOST:PORT/DB"},
		{"a password without --redis", []string{"TIDEMARK_REDIS_PASSWORD=" + password}, nil, 2,
			"tidemark serve: $TIDEMARK_REDIS_PASSWORD: want --redis too: a Redis password applies to a fleet's Redis only\n"},
	} {
		code, stderr := runBinary(t, tc.env, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, code, stderr, tc.code, tc.want)
		}
		leaks(tc.name, stderr)
	}
}
