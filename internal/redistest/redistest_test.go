package redistest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the calling goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestMissingRedisFails: without redis-server on PATH, Start fails the test
// with how to install it (it does not skip).
func TestMissingRedisFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Start(rec, redistest.Options{})
		rec.msg = "Start returned"
	}()
	<-done
	if !strings.Contains(rec.msg, "redis-server not found") || !strings.Contains(rec.msg, "apt-get install -y redis-server") {
		t.Fatalf("Start without redis-server: %q, want a failure naming apt-get install -y redis-server", rec.msg)
	}
}

// TestRestartKeepsAOF: a key written before SIGKILL is back after Restart
// with AppendOnly, and gone without it.
func TestRestartKeepsAOF(t *testing.T) {
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
