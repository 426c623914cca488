package redistest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMissingRedis: without redis-server on PATH, Start skips the test
// saying how to install it, and fails it when $CI is set.
func TestMissingRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for ci, want := range map[string]string{"": "skip", "true": "fatal"} {
		t.Setenv(testenv.CIEnv, ci)
		how, msg := testenv.Ended(t, func(tb testing.TB) { redistest.Start(tb, redistest.Options{}) })
		if how != want || !strings.Contains(msg, "redis-server is not installed") || !strings.Contains(msg, "apt-get install -y redis-server") {
			t.Errorf("CI=%q: Start without redis-server ended with %q %q, want %s naming apt-get install -y redis-server", ci, how, msg, want)
		}
	}
}

// TestRestartKeepsAOF: a key written before SIGKILL is back after Restart
// with AppendOnly, and gone without it.
func TestRestartKeepsAOF(t *testing.T) {
	testenv.NeedRedis(t)
	ctx := context.Background()
	for _, aof := range []bool{true, false} {
		srv := redistest.Start(t, redistest.Options{AppendOnly: aof})
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		pid := srv.Pid()
		srv.Restart()
		if srv.Pid() == pid {
			t.Fatalf("Restart kept pid %d", pid)
		}
		got, err := c.Get(ctx, "k").Result()
		if err != nil && err != redis.Nil {
			// The first command may meet the connection the kill reset.
			got, err = c.Get(ctx, "k").Result()
		}
		c.Close()
		switch {
		case aof && (err != nil || got != "v"):
			t.Fatalf("append-only: GET after restart = %q, %v; want v", got, err)
		case !aof && err != redis.Nil:
			t.Fatalf("no persistence: GET after restart = %q, %v; want nil (empty)", got, err)
		}
		srv.Stop()
	}
}
