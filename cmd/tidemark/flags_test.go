package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// badValues holds, for every flag of each command, a value it refuses;
// TestEveryFlagRefusesInOneLine fails for a flag missing here, so a new
// flag comes with its bad value.
func badValues(t *testing.T) map[string]map[string]string {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]map[string]string{
		"serve": {
			"addr": "8080", "path": "mcp", "json-response": "maybe", "protocol": "2025-11-25",
			"retention-events": "x", "retention-bytes": "x", "retention-age": "5", "retention-budget": "x",
			"session-idle-ttl": "5", "hibernate-after": "-1s", "stdio-hibernate": "maybe", "max-sessions": "x", "max-calls-per-session": "x", "retry": "5", "keepalive": "5",
			"max-body-bytes": "x", "max-inflight-bytes": "x", "max-listens": "0", "shutdown-grace": "5",
			"log-level": "LOUD", "log-format": "xml", "stdio": "maybe", "env": "x",
			"data-dir": notDir, "redis": "notaurl://", "redis-password-file": dir, "replica-id": "a b", "lease-ttl": "5", "lease-renew": "5",
			"redis-replicas": "x", "redis-replication-timeout": "5", "advertise-url": "notaurl",
			"request-state-keys": dir, "request-state-ttl": "5", "request-state-single-use": "maybe",
			"request-state-used-max": "x", "metrics-addr": "9464", "max-processes": "x", "stdio-init-timeout": "5", "stdio-cancel-grace": "0s",
			"upstream": "notaurl", "upstream-header": "x", "upstream-forward-header": "a b",
			"upstream-oauth-token-url": "notaurl", "upstream-oauth-client-id": "x", "upstream-oauth-client-secret-file": dir,
			"upstream-oauth-scope": "a b",
			"auth-issuer":          "notaurl", "auth-audience": "x", "auth-resource": "notaurl", "auth-jwks": "notaurl",
			"auth-introspection": "notaurl", "auth-introspection-client-id": "x", "auth-introspection-client-secret-file": dir,
			"auth-introspection-cache": "5", "auth-tool-scope": "x",
			"upstream-connect-timeout": "5", "upstream-timeout": "5", "upstream-resume-timeout": "5",
			"task-ttl": "5", "task-poll": "5", "task-rerun": "x", "task-max": "x", "task-tools": "x", "task-required": "x",
			"version": "maybe",
		},
		"probe": {
			"tool": "", "args": "[]", "retention-events": "x", "storm": "x", "json": "maybe", "timeout": "5",
		},
		"ready": {"metrics-addr": "9464", "timeout": "5"},
		"connect": {
			"header": "x", "log-file": dir, "log-level": "LOUD", "resume-timeout": "5", "start-timeout": "5", "version": "maybe",
			"max-calls": "x", "max-queued-calls": "x",
			"oauth-browser": "chrome", "oauth-callback-port": "70000", "oauth-client-id": "${TIDEMARK_TEST_UNSET}",
			"oauth-client-metadata-url": "http://example.com/client.json", "oauth-client-secret": "s3cret", "protocol": "2027",
		},
		"inspect": {
			"metrics-addr": "9464", "recent": "x", "json": "maybe", "timeout": "5",
			"fleet": "maybe", "tasks": "maybe", "redis": "notaurl://", "redis-password-file": dir,
		},
	}
}

// commandFlags returns each command's flag set.
func commandFlags() map[string]*flag.FlagSet {
	serveFS, _ := serveFlags(io.Discard)
	probeFS, _ := probeFlags(io.Discard)
	inspectFS, _ := inspectFlags(io.Discard)
	readyFS, _ := readyFlags(io.Discard)
	connectFS, _ := connectFlags(io.Discard)
	return map[string]*flag.FlagSet{"serve": serveFS, "probe": probeFS, "inspect": inspectFS, "ready": readyFS, "connect": connectFS}
}

// runBinary runs the tidemark binary with args (and env added to its
// environment) and returns its exit code and stderr; a process still
// running after 20 seconds is killed, and fails the test (exit code -1).
func runBinary(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	bin := testenv.BuildTidemark(t) // before the clock starts: a build takes its time
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("tidemark %v still running after 20s; stderr:\n%s", args, stderr.String())
		return -1, stderr.String()
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stderr.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, stderr.String()
}

// TestEveryFlagRefusesInOneLine: a bad value of any flag of tidemark
// serve, probe, inspect, ready and connect exits 2 with exactly one line on stderr, which
// names the command, the flag and what the flag accepts ("want ..."),
// never the whole usage text (regression: --log-level LOUD printed every
// flag's help).
func TestEveryFlagRefusesInOneLine(t *testing.T) {
	bad := badValues(t)
	for cmd, fs := range commandFlags() {
		fs.VisitAll(func(f *flag.Flag) {
			v, ok := bad[cmd][f.Name]
			if !ok {
				t.Errorf("%s --%s has no bad value in badValues", cmd, f.Name)
				return
			}
			args := []string{cmd, "--" + f.Name + "=" + v}
			switch cmd {
			case "serve":
				args = append(args, "--addr=127.0.0.1:0")
				if f.Name == "addr" {
					args = args[:2]
				}
			case "probe", "connect":
				args = append(args, "http://127.0.0.1:9/mcp")
			case "inspect", "ready":
				if f.Name != "metrics-addr" {
					args = append(args, "--metrics-addr=127.0.0.1:9")
				}
			}
			code, stderr := runBinary(t, nil, args...)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "tidemark "+cmd+": ") ||
				!strings.Contains(lines[0], "--"+f.Name) || !strings.Contains(lines[0], "want") {
				t.Errorf("tidemark %s: exit %d, stderr:\n%s\nwant exit 2 and one line naming --%s and what it accepts (want ...)", strings.Join(args, " "), code, stderr, f.Name)
			}
		})
	}
	// Two mistakes of another kind: a flag that does not exist, and one
	// without its value.
	for args, want := range map[string]string{
		"serve --loud":           "tidemark serve: unknown flag -loud: tidemark serve -h lists the flags\n",
		"serve --log-level":      "tidemark serve: --log-level needs a value: want DEBUG, INFO, WARN or ERROR\n",
		"inspect --recent":       "tidemark inspect: --recent needs a value: want an integer (sessions)\n",
		"serve --log-level=LOUD": "tidemark serve: --log-level \"LOUD\": want DEBUG, INFO, WARN or ERROR\n",
	} {
		if code, stderr := runBinary(t, nil, strings.Fields(args)...); code != 2 || stderr != want {
			t.Errorf("tidemark %s: exit %d, stderr %q; want 2 and %q", args, code, stderr, want)
		}
	}
}

// TestURLPasswordNeverInErrors: a Redis URL whose password was written
// unencoded (an `openssl rand -base64` password holds / and +), which does
// not parse, is refused in one line that holds no part of the password,
// from the flag, from TIDEMARK_REDIS and in tidemark inspect --fleet; the
// line says how to write it. (The parser's own text quoted the whole URL.)
func TestURLPasswordNeverInErrors(t *testing.T) {
	const bad = "redis://:Ab/cD+ef==@127.0.0.1:16380/0"
	for _, tc := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"serve", "--addr=127.0.0.1:0", "--redis=" + bad}},
		{[]string{"TIDEMARK_REDIS=" + bad}, []string{"serve", "--addr=127.0.0.1:0"}},
		{nil, []string{"inspect", "--fleet", "--redis=" + bad}},
	} {
		code, stderr := runBinary(t, tc.env, tc.args...)
		for _, part := range []string{"Ab/cD", "cD+ef", ":Ab", "ef=="} {
			if strings.Contains(stderr, part) {
				t.Errorf("tidemark %v (env %v): stderr holds %q of the password:\n%s", tc.args, tc.env, part, stderr)
			}
		}
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "must be percent-encoded") {
			t.Errorf("tidemark %v (env %v): exit %d, stderr:\n%s\nwant exit 2 and one line saying the password must be percent-encoded", tc.args, tc.env, code, stderr)
		}
	}
}

// TestRefusedAtStart: values each flag's own parser accepts but serve,
// probe or inspect cannot use are refused at start in one line saying
// what the flag wants, its last line: exit 2 for a value that can never work, 1 for a
// directory that cannot be used on this machine.
func TestRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		// /proc is no damaged data directory: restoring it from a backup
		// would not help.
		{[]string{"serve", "--addr=127.0.0.1:0", "--data-dir=/proc/self"}, "tidemark serve: --data-dir: durable store: data directory /proc/self: data directory is not writable: lock: open /proc/self/LOCK: no such file or directory: no file can be created in it: give --data-dir a directory on a writable file system\n", 1},
		// A query or fragment is never part of a request's path: the
		// endpoint would answer nothing.
		// go-redis's own log line (a failed dial) never comes before it.
		{[]string{"inspect", "--fleet", "--redis=127.0.0.1:1"}, "tidemark inspect: --redis redis://127.0.0.1:1/0: redis store: connect 127.0.0.1:1: store unavailable: dial tcp 127.0.0.1:1: connect: connection refused (is it the Redis of tidemark serve --redis?)\n", 1},
		{[]string{"serve", "--addr=127.0.0.1:0", "--path=/a?b"}, "tidemark serve: --path \"/a?b\": want a URL path starting with / (no spaces, braces, ? or #), e.g. /mcp\n", 2},
		{[]string{"serve", "--addr=127.0.0.1:0", "--path=/a#b"}, "tidemark serve: --path \"/a#b\": want a URL path starting with / (no spaces, braces, ? or #), e.g. /mcp\n", 2},
	} {
		// The error is the last line; only log lines of the start
		// (time=...) may come before it.
		code, stderr := runBinary(t, nil, tc.args...)
		lines := strings.SplitAfter(stderr, "\n")
		before := lines[:max(len(lines)-2, 0)]
		logged := !slices.ContainsFunc(before, func(l string) bool { return !strings.HasPrefix(l, "time=") })
		if code != tc.code || !strings.HasSuffix(stderr, tc.want) || !logged || strings.Count(tc.want, "\n") != 1 {
			t.Errorf("tidemark %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
	}
}

// TestAuthToolScopeOfAnUnknownTool: an --auth-tool-scope naming a tool
// the demo server does not have is refused at start, exit 2, in one line
// that lists its tools: the scope would guard nothing (it was accepted
// silently, a typo leaving the tool meant unguarded).
func TestAuthToolScopeOfAnUnknownTool(t *testing.T) {
	is := startJWTIssuer(t)
	code, stderr := runBinary(t, nil, "serve", "--addr=127.0.0.1:0", "--auth-issuer="+is.url, "--auth-tool-scope=nosuchtool=x")
	const want = `tidemark serve: --auth-tool-scope nosuchtool=x: the demo server has no tool "nosuchtool": want one of confirm, countdown, echo, notify` + "\n"
	if code != 2 || !strings.HasSuffix(stderr, want) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and last line %q", code, stderr, want)
	}
}

// TestLeastIntervals: --keepalive and --retry below their least positive
// values are refused in one line (--keepalive 1ns made the first SSE
// stream panic the process; --retry 1ns was sent as "retry: 0").
func TestLeastIntervals(t *testing.T) {
	for args, want := range map[string]string{
		"serve --addr=127.0.0.1:0 --keepalive=1ns": "tidemark serve: --keepalive 1ns: want 10ms or more, or a negative duration for no keep-alive\n",
		"serve --addr=127.0.0.1:0 --retry=500us":   "tidemark serve: --retry 500µs: want 1ms or more, or a negative duration for no retry field\n",
	} {
		if code, stderr := runBinary(t, nil, strings.Fields(args)...); code != 2 || stderr != want {
			t.Errorf("tidemark %s: exit %d, stderr %q; want 2 and %q", args, code, stderr, want)
		}
	}
}

// TestUpstreamHeaderRefusedAtStart: an --upstream-header that net/http
// would refuse to send (a control character in its value, no value, a
// name with a space) is refused at start in one line that does not repeat
// the value; it was accepted, and every request then got 503
// upstream_unreachable.
func TestUpstreamHeaderRefusedAtStart(t *testing.T) {
	const want = `tidemark serve: --upstream-header: want NAME: VALUE, e.g. "Authorization: Bearer TOKEN"` + "\n"
	for _, h := range []string{"Authorization: Bearer s3cret\x01", "Authorization:", "X Token: s3cret"} {
		code, stderr := runBinary(t, nil, "serve", "--addr=127.0.0.1:0", "--upstream=http://127.0.0.1:9/mcp", "--upstream-header="+h)
		if code != 2 || stderr != want {
			t.Errorf("--upstream-header %q: exit %d, stderr %q; want 2 and %q", h, code, stderr, want)
		}
	}
}

// TestFlagsOfAnotherFlagRefused: a flag whose help says it applies with
// another flag only (flagsOnlyWith: the fleet's flags with --redis, the
// used-requestState bound with --request-state-single-use and without
// --redis, --max-processes and the --stdio-* flags with --stdio, the
// --upstream-* flags with --upstream, the task flags with a gateway, the
// --auth-* flags with --auth-issuer) is refused at start, exit 2, in one
// line naming it and what to do, whether the command line or the
// environment gives it, whatever its value, the default's included. They
// were accepted and did nothing: serve --redis-replicas 1 without --redis
// ran on the memory store, no write waiting for anything; serve
// --max-processes 10 or --upstream-timeout 5s without their gateway served
// the demo server. With the flag they need, they pass.
func TestFlagsOfAnotherFlagRefused(t *testing.T) {
	const (
		redisURL = "redis://127.0.0.1:1/0"
		up, tok  = "http://127.0.0.1:1/mcp", "http://127.0.0.1:1/token"
		issuer   = "http://127.0.0.1:1/"
	)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refusal := func(flag, needs, what string) string {
		if what != "" {
			what = ", " + what + ","
		}
		return "tidemark serve: --" + flag + " applies with --" + needs + " only, and without it does nothing: want --" + needs + what + " too, or leave --" + flag + " out\n"
	}
	withRedis := func(flag string) string { return refusal(flag, "redis", "the fleet's Redis") }
	withStdio := func(flag string) string { return refusal(flag, "stdio", "the gateway to a stdio MCP server") }
	withUpstream := func(flag string) string { return refusal(flag, "upstream", "the URL of the MCP server to serve") }
	withIssuer := func(flag string) string { return refusal(flag, "auth-issuer", "the issuer of the tokens") }
	for _, tc := range []struct {
		args []string
		env  []string // NAME=VALUE
		want string
	}{
		{[]string{"--redis-replicas", "1"}, nil, withRedis("redis-replicas")},
		{[]string{"--redis-replicas", "0"}, nil, withRedis("redis-replicas")},
		{[]string{"--redis-replication-timeout", "500ms"}, nil, withRedis("redis-replication-timeout")},
		{[]string{"--lease-ttl", "10s"}, nil, withRedis("lease-ttl")},
		{[]string{"--lease-renew", "1s"}, nil, withRedis("lease-renew")},
		{[]string{"--advertise-url", "http://10.0.0.1:8080/mcp"}, nil, withRedis("advertise-url")},
		{[]string{"--replica-id", "r1"}, nil, withRedis("replica-id")},
		{[]string{"--redis-password-file", secretFile}, nil, withRedis("redis-password-file")},
		{[]string{"--data-dir", t.TempDir(), "--lease-ttl", "5s"}, nil, withRedis("lease-ttl")},
		{nil, []string{"TIDEMARK_REDIS_REPLICAS=1"},
			"tidemark serve: --redis-replicas (from TIDEMARK_REDIS_REPLICAS) applies with --redis only, and without it does nothing: want --redis, the fleet's Redis, too, or leave --redis-replicas out\n"},
		{[]string{"--request-state-used-max", "10"}, nil, refusal("request-state-used-max", "request-state-single-use", "")},
		{[]string{"--request-state-single-use", "--request-state-used-max", "10", "--redis", redisURL}, nil,
			"tidemark serve: --request-state-used-max applies without --redis only: a fleet remembers the used requestStates in Redis until they expire; leave --request-state-used-max out\n"},
		{[]string{"--max-processes", "10"}, nil, withStdio("max-processes")},
		{[]string{"--max-processes", "100"}, nil, withStdio("max-processes")},
		{[]string{"--max-processes", "0"}, nil, withStdio("max-processes")},
		{[]string{"--env", "A=1"}, nil, withStdio("env")},
		{[]string{"--stdio-hibernate"}, nil, withStdio("stdio-hibernate")},
		{[]string{"--stdio-cancel-grace", "1s"}, nil, withStdio("stdio-cancel-grace")},
		{[]string{"--stdio-init-timeout", "10s"}, nil, withStdio("stdio-init-timeout")},
		{[]string{"--upstream", up, "--stdio-init-timeout", "10s"}, nil, withStdio("stdio-init-timeout")},
		{nil, []string{"TIDEMARK_MAX_PROCESSES=10"},
			"tidemark serve: --max-processes (from TIDEMARK_MAX_PROCESSES) applies with --stdio only, and without it does nothing: want --stdio, the gateway to a stdio MCP server, too, or leave --max-processes out\n"},
		{[]string{"--upstream-header", "X-A: b"}, nil, withUpstream("upstream-header")},
		{[]string{"--upstream-forward-header", "Authorization"}, nil, withUpstream("upstream-forward-header")},
		{[]string{"--upstream-connect-timeout", "1s"}, nil, withUpstream("upstream-connect-timeout")},
		{[]string{"--upstream-timeout", "5s"}, nil, withUpstream("upstream-timeout")},
		{[]string{"--upstream-timeout", "30s", "--stdio", "--", "cat"}, nil, withUpstream("upstream-timeout")},
		{[]string{"--upstream-resume-timeout", "5s"}, nil, withUpstream("upstream-resume-timeout")},
		{[]string{"--upstream-oauth-token-url", tok, "--stdio", "--", "cat"}, nil, withUpstream("upstream-oauth-token-url")},
		{[]string{"--upstream-oauth-scope", "s"}, nil, withUpstream("upstream-oauth-scope")},
		{nil, []string{"TIDEMARK_UPSTREAM_TIMEOUT=5s"},
			"tidemark serve: --upstream-timeout (from TIDEMARK_UPSTREAM_TIMEOUT) applies with --upstream only, and without it does nothing: want --upstream, the URL of the MCP server to serve, too, or leave --upstream-timeout out\n"},
		{[]string{"--upstream", up, "--upstream-oauth-client-id", "gw"}, nil, refusal("upstream-oauth-client-id", "upstream-oauth-token-url", "the token endpoint")},
		{[]string{"--task-tools", "all"}, nil,
			"tidemark serve: --task-tools applies with --stdio or --upstream only, and without either does nothing: want --stdio or --upstream, a gateway, too, or leave --task-tools out\n"},
		{[]string{"--auth-audience", "urn:x"}, nil, withIssuer("auth-audience")},
		{[]string{"--auth-introspection-cache", "0s"}, nil, withIssuer("auth-introspection-cache")},
		{[]string{"--auth-issuer", issuer, "--auth-introspection-client-id", "gw"}, nil, refusal("auth-introspection-client-id", "auth-introspection", "")},
		{[]string{"--auth-issuer", issuer, "--auth-introspection", issuer + "introspect", "--auth-introspection-client-secret-file", secretFile}, nil,
			refusal("auth-introspection-client-secret-file", "auth-introspection-client-id", "")},
	} {
		t.Run(strings.Join(append(tc.env, tc.args...), " "), func(t *testing.T) {
			t.Parallel()
			code, stderr := runBinary(t, tc.env, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
			if code != 2 || stderr != tc.want {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
	for _, args := range [][]string{
		{"--redis", redisURL, "--redis-replicas", "1", "--redis-replication-timeout", "500ms", "--lease-ttl", "10s",
			"--lease-renew", "1s", "--advertise-url", "http://10.0.0.1:8080/mcp", "--replica-id", "r1", "--redis-password-file", secretFile},
		{"--request-state-single-use", "--request-state-used-max", "10"},
		{"--stdio", "--env", "A=1", "--max-processes", "10", "--stdio-hibernate", "--stdio-cancel-grace", "1s", "--stdio-init-timeout", "10s",
			"--task-tools", "all", "--", "cat"},
		{"--upstream", up, "--upstream-header", "X-A: b", "--upstream-forward-header", "X-Tenant", "--upstream-connect-timeout", "1s",
			"--upstream-timeout", "5s", "--upstream-resume-timeout", "5s", "--upstream-oauth-token-url", tok, "--upstream-oauth-client-id", "gw",
			"--upstream-oauth-client-secret-file", secretFile, "--upstream-oauth-scope", "s", "--task-required", "echo"},
		{"--auth-issuer", issuer, "--auth-audience", "urn:x", "--auth-resource", "http://127.0.0.1:8080/mcp", "--auth-jwks", issuer + "jwks",
			"--auth-introspection", issuer + "introspect", "--auth-introspection-cache", "1s", "--auth-introspection-client-id", "gw",
			"--auth-introspection-client-secret-file", secretFile, "--auth-tool-scope", "echo=x"},
	} {
		fs, c := serveFlags(io.Discard)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := c.checkArgs(fs, nil); err != nil {
			t.Errorf("serve %v: %v; want the flags accepted", args, err)
		}
	}
}

// TestFlagsOnlyWithAsTheirHelpSays: the flags of flagsOnlyWith are exactly
// the flags of tidemark serve whose help says they apply with another
// ("with --X: ...", "gateway mode: ..."), but for the gateways' own
// --stdio and --upstream, and each flag they need is a flag too.
func TestFlagsOnlyWithAsTheirHelpSays(t *testing.T) {
	fs, _ := serveFlags(io.Discard)
	inTable := map[string]bool{}
	for _, r := range flagsOnlyWith {
		for _, name := range append(slices.Clone(r.flags), r.needs...) {
			if fs.Lookup(name) == nil {
				t.Errorf("flagsOnlyWith names --%s, which tidemark serve does not declare", name)
			}
		}
		for _, name := range r.flags {
			inTable[name] = true
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		saysSo := (strings.HasPrefix(f.Usage, "with --") || strings.HasPrefix(f.Usage, "gateway mode:")) && f.Name != "stdio" && f.Name != "upstream"
		if saysSo != inTable[f.Name] {
			t.Errorf("--%s: in flagsOnlyWith %v, its help %q", f.Name, inTable[f.Name], f.Usage)
		}
	})
}
