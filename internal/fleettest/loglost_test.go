package fleettest_test

// A session whose event log Redis no longer holds (deleted by hand, or
// evicted under a maxmemory-policy other than noeviction) while its
// record still says the events are retained.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestResumeLogLost: after a countdown, the session's log key is deleted
// in Redis, as an operator or Redis's eviction would. Resuming the call's
// stream with its newest cursor answers 409 cursor_compacted with a
// message that says the log is missing, which sequences the record says
// are retained and what the client should do, and error.data.logLost
// true (never "cursor sequence 6 is below the replay floor 1"); the
// session goes on at generation 1 for new calls.
func TestResumeLogLost(t *testing.T) {
	testenv.NeedRedis(t)
	f := newFleet(t, 1, redistest.Options{})
	ctx := testCtx(t, 60*time.Second)
	l := newLedger(t)
	token := f.initialize(ctx, 0, 0)
	evs, err := call(t, ctx, l, f.on(0, token), mcptest.ToolCall(2, "countdown", map[string]any{"n": 3}, "cd"))
	if err != nil || !isResult(evs, 2, "countdown of 3 finished") {
		t.Fatalf("countdown: %v", err)
	}
	last := evs[len(evs)-1].ID
	b, err := f.st.Bounds(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if c := cursor(t, last); c.Sequence != b.HWM || b.Floor != 1 {
		t.Fatalf("before the loss: cursor %s, floor %d, HWM %d; want the cursor at the HWM and floor 1", last, b.Floor, b.HWM)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	if n, err := rdb.Del(ctx, "tidemark:{"+token+"}:log").Result(); n != 1 || err != nil {
		t.Fatalf("DEL log key: %d, %v; want 1 key deleted", n, err)
	}

	_, err = f.on(0, token).Resume(ctx, last)
	se := wantRefusal(t, err, http.StatusConflict, "cursor_compacted")
	// The cursor is the call's response: no request of the stream is
	// lost, and the message sends none again.
	want := fmt.Sprintf("the session's event log is missing from the store, although the session's record says sequences 1 to %d "+
		"are retained (it was deleted outside Tidemark, or evicted by Redis); the stream cannot be resumed; "+
		"no request of that stream is lost: send none of them again", b.HWM)
	if se.Body.Message != want {
		t.Errorf("message %q\nwant %q", se.Body.Message, want)
	}
	if se.Body.Data["logLost"] != true || se.Body.Data["floor"] != json.Number("1") ||
		se.Body.Data["cursorSequence"] != json.Number(fmt.Sprint(b.HWM)) {
		t.Errorf("error.data %v, want logLost true, floor 1, cursorSequence %d", se.Body.Data, b.HWM)
	}
	f.r[0].proc.WaitFor(t, `msg="event log lost" .*reason=cursor_compacted`, 5*time.Second)

	echo(t, ctx, l, f.on(0, token), 3, "after the loss", 1)
}
