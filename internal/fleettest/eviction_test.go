package fleettest_test

// What `tidemark serve --redis` says at start about Redis's
// maxmemory-policy.

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestServeRedisEvictionPolicy: `tidemark serve --redis` warns in one
// line, reason unsafe_eviction, naming the policy and what to set, when
// Redis's maxmemory-policy is allkeys-lru; with a user that may not run
// CONFIG (as on managed Redis) it warns, reason eviction_unknown, that the
// policy could not be checked; under noeviction (Redis's default) it says
// nothing of eviction. Each serves.
func TestServeRedisEvictionPolicy(t *testing.T) {
	testenv.NeedRedis(t)
	bin := testenv.BuildTidemark(t)
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	serve := func(url string) *testenv.Process {
		p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--redis", url)
		testenv.ServeURL(t, p)
		return p
	}

	p := serve(srv.URL())
	if out := p.Output(); strings.Contains(out, "eviction") || strings.Contains(out, "maxmemory") {
		t.Errorf("under noeviction the log speaks of eviction:\n%s", out)
	}

	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	p = serve(srv.URL())
	lines := p.WaitFor(t, `(?m)^.*reason=unsafe_eviction.*$`, 5*time.Second)
	want := `level=WARN msg="Redis may evict sessions: a session Redis evicts answers 404 and its events are lost; ` +
		`set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf)" reason=unsafe_eviction maxmemory_policy=allkeys-lru`
	if !strings.HasSuffix(lines[0], want) {
		t.Errorf("warning %q\nwant it to end with %q", lines[0], want)
	}
	if n := strings.Count(p.Output(), "reason=unsafe_eviction"); n != 1 {
		t.Errorf("%d warnings about eviction, want 1", n)
	}

	if err := rdb.Do(ctx, "ACL", "SETUSER", "tidemark", "on", ">secret", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	p = serve("redis://tidemark:secret@" + srv.Addr() + "/0")
	lines = p.WaitFor(t, `(?m)^.*reason=eviction_unknown.*$`, 5*time.Second)
	want = `level=WARN msg="cannot read Redis's maxmemory-policy; make sure it is noeviction: under any other policy Redis may evict sessions, ` +
		`which then answer 404, or their event logs" reason=eviction_unknown error="redis store: config get maxmemory-policy: NOPERM`
	if !strings.Contains(lines[0], want) {
		t.Errorf("warning %q\nwant it to hold %q", lines[0], want)
	}
}
