package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// handoverStores starts, for each store that outlives the process, the
// process a client uses first (first) and the one it resumes on once
// first has exited (next): on --data-dir the same directory after a
// restart, on a Redis fleet a second replica, started before the first
// one's SIGTERM. args are added to the first process's flags.
var handoverStores = []struct {
	name  string
	start func(t *testing.T, bin string, args ...string) (first, next func() (*testenv.Process, string))
}{
	{"data-dir", func(t *testing.T, bin string, args ...string) (first, next func() (*testenv.Process, string)) {
		dir := filepath.Join(t.TempDir(), "data")
		serve := func(extra ...string) func() (*testenv.Process, string) {
			return func() (*testenv.Process, string) {
				p := testenv.StartProcess(t, bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir}, extra...)...)
				return p, testenv.ServeURL(t, p)
			}
		}
		return serve(args...), serve()
	}},
	{"fleet", func(t *testing.T, bin string, args ...string) (first, next func() (*testenv.Process, string)) {
		rs := redistest.Start(t, redistest.Options{})
		replica := func(id string, extra ...string) (*testenv.Process, string) {
			p := testenv.StartProcess(t, bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--redis", rs.URL(),
				"--replica-id", id, "--lease-ttl", "2s", "--lease-renew", "500ms"}, extra...)...)
			return p, testenv.ServeURL(t, p)
		}
		var p2 *testenv.Process
		var url2 string
		first = func() (*testenv.Process, string) {
			p1, url1 := replica("r1", args...)
			p2, url2 = replica("r2")
			return p1, url1
		}
		return first, func() (*testenv.Process, string) { return p2, url2 }
	}},
}

// cutCountdown starts countdown (call id 2, progress token "cd") of n
// steps delayMS apart on sess, reads it up to its third progress event,
// cuts the stream and returns that event's id.
func cutCountdown(t *testing.T, ctx context.Context, sess *mcptest.Session, n, delayMS int) string {
	t.Helper()
	st, err := sess.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": n, "delay_ms": delayMS}, "cd"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	return untilProgress(t, st, 3)
}

// untilProgress reads st until its nth progress notification and returns
// the id of the last event read, failing the test if st ends first.
func untilProgress(t *testing.T, st *mcptest.Stream, n int) string {
	t.Helper()
	var last string
	steps := 0
	if _, err := st.Until(func(ev mcptest.Event) bool {
		if ev.HasID {
			last = ev.ID
		}
		if req, ok := ev.Request(); ok && req.Method == "notifications/progress" {
			steps++
		}
		return steps == n
	}); err != nil {
		t.Fatalf("reading to progress notification %d: %v", n, err)
	}
	return last
}

// terminate sends p SIGTERM, waits for its handover line (want: its
// attributes after reason) and for its exit with status 0.
func terminate(t *testing.T, p *testenv.Process, want string) {
	t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.WaitFor(t, `msg="sessions handed over" reason=shutdown `+want, 20*time.Second)
	exitsCleanly(t, p, 20*time.Second)
}

// TestSIGTERMHandsOver: a client cuts a call's stream after 3 of its 10
// progress events; SIGTERM's drain lets the call finish and store its
// answer, and the shutdown hands the session over at its generation.
// Resuming with the last cursor, after a restart on --data-dir or on
// another replica of a Redis fleet, answers 200 with the remaining 7
// progress events and the answer, at their ids of generation 1, after a
// priming event resuming from that cursor (regression: the next process
// claimed generation 2, and the resume answered 409 generation_mismatch
// with lostRequests [] for an answer that was stored but never readable).
// At the default log level the handover writes its summary line and no
// "session hibernated" line.
func TestSIGTERMHandsOver(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	for _, tc := range handoverStores {
		t.Run(tc.name, func(t *testing.T) {
			first, next := tc.start(t, bin)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			p1, url1 := first()
			sess, err := (&mcptest.Client{URL: url1}).Initialize(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			last := cutCountdown(t, ctx, sess, 10, 150)
			cut, err := replay.Parse(last)
			if err != nil {
				t.Fatal(err)
			}
			terminate(t, p1, `handed_over=1 not_handed_over=0`)
			if out := p1.Output(); strings.Contains(out, `msg="session hibernated"`) {
				t.Errorf("a session hibernated line at the default level, want the handover's summary alone:\n%s", out)
			}

			_, url2 := next()
			sess.Client = &mcptest.Client{URL: url2}
			st, err := sess.Resume(ctx, last)
			if err != nil {
				t.Fatalf("resume at %s after the handover: %v, want 200", last, err)
			}
			defer st.Close()
			evs, err := st.Until(func(ev mcptest.Event) bool { _, ok := ev.Response(); return ok })
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 9 || !evs[0].ResumesFrom(last) {
				t.Fatalf("resumed stream: %d events starting with %+v; want 9, a priming event resuming from %s first", len(evs), evs[0], last)
			}
			for i, ev := range evs[1:] {
				want := cut
				want.Sequence += uint64(i + 1)
				if ev.ID != want.String() {
					t.Errorf("event %d: id %q, want %q", i+1, ev.ID, want.String())
				}
			}
			for i, ev := range evs[1:8] {
				req, ok := ev.Request()
				var p struct {
					Progress float64 `json:"progress"`
				}
				if !ok || req.Method != "notifications/progress" || json.Unmarshal(req.Params, &p) != nil || p.Progress != float64(i+4) {
					t.Errorf("event %d: %s, want progress %d", i+1, ev.Data, i+4)
				}
			}
			r, _ := evs[8].Response()
			if r.Error != nil || fmt.Sprint(r.ID.Raw()) != "2" || !strings.Contains(string(r.Result), "countdown of 10 finished") {
				t.Fatalf("answer %s, want call 2's result", evs[8].Data)
			}
		})
	}
}

// TestSIGTERMGraceRunsOutLosesCall: a call still running when
// --shutdown-grace runs out is not handed over: its session is closed, and
// resuming its stream after a restart on --data-dir, or on another
// replica of a Redis fleet, answers 409 generation_mismatch naming it in
// error.data.lostRequests.
func TestSIGTERMGraceRunsOutLosesCall(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	for _, tc := range handoverStores {
		t.Run(tc.name, func(t *testing.T) {
			first, next := tc.start(t, bin, "--shutdown-grace", "300ms")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			p1, url1 := first()
			sess, err := (&mcptest.Client{URL: url1}).Initialize(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			// About 6 s: it outlasts the grace.
			last := cutCountdown(t, ctx, sess, 300, 20)
			terminate(t, p1, `handed_over=0 not_handed_over=1`)

			_, url2 := next()
			sess.Client = &mcptest.Client{URL: url2}
			_, err = sess.Resume(ctx, last)
			wantLost(t, err, "generation_mismatch", `[2]`)
		})
	}
}
