package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestSIGTERMLetsCallsFinish: SIGTERM to `tidemark serve --data-dir` lets a
// call in flight finish on its stream within --shutdown-grace, refuses new
// calls meanwhile with 503, and exits 0; after the restart the same session
// token works (regression: every stream was cut at once, and the call
// running was lost with its generation).
func TestSIGTERMLetsCallsFinish(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	p1, url1 := startDurable(t, bin, dir)
	sess, err := (&mcptest.Client{URL: url1}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// countdown of 10 steps, 150 ms apart: about 1.5 s, well within the
	// default 10 s grace.
	st, err := sess.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 10, "delay_ms": 150}, "cd"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Until(func(ev mcptest.Event) bool { return !ev.IsPriming() }); err != nil {
		t.Fatal(err)
	}
	if err := p1.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The deadlines of the default --shutdown-grace (10s), the streams'
	// close (5s), the sessions' handover (2s) and the operator's
	// listener's close (5s).
	p1.WaitFor(t, `msg="shutting down" reason=signal grace=10s exit_within=22s`, 5*time.Second)
	p1.WaitFor(t, `msg=draining reason=shutdown calls=1`, 5*time.Second)

	_, err = sess.Call(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "x"}, nil))
	wantRefusal(t, err, http.StatusServiceUnavailable, "unavailable")

	evs, err := st.Collect()
	if err != nil {
		t.Fatalf("the call's stream after SIGTERM: %v", err)
	}
	progress := 0
	for _, ev := range evs {
		if r, ok := ev.Request(); ok && r.Method == "notifications/progress" {
			progress++
		}
	}
	r, ok := evs[len(evs)-1].Response()
	if !ok || r.Error != nil || progress != 9 {
		t.Fatalf("after SIGTERM the stream carried %d progress events and ended with %+v; want the other 9 and the result", progress, evs[len(evs)-1])
	}
	select {
	case <-p1.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("tidemark did not exit within 10s of the call's end")
	}
	if err := p1.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0", err)
	}

	_, url2 := startDurable(t, bin, dir)
	sess.Client = &mcptest.Client{URL: url2}
	st2, err := sess.Call(ctx, mcptest.ToolCall(4, "echo", map[string]any{"text": "after"}, nil))
	if err != nil {
		t.Fatalf("the session after the restart: %v", err)
	}
	defer st2.Close()
	evs, err = st2.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := evs[len(evs)-1].Response(); !ok || r.Error != nil {
		t.Fatalf("echo after the restart ended with %+v", evs[len(evs)-1])
	}
}

// TestSIGTERMGraceRunsOut: when a call outlasts --shutdown-grace, its
// stream and the standalone GET stream still end with a final retry field
// and a complete response before the process exits 0 (regression: the
// drain used up the one shutdown deadline, and the streams were cut without
// either).
func TestSIGTERMGraceRunsOut(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--shutdown-grace", "500ms")
	url := testenv.ServeURL(t, p)
	sess, err := (&mcptest.Client{URL: url}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	get, err := sess.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer get.Close()
	st, err := sess.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 400, "delay_ms": 5}, "cd"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Until(func(ev mcptest.Event) bool { return !ev.IsPriming() }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*mcptest.Stream{"call": st, "GET": get} {
		evs, err := s.Collect()
		if err != nil {
			t.Fatalf("%s stream after SIGTERM: %v, want a complete response", name, err)
		}
		if len(evs) == 0 || evs[len(evs)-1].Retry <= 0 {
			t.Fatalf("%s stream ended with %+v, want a final event with a retry field", name, evs)
		}
	}
	exitsCleanly(t, p, 10*time.Second)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("exit %v after SIGTERM, want about the 500ms grace", d)
	}
}

// TestSIGTERMEndsListens: SIGTERM ends an idle 2026-07-28 listen stream at
// once, its response ending properly, and the process exits well within
// the default 10 s --shutdown-grace: a listen stream is no call in flight.
// The failing input (a tester's): with one idle listener the process exited
// the whole grace plus 5 s after SIGTERM, and curl reported the stream cut
// mid-chunk (exit 18).
func TestSIGTERMEndsListens(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0")
	url := testenv.ServeURL(t, p)
	body := mcptest.SessionlessBody(1, "subscriptions/listen", map[string]any{"notifications": map[string]any{"toolsListChanged": true}}, nil)
	resp, br, err := (&mcptest.Client{URL: url}).Listen(ctx, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// A cut chunked body reads io.ErrUnexpectedEOF.
	if rest, err := io.ReadAll(br); err != nil {
		t.Fatalf("the listen stream after SIGTERM ended with %v after %q, want its end", err, rest)
	}
	exitsCleanly(t, p, 10*time.Second)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("exit %v after SIGTERM with an idle listen stream, want well within the 10s grace", d)
	}
	t.Logf("exit %v after SIGTERM", time.Since(start))
}

// TestExitWithin: the exit_within of the "shutting down" line is the sum of
// the shutdown's deadlines: --shutdown-grace, 5 s for the streams' close,
// 2 s for the sessions' handover, --lease-renew for the leases' release in a fleet, and 5 s for the
// operator's listener and the traces' flush. The stop timeouts of deploy/
// are checked against it.
func TestExitWithin(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 22 * time.Second},
		{[]string{"--shutdown-grace", "0s"}, 12 * time.Second},
		{[]string{"--shutdown-grace", "30s"}, 42 * time.Second},
		{[]string{"--redis", "redis://127.0.0.1:6379/0"}, 25 * time.Second},
		{[]string{"--redis", "redis://127.0.0.1:6379/0", "--lease-renew", "1s", "--shutdown-grace", "15s"}, 28 * time.Second},
	} {
		fs, c := serveFlags(io.Discard)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := c.exitWithin(); got != tc.want {
			t.Errorf("serve %v: exit within %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestSIGHUPDrains: SIGHUP (a closed terminal, or a "reload" sent by
// habit) stops `tidemark serve --data-dir` as SIGTERM does: the shutting
// down line names the signal, the idle session is handed over, and the
// process exits 0, where Go's default killed it at once (exit status
// 129, no drain, the session back at generation+1 after the restart).
func TestSIGHUPDrains(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, url := startDurable(t, bin, dir)
	if _, err := (&mcptest.Client{URL: url}).Initialize(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.WaitFor(t, `msg="shutting down" reason=signal grace=10s exit_within=22s signal=hangup`, 5*time.Second)
	p.WaitFor(t, `msg="sessions handed over" reason=shutdown handed_over=1 not_handed_over=0`, 10*time.Second)
	exitsCleanly(t, p, 10*time.Second)
}

// exitsCleanly waits up to within for p, sent SIGTERM, to exit, and fails
// the test unless it exits in time with status 0.
func exitsCleanly(t *testing.T, p *testenv.Process, within time.Duration) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(within):
		t.Fatalf("tidemark did not exit within %v of SIGTERM", within)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0", err)
	}
}
