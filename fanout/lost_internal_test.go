package fanout

// The reader's check for entries trimmed before it read them, against a
// real redis-server.

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestCheckLost: a reader that stands before entries the stream trimmed
// logs reason notifications_lost with how many it missed; one whose next
// entry is still kept logs nothing.
func TestCheckLost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	var logs testenv.LogBuffer
	b := &Bus{opts: Options{Redis: rdb, Key: DefaultKey}, logger: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx := t.Context()
	start, err := newest(ctx, rdb, DefaultKey)
	if err != nil || start != (position{id: "0-0"}) {
		t.Fatalf("position in a stream that does not exist: %+v, %v; want 0-0, 0", start, err)
	}
	var ids []string
	for range 300 {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: DefaultKey, Values: []any{fieldOrigin, "x", fieldMethod, ToolsListChanged}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if end, err := newest(ctx, rdb, DefaultKey); err != nil || end != (position{id: ids[299], added: 300}) {
		t.Fatalf("position after 300 entries: %+v, %v; want %s, 300", end, err, ids[299])
	}
	// Entries 1 … 100 (ids[0] … ids[99]) go; the stream keeps 200.
	if err := rdb.XTrimMaxLen(ctx, DefaultKey, 200).Err(); err != nil {
		t.Fatal(err)
	}
	b.checkLost(ctx, position{id: ids[99], added: 100})
	if logs.String() != "" {
		t.Fatalf("logged though every entry after the last one read is kept:\n%s", logs.String())
	}
	b.checkLost(ctx, position{id: ids[49], added: 50})
	want := `msg="notifications raised on other replicas were trimmed from the stream before this replica read them; its listeners missed them" key=tidemark:notifications reason=notifications_lost last_read=` + ids[49] + ` missed=50`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log:\n%s\nwant a line containing:\n%s", logs.String(), want)
	}
}
