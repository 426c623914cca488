package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestInspectFleet: against a real redis-server and two replicas of
// tidemark serve (r0 and r1, lease 1s), `tidemark inspect --fleet --redis
// HOST:PORT` lists both replicas with their URL and the number of sessions
// each owns, and every session with its owner, generation 1 and a lease
// that expires within the TTL; with a token prefix, that session alone;
// with --json, the same as admin.Fleet. Once r1 is killed (kill -9), its
// entry leaves the directory and its session's lease lapses: r1 shows as
// "(not in the directory)" and the lease as lapsed.
func TestInspectFleet(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	bin := testenv.BuildTidemark(t)
	replica := func(id string) (*testenv.Process, string) {
		p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--redis", srv.URL(), "--replica-id", id,
			"--lease-ttl", "1s", "--lease-renew", "250ms")
		return p, testenv.ServeURL(t, p)
	}
	_, url0 := replica("r0")
	p1, url1 := replica("r1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tokens []string
	for _, u := range []string{url0, url0, url1} {
		s, err := (&mcptest.Client{URL: u}).Initialize(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, s.Token)
	}
	inspect := func(args ...string) string {
		t.Helper()
		var stdout, stderr strings.Builder
		if code := run(append([]string{"inspect", "--fleet", "--redis", srv.Addr()}, args...), &stdout, &stderr); code != 0 {
			t.Fatalf("tidemark inspect --fleet %v: exit %d: %s", args, code, stderr.String())
		}
		return stdout.String()
	}

	out := inspect()
	want := regexp.MustCompile(`^2 replicas in the directory, 3 sessions in Redis
REPLICA  URL +SESSIONS
r0 +` + regexp.QuoteMeta(url0) + ` +2
r1 +` + regexp.QuoteMeta(url1) + ` +1

SESSION   OWNER  GENERATION  LEASE +IDLE
(\S{8})  r[01] +1 +expires in (0|[0-9.]+m?s) +\S+
(\S{8})  r[01] +1 +expires in (0|[0-9.]+m?s) +\S+
(\S{8})  r[01] +1 +expires in (0|[0-9.]+m?s) +\S+
$`)
	if !want.MatchString(out) {
		t.Fatalf("tidemark inspect --fleet printed\n%s\nwant it to match\n%s", out, want)
	}
	for _, tok := range tokens {
		if !strings.Contains(out, tok[:8]) || strings.Contains(out, tok) {
			t.Errorf("the listing does not name session %s by its 8-character prefix alone:\n%s", tok[:8], out)
		}
	}

	out = inspect(tokens[2][:6])
	if want := regexp.MustCompile(`(?m)^` + tokens[2][:8] + `  r1 +1 +expires in `); !want.MatchString(out) || strings.Count(out, "\n") != 7 {
		t.Errorf("tidemark inspect --fleet %s printed\n%s\nwant r1's session alone", tokens[2][:6], out)
	}

	var f admin.Fleet
	if err := json.Unmarshal([]byte(inspect("--json")), &f); err != nil {
		t.Fatal(err)
	}
	if f.Count != 3 || len(f.Sessions) != 3 || len(f.Replicas) != 2 || f.Replicas[0] != (admin.FleetReplica{ID: "r0", URL: url0, TTLSeconds: f.Replicas[0].TTLSeconds, Sessions: 2}) ||
		f.Replicas[0].TTLSeconds <= 0 || f.Replicas[0].TTLSeconds > 1 {
		t.Errorf("--json = %+v, want 3 sessions, r0 (2 sessions, TTL at most 1s) and r1", f)
	}

	kill9(t, p1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out = inspect()
		gone := regexp.MustCompile(`(?m)^r1 +\(not in the directory\) +1$`).MatchString(out) &&
			regexp.MustCompile(`(?m)^`+tokens[2][:8]+`  r1 +1 +lapsed [0-9.]+m?s ago `).MatchString(out)
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after kill -9 of r1, tidemark inspect --fleet printed\n%s\nwant r1 out of the directory and its session's lease lapsed", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.HasPrefix(out, "1 replicas in the directory, 3 sessions in Redis\n") {
		t.Errorf("after r1's death:\n%s\nwant 1 replica in the directory and 3 sessions", out)
	}
	t.Logf("after r1's death:\n%s", out)
}
