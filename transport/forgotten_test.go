// forgotten_test.go tests a session that a real redis-server forgets
// (FLUSHALL, as a restart without persistence does) while this process
// holds its live state.

package transport_test

import (
	"errors"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/transport"
)

// forgetting is a counting engine served on a real redis-server with no
// persistence, with a session initialized on it, and a client of that
// Redis to make it forget every key.
type forgetting struct {
	s    *mcptest.Session
	rdb  *goredis.Client
	runs *atomic.Int64
	logs *testenv.LogBuffer // the registry's log lines, from INFO
}

func newForgetting(t *testing.T) *forgetting {
	t.Helper()
	testenv.NeedRedis(t)
	ctx := testContext(t)
	srv := redistest.Start(t, redistest.Options{})
	st, err := redis.New(ctx, redis.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	f := &forgetting{rdb: goredis.NewClient(&goredis.Options{Addr: srv.Addr()}), runs: new(atomic.Int64), logs: new(testenv.LogBuffer)}
	logger := slog.New(slog.NewTextHandler(f.logs, nil))
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), countingEngine{runs: f.runs}, session.Options{Logger: logger})
	hs := httptest.NewServer(transport.New(reg, transport.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		reg.Close()
		st.Close()
		f.rdb.Close()
	})
	if f.s, err = (&mcptest.Client{URL: hs.URL, HTTP: hs.Client()}).Initialize(ctx, "2025-11-25"); err != nil {
		t.Fatal(err)
	}
	return f
}

// forget makes Redis forget every key, the session's with them.
func (f *forgetting) forget(t *testing.T) {
	t.Helper()
	if err := f.rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
}

// check checks that a call is now refused 404 session_not_found without
// the engine running it (it ran ran calls in all), and that the live
// state was dropped with one WARN line saying why.
func (f *forgetting) check(t *testing.T, ran int64) {
	t.Helper()
	_, err := f.s.Call(testContext(t), mcptest.MustCall(9, "ping", nil))
	wantRefusal(t, err, 404, "session_not_found")
	if n := f.runs.Load(); n != ran {
		t.Errorf("the engine ran %d calls, want %d: the call after the store forgot the session ran", n, ran)
	}
	warn := regexp.MustCompile(`level=WARN msg="live state dropped: the store no longer holds the session \(it is unknown, or ended elsewhere\), so its requests answer 404 session_not_found" session=\S+ generation=1 reason=session_not_found error="[^"\n]*redis store: \w+ session \S+: session not found"\n`)
	if n := len(warn.FindAllString(f.logs.String(), -1)); n != 1 {
		t.Errorf("%d lines match %q, want 1; log:\n%s", n, warn, f.logs)
	}
}

// TestForgottenSessionRunsNoCall: Redis forgets every key (FLUSHALL)
// under a session this process holds live after two calls. A resume with
// the newest cursor then answers 404 session_not_found, and the process
// acts on it: the next call is refused 404 session_not_found too, before
// the engine is handed it (it ran twice, not three times), instead of
// running and being answered -32603 "it may have run".
func TestForgottenSessionRunsNoCall(t *testing.T) {
	f := newForgetting(t)
	ctx := testContext(t)
	newest := ""
	for id := int64(2); id <= 3; id++ {
		str, err := f.s.Call(ctx, mcptest.MustCall(id, "ping", nil))
		if err != nil {
			t.Fatalf("call %d: %v", id, err)
		}
		evs, err := str.Collect()
		str.Close()
		if err != nil || len(evs) != 2 || !evs[1].IsResponseTo(mcptest.ID(id)) {
			t.Fatalf("call %d: %v, %v; want the priming event and the answer", id, evs, err)
		}
		newest = evs[1].ID
	}
	f.forget(t)
	_, err := f.s.Resume(ctx, newest)
	wantRefusal(t, err, 404, "session_not_found")
	f.check(t, 2)
}

// TestForgottenSessionCallFirst: a call is the first request after Redis
// forgets the session. The process cannot know without a store round
// trip before the engine: the call runs (once), its opening event is
// lost with the session, and it is answered 200 with -32603 saying it
// may have run, reason session_not_found; the live state is dropped with
// the line that says the store no longer holds the session, and the next
// call is refused 404 without running.
func TestForgottenSessionCallFirst(t *testing.T) {
	f := newForgetting(t)
	f.forget(t)
	str, err := f.s.Call(testContext(t), mcptest.MustCall(2, "ping", nil))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := str.Collect()
	str.Close()
	if err != nil || len(evs) != 1 || evs[0].HasID {
		t.Fatalf("events %v, %v; want one, without an id", evs, err)
	}
	answer, ok := evs[0].Response()
	if !ok || answer.ID != mcptest.ID(2) {
		t.Fatalf("event %v: want the answer to 2", evs[0])
	}
	var werr *jsonrpc.Error
	if !errors.As(answer.Error, &werr) || werr.Code != jsonrpc.CodeInternalError ||
		werr.Message != "the call was handed to the server, but the session ended before its answer was stored, so it may have run: check its effect before sending it again, on a new session" ||
		string(werr.Data) != `{"generation":1,"reason":"session_not_found"}` {
		t.Errorf("error %+v; want -32603 session_not_found at generation 1 with the message", answer.Error)
	}
	f.check(t, 1)
}
