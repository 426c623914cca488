package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
)

// startDurable starts `tidemark serve --data-dir dir` on a free loopback
// port and returns the process and its endpoint URL.
func startDurable(t *testing.T, bin, dir string) (*testenv.Process, string) {
	t.Helper()
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--log-level", "DEBUG")
	url := testenv.ServeURL(t, p)
	abs, _ := filepath.Abs(dir)
	p.WaitFor(t, `msg=serving url=\S+ store=durable dir=`+regexpQuote(abs), 5*time.Second)
	return p, url
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// kill9 sends SIGKILL and waits for the process to be gone.
func kill9(t *testing.T, p *testenv.Process) {
	t.Helper()
	p.Kill()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not die within 10s of SIGKILL")
	}
}

// progressLog records every progress notification a client received, and
// fails the test on the second delivery of any.
type progressLog struct {
	t    *testing.T
	seen map[string]bool
}

// note records ev if it is a progress notification and returns its
// progress value (0 when it is not one).
func (pl *progressLog) note(ev mcptest.Event) int {
	pl.t.Helper()
	req, ok := ev.Request()
	if !ok || req.Method != "notifications/progress" {
		return 0
	}
	var p struct {
		ProgressToken any     `json:"progressToken"`
		Progress      float64 `json:"progress"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil {
		pl.t.Fatalf("progress params %s: %v", req.Params, err)
	}
	key := fmt.Sprintf("%v/%v", p.ProgressToken, p.Progress)
	if pl.seen[key] {
		pl.t.Fatalf("progress %s delivered twice (event id %s)", key, ev.ID)
	}
	pl.seen[key] = true
	return int(p.Progress)
}

func cursorGen(t *testing.T, id string) uint64 {
	t.Helper()
	c, err := replay.Parse(id)
	if err != nil {
		t.Fatalf("cursor %q: %v", id, err)
	}
	return c.Generation
}

func wantRefusal(t *testing.T, err error, status int, reason string) *mcptest.StatusError {
	t.Helper()
	se, ok := mcptest.AsStatusError(err)
	if !ok {
		t.Fatalf("got %v, want HTTP %d %s", err, status, reason)
	}
	if se.Status != status || se.Reason() != reason {
		t.Fatalf("got HTTP %d reason %q (%s), want %d %s", se.Status, se.Reason(), se.RawBody, status, reason)
	}
	return se
}

// TestRestartKill9 is the rolling-restart case the rule comes from
// (DESIGN.md, "Where the rule comes from"), made explicit: a
// session survives kill -9 of a `tidemark serve --data-dir` process, its
// old cursors answer 409 generation_mismatch, the same token keeps working
// at the next generation, streams of that generation resume exactly, no
// progress notification is delivered twice, and a deleted session stays
// deleted across a restart.
func TestRestartKill9(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pl := &progressLog{t: t, seen: map[string]bool{}}

	p1, url1 := startDurable(t, bin, dir)
	sess, err := (&mcptest.Client{URL: url1}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}

	// countdown of 200 steps, 20 ms apart; read the first 30 steps.
	st, err := sess.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 200, "delay_ms": 20}, "cd-1"))
	if err != nil {
		t.Fatal(err)
	}
	var last string
	if _, err := st.Until(func(ev mcptest.Event) bool {
		if ev.HasID {
			last = ev.ID
		}
		return pl.note(ev) == 30
	}); err != nil {
		t.Fatal(err)
	}
	if g := cursorGen(t, last); g != 1 {
		t.Fatalf("cursor %s has generation %d before the restart, want 1", last, g)
	}

	kill9(t, p1)
	st.Close()
	p2, url2 := startDurable(t, bin, dir)
	sess.Client = &mcptest.Client{URL: url2}

	// The last cursor the client holds: 409, and no event.
	_, err = sess.Resume(ctx, last)
	se := wantRefusal(t, err, http.StatusConflict, "generation_mismatch")
	if ct := se.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("409 answer has Content-Type %q, want application/json (no event stream)", ct)
	}

	// The same token works at once, at generation 2, without initialize.
	st, err = sess.Call(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "after restart"}, nil))
	if err != nil {
		t.Fatalf("POST with the old token after the restart: %v", err)
	}
	evs, err := st.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || !evs[0].IsPriming() || !evs[1].IsResponseTo(mcptest.ID(3)) {
		t.Fatalf("echo after restart answered %d events %v, want priming + response", len(evs), evs)
	}
	if g := cursorGen(t, evs[0].ID); g != 2 {
		t.Fatalf("echo stream cursor %s has generation %d, want 2", evs[0].ID, g)
	}
	if res, _ := evs[1].Response(); res.Error != nil || !strings.Contains(string(res.Result), `"after restart"`) {
		t.Fatalf("echo result %s %v", res.Result, res.Error)
	}

	// A new stream of generation 2, cut after step 10, resumes exactly
	// after the cut: steps 11..40 and the result, each once.
	st, err = sess.Call(ctx, mcptest.ToolCall(4, "countdown", map[string]any{"n": 40, "delay_ms": 5}, "cd-2"))
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	if _, err := st.Until(func(ev mcptest.Event) bool {
		if ev.HasID {
			last = ev.ID
		}
		if n := pl.note(ev); n > 0 {
			got = append(got, n)
		}
		return len(got) == 10
	}); err != nil {
		t.Fatal(err)
	}
	st.Close() // the connection cut
	if g := cursorGen(t, last); g != 2 {
		t.Fatalf("cursor %s has generation %d, want 2", last, g)
	}
	st, err = sess.Resume(ctx, last)
	if err != nil {
		t.Fatalf("resuming generation 2 after a cut: %v", err)
	}
	evs, err = st.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || !evs[0].IsPriming() || !evs[0].ResumesFrom(last) {
		t.Fatalf("resumed stream starts with %v, want a priming event naming the position of %s with a new id", evs, last)
	}
	var done bool
	for _, ev := range evs[1:] {
		if n := pl.note(ev); n > 0 {
			got = append(got, n)
		}
		if ev.IsResponseTo(mcptest.ID(4)) {
			done = true
		}
	}
	if !done {
		t.Fatalf("resumed stream ended without the countdown's result: %v", evs)
	}
	for i, n := range got {
		if n != i+1 {
			t.Fatalf("progress across the cut = %v, want 1..40 each once in order", got)
		}
	}
	if len(got) != 40 {
		t.Fatalf("got %d progress steps across the cut, want 40", len(got))
	}

	// A second process on the same directory is refused, not let in.
	dup := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
	if err := dup.Wait(); err == nil {
		t.Fatal("a second tidemark on the same --data-dir exited 0")
	}
	if out := dup.Output(); !strings.Contains(out, "in use") || !strings.Contains(out, "another tidemark process holds its lock") {
		t.Fatalf("second process on the same directory said:\n%s", out)
	}

	// DELETE, restart: the token answers 404.
	if err := sess.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	kill9(t, p2) // the tombstone must be durable already
	_, url3 := startDurable(t, bin, dir)
	sess.Client = &mcptest.Client{URL: url3}
	resp, err := sess.Post(ctx, mcptest.ToolCall(5, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, mcptest.ReadStatusError(resp), http.StatusNotFound, "session_not_found")
	_, err = sess.Resume(ctx, last)
	wantRefusal(t, err, http.StatusNotFound, "session_not_found")
}

// TestServeDataDirRefused: `tidemark serve --data-dir` exits before
// listening, with a message naming the directory and what to do, when the
// directory cannot be used: 1 when the store refuses it, 2 (a usage error,
// before anything starts) for a path that is a file.
func TestServeDataDirRefused(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	cases := []struct {
		name    string
		prepare func(dir string)
		want    string
		code    int // 1: the store refuses it; 2: a usage error, before the store opens
	}{
		{"newer format", func(dir string) {
			os.MkdirAll(dir, 0o700)
			os.WriteFile(filepath.Join(dir, "FORMAT"), []byte("tidemark-durable 9\n"), 0o600)
		}, "data directory has a newer format: format 9, this build reads format 1: run a newer tidemark, or choose another --data-dir", 1},
		{"not a Tidemark directory", func(dir string) {
			os.MkdirAll(dir, 0o700)
			os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600)
		}, "not a Tidemark data directory: it has files (notes.txt) but no FORMAT file: choose an empty or new directory", 1},
		{"a file, not a directory", func(dir string) {
			os.WriteFile(dir, []byte("x"), 0o600)
		}, "is a file, not a directory: want a directory path (made if missing)", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			c.prepare(dir)
			p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
			err := p.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.code {
				t.Fatalf("exit status %v, want %d; output:\n%s", err, c.code, p.Output())
			}
			out := p.Output()
			prefix := "tidemark serve: --data-dir: durable store: data directory " + dir
			if c.code == 2 {
				prefix = "tidemark serve: --data-dir \"" + dir + "\": "
			}
			if !strings.Contains(out, prefix) || !strings.Contains(out, c.want) || strings.Contains(out, "msg=serving") {
				t.Fatalf("output:\n%s\nwant the directory %s and %q, and no serving line", out, dir, c.want)
			}
		})
	}
}
