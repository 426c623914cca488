package tidemark_test

import (
	"context"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// backend is a store that outlives a Handler, with a backup of it.
type backend struct {
	// open serves the demo server on a new Handler over the store, over
	// real HTTP on loopback; stop closes the server, the Handler and the
	// store.
	open func(t *testing.T) (c *mcptest.Client, stop func())
	// backup copies what the store holds; restore puts the copy back in
	// its place, while no Handler is open.
	backup, restore func(t *testing.T)
}

// serve serves the demo server on st over real HTTP on loopback.
func serve(t *testing.T, st store.Store) (c *mcptest.Client, stop func()) {
	t.Helper()
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{Store: st, Sessions: session.Options{Logger: slog.New(slog.DiscardHandler)}})
	srv := httptest.NewServer(h)
	hc := &http.Client{}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		hc.CloseIdleConnections()
		srv.Close()
		h.Close()
	}
	t.Cleanup(stop)
	return &mcptest.Client{URL: srv.URL, HTTP: hc}, stop
}

// durableBackend is a data directory, backed up and restored as copies
// of its files taken while no process holds it.
func durableBackend(t *testing.T) backend {
	dir, backup := t.TempDir(), t.TempDir()
	return backend{
		open: func(t *testing.T) (*mcptest.Client, func()) {
			st, err := durable.Open(dir, durable.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return serve(t, st)
		},
		backup: func(t *testing.T) { copyDir(t, dir, backup) },
		restore: func(t *testing.T) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			copyDir(t, backup, dir)
		},
	}
}

// redisBackend is a Redis server, backed up as a DUMP of every key and
// restored by FLUSHALL and RESTORE, as a server started from an older
// AOF or RDB file holds the older keys.
func redisBackend(t *testing.T) backend {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	dumps := map[string]string{}
	return backend{
		open: func(t *testing.T) (*mcptest.Client, func()) {
			st, err := redis.New(t.Context(), redis.Options{URL: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			return serve(t, st)
		},
		backup: func(t *testing.T) {
			keys, err := rdb.Keys(t.Context(), "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if dumps[k], err = rdb.Dump(t.Context(), k).Result(); err != nil {
					t.Fatal(err)
				}
			}
		},
		restore: func(t *testing.T) {
			if err := rdb.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			for k, v := range dumps {
				if err := rdb.RestoreReplace(t.Context(), k, 0, v).Err(); err != nil {
					t.Fatal(err)
				}
			}
		},
	}
}

// copyDir copies the files of directory from into to, which it creates.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// echo calls echo as request id on s and returns the events of its
// stream: the priming event and the answer.
func echo(t *testing.T, ctx context.Context, s *mcptest.Session, id int64, text string) []mcptest.Event {
	t.Helper()
	st, err := s.Call(ctx, mcptest.ToolCall(id, "echo", map[string]any{"text": text}, nil))
	if err != nil {
		t.Fatalf("call %d: %v", id, err)
	}
	evs, err := st.Collect()
	st.Close()
	if err != nil || len(evs) != 2 || !evs[1].IsResponseTo(mcptest.ID(id)) {
		t.Fatalf("call %d: %v, %v; want the priming event and the answer", id, evs, err)
	}
	return evs
}

// TestRestoredBackupEndsGeneration: a store restored from a backup taken
// before a call (a data directory's copy, Redis keys of an older file)
// rolls the session back below events its client received. The client's
// newest cursor is then above the high-water mark of the live
// generation: the resume answers 400 cursor_ahead, and the generation
// ends, so that the next call's events carry generation+1 and none of
// their ids names an event the client received before the restore
// (DESIGN.md, "The replay decision").
func TestRestoredBackupEndsGeneration(t *testing.T) {
	for name, b := range map[string]func(*testing.T) backend{"durable": durableBackend, "redis": redisBackend} {
		t.Run(name, func(t *testing.T) { testRestoredBackup(t, b(t)) })
	}
}

func testRestoredBackup(t *testing.T, b backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, stop := b.open(t)
	s, err := c.Initialize(ctx, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{} // event id → data
	note := func(evs []mcptest.Event) {
		for _, e := range evs {
			seen[e.ID] = string(e.Data)
		}
	}
	note(echo(t, ctx, s, 2, "one"))
	stop()
	b.backup(t)

	// The next process serves another call, whose events the backup lacks.
	c, stop = b.open(t)
	s = c.SessionFor(s.Token, s.ProtocolVersion)
	newest := echo(t, ctx, s, 3, "two")
	note(newest)
	stop()

	b.restore(t)
	c, _ = b.open(t)
	s = c.SessionFor(s.Token, s.ProtocolVersion)
	cursor := newest[1].ID
	_, err = s.Resume(ctx, cursor)
	se, ok := mcptest.AsStatusError(err)
	if !ok || se.Status != http.StatusBadRequest || se.Reason() != "cursor_ahead" {
		t.Fatalf("resume with %s after the restore: %v; want 400 cursor_ahead", cursor, err)
	}
	held, _ := replay.Parse(cursor)
	for _, e := range echo(t, ctx, s, 4, "three") {
		if data, ok := seen[e.ID]; ok {
			t.Errorf("event id %s of call 4 was sent before the restore for %q, now for %q", e.ID, data, e.Data)
		}
		if got, _ := replay.Parse(e.ID); got.Generation != held.Generation+1 {
			t.Errorf("event id %s: generation %d, want %d", e.ID, got.Generation, held.Generation+1)
		}
	}
}
