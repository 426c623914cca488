package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// wantLost checks that a refused resume is a 409 for reason whose
// error.data.lostRequests encodes as want (a JSON array), followed by
// " answered " and error.data.answeredRequests and " running " and
// error.data.runningRequests when the body has them.
func wantLost(t *testing.T, err error, reason, want string) {
	t.Helper()
	se := wantRefusal(t, err, http.StatusConflict, reason)
	if _, ok := se.Body.Data["lostRequests"]; !ok {
		t.Fatalf("409 %s has no error.data.lostRequests: %s", reason, se.RawBody)
	}
	var got string
	for _, k := range []struct{ key, prefix string }{{"lostRequests", ""}, {"answeredRequests", " answered "}, {"runningRequests", " running "}} {
		v, ok := se.Body.Data[k.key]
		if !ok {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got += k.prefix + string(b)
	}
	if got != want {
		t.Fatalf("409 %s: requests %s, want %s (body %s)", reason, got, want, se.RawBody)
	}
}

// firstCursor reads events of st until one with an id and returns that id.
func firstCursor(t *testing.T, st *mcptest.Stream) string {
	t.Helper()
	var id string
	if _, err := st.Until(func(ev mcptest.Event) bool {
		id = ev.ID
		return ev.HasID && ev.ID != ""
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestLostRequestsAfterRestart: a call cut mid-stream is lost with its
// generation when `tidemark serve --data-dir` is killed; resuming its
// stream after the restart answers 409 generation_mismatch naming that
// call's id in error.data.lostRequests, and still does after a second
// restart. The standalone GET stream carries no request: [].
func TestLostRequestsAfterRestart(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	p1, url1 := startDurable(t, bin, dir)
	sess, err := (&mcptest.Client{URL: url1}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	get, err := sess.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	getCursor := firstCursor(t, get)
	st, err := sess.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 200, "delay_ms": 20}, "cd"))
	if err != nil {
		t.Fatal(err)
	}
	last := untilProgress(t, st, 5)
	kill9(t, p1)
	st.Close()
	get.Close()

	p2, url2 := startDurable(t, bin, dir)
	sess.Client = &mcptest.Client{URL: url2}
	_, err = sess.Resume(ctx, last)
	wantLost(t, err, "generation_mismatch", `[2]`)
	_, err = sess.Resume(ctx, getCursor)
	wantLost(t, err, "generation_mismatch", `[]`)

	kill9(t, p2)
	_, url3 := startDurable(t, bin, dir)
	sess.Client = &mcptest.Client{URL: url3}
	_, err = sess.Resume(ctx, last)
	wantLost(t, err, "generation_mismatch", `[2]`)
}

// TestLostRequestsCompacted: in one process, a stream whose events
// retention removed answers 409 cursor_compacted naming the call still
// running in error.data.runningRequests, not as lost (regression: it was
// in lostRequests, and a client that sent it again ran it twice while it
// went on), and for a stream whose call finished, no lost request and,
// for a cursor before its response, the call in answeredRequests.
func TestLostRequestsCompacted(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--retention-events", "20")
	sess, err := (&mcptest.Client{URL: testenv.ServeURL(t, p)}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	countdown := func(id int64, n, delayMS int) *mcptest.Stream {
		t.Helper()
		st, err := sess.Call(ctx, mcptest.ToolCall(id, "countdown", map[string]any{"n": n, "delay_ms": delayMS}, "cd"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Call 7: the client reads the opening event only, then is cut; the
	// call goes on (40 steps of 100 ms: past the resumes below).
	st := countdown(7, 40, 100)
	cut := firstCursor(t, st)
	st.Close()
	// Call 8 is read to its end; call 9 pushes the floor past it (its
	// own stream may be compacted under its reader too: only its events
	// count here).
	evs, err := countdown(8, 10, 5).Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || !evs[len(evs)-1].IsResponseTo(mcptest.ID(8)) {
		t.Fatalf("call 8's stream: %v, want it to end with the response", evs)
	}
	end := evs[len(evs)-1].ID
	if _, err := countdown(9, 30, 1).Collect(); err != nil {
		t.Fatal(err)
	}

	_, err = sess.Resume(ctx, cut)
	wantLost(t, err, "cursor_compacted", `[] running [7]`)
	want := "; the requests [7] of that stream are still running, and their responses will come after the cursor, " +
		"where no resume reaches them: do not send them again, since they run"
	if se := wantRefusal(t, err, http.StatusConflict, "cursor_compacted"); !strings.HasSuffix(se.Body.Message, want) {
		t.Errorf("409 message %q, want it to end %q", se.Body.Message, want)
	}
	_, err = sess.Resume(ctx, end)
	wantLost(t, err, "cursor_compacted", `[]`)
	// Call 8 finished: a cursor before its response lists it as answered.
	_, err = sess.Resume(ctx, evs[0].ID)
	wantLost(t, err, "cursor_compacted", `[] answered [8]`)
}

// TestLostRequestsTrimmedOpening: a call still running when retention
// has removed its stream's opening event (the only event holding the
// stream's request ids) is named in error.data.runningRequests, and in
// error.data.lostRequests after `tidemark serve` is killed with SIGKILL
// and started again, on the durable store and on Redis: retention keeps
// the ids in the session's record while the stream has not ended.
func TestLostRequestsTrimmedOpening(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) func() (*testenv.Process, string)
	}{
		{"durable", func(t *testing.T) func() (*testenv.Process, string) {
			dir := filepath.Join(t.TempDir(), "data")
			return func() (*testenv.Process, string) {
				p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--retention-events", "20")
				return p, testenv.ServeURL(t, p)
			}
		}},
		{"redis", func(t *testing.T) func() (*testenv.Process, string) {
			rs := redistest.Start(t, redistest.Options{})
			return func() (*testenv.Process, string) {
				p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--redis", rs.URL(),
					"--replica-id", "r1", "--lease-ttl", "2s", "--lease-renew", "500ms", "--retention-events", "20")
				return p, testenv.ServeURL(t, p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := tc.start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			p1, url1 := start()
			sess, err := (&mcptest.Client{URL: url1}).Initialize(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			// Call 7 runs for about 4 s; the client reads its opening
			// event only, then is cut.
			st, err := sess.Call(ctx, mcptest.ToolCall(7, "countdown", map[string]any{"n": 200, "delay_ms": 20}, "cd"))
			if err != nil {
				t.Fatal(err)
			}
			cut := firstCursor(t, st)
			st.Close()
			// Call 8 adds 30 events: with call 7's own, the floor passes
			// call 7's opening event while call 7 still runs.
			if _, err := (func() ([]mcptest.Event, error) {
				st, err := sess.Call(ctx, mcptest.ToolCall(8, "countdown", map[string]any{"n": 30, "delay_ms": 1}, "cd8"))
				if err != nil {
					return nil, err
				}
				return st.Collect()
			})(); err != nil {
				t.Fatal(err)
			}
			_, err = sess.Resume(ctx, cut)
			wantLost(t, err, "cursor_compacted", `[] running [7]`)

			kill9(t, p1)
			_, url2 := start()
			sess.Client = &mcptest.Client{URL: url2}
			_, err = sess.Resume(ctx, cut)
			wantLost(t, err, "generation_mismatch", `[7]`)
		})
	}
}
