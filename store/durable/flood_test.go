package durable_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/floodtest"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestDiskFullMidFlood: the file system (a real tmpfs) fills up
// while a tool floods progress notifications. The client receives only
// stored events, every one of them (its last cursor is the stored
// high-water mark), none twice and none skipped; the stream ends; while
// the disk is full, resuming it and a new call answer 503 unavailable (no
// generation is claimed: the session keeps its generation); once space is
// back, the resume answers 409 generation_mismatch (the session continues
// at generation+1) and a new call works.
func TestDiskFullMidFlood(t *testing.T) {
	mnt := tmpfs(t, 48<<20)
	const minFree = 8 << 20
	s, err := durable.Open(filepath.Join(mnt, "data"), durable.Options{MinFreeBytes: minFree, SweepInterval: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{Store: nopClose{s}, Retention: eventlog.Options{Budget: -1}, Transport: transport.Options{Logger: quiet()}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	sess, err := (&mcptest.Client{URL: srv.URL, HTTP: srv.Client()}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var filler string
	got := floodtest.Flood(t, sess, 200, func() { filler = fill(t, mnt, minFree-1<<20) })

	b, err := s.Bounds(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	last := floodtest.Contiguous(t, got, b.HWM)
	if last.Sequence != b.HWM || last.Generation != 1 || b.Generation != 1 {
		t.Fatalf("the client's last cursor is gen %d seq %d; the store holds gen %d up to %d: want every stored event delivered",
			last.Generation, last.Sequence, b.Generation, b.HWM)
	}
	t.Logf("%d events delivered before the disk filled, the last at the stored HWM %d", len(got), b.HWM)

	_, err = sess.Resume(ctx, last.String())
	var se *mcptest.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || se.Reason() != string(replay.ReasonUnavailable) {
		t.Fatalf("resume of the lost generation's stream on the full disk = %v, want 503 unavailable", err)
	}
	resp, err := sess.Post(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if se := mcptest.ReadStatusError(resp); se.Status != http.StatusServiceUnavailable || se.Reason() != string(replay.ReasonUnavailable) {
		t.Fatalf("a call on the full disk = %d %q (%s), want 503 unavailable", se.Status, se.Reason(), se.RawBody)
	}
	if b, err := s.Bounds(ctx, sess.Token); err != nil || b.Generation != 1 {
		t.Fatalf("bounds after the requests on the full disk: generation %d, %v; want 1", b.Generation, err)
	}
	os.Remove(filler)
	_, err = sess.Resume(ctx, last.String())
	if !errors.As(err, &se) || se.Status != http.StatusConflict || se.Reason() != string(replay.ReasonGenerationMismatch) {
		t.Fatalf("resume of the lost generation's stream once space is back = %v, want 409 generation_mismatch", err)
	}
	st, err := sess.Call(ctx, mcptest.ToolCall(4, "echo", map[string]any{"text": "back"}, nil))
	if err != nil {
		t.Fatalf("a call once space is back: %v", err)
	}
	if evs, err := st.Collect(); err != nil || len(evs) != 2 || !evs[1].IsResponseTo(mcptest.ID(4)) {
		t.Fatalf("echo once space is back: %v, %v", evs, err)
	}
}

// TestRetentionDuringFloodKeepsBytes: a tool floods progress
// notifications while retention (MaxEvents 1,000) trims after each append;
// the trims run while the committer publishes the session's pipelined
// appends. The session's byte count stays the size of the events it
// retains, and the directory opens again after Close with that count.
// (A trim wrote back the count it had read before a publication, losing
// the published events' bytes: the count went below zero within a few
// thousand events, and the next Open refused the directory as damaged:
// "log meta floor 47061 hwm 57060 bytes -6610020 is inconsistent".)
func TestRetentionDuringFloodKeepsBytes(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{Store: nopClose{s}, Retention: eventlog.Options{MaxEvents: 1000, Budget: -1}, Transport: transport.Options{Logger: quiet()}})
	srv := httptest.NewServer(h)
	sess, err := (&mcptest.Client{URL: srv.URL, HTTP: srv.Client()}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// The stream may end early (the reader falls more than 1,000 events
	// behind and its position is trimmed) while the tool goes on: the
	// store's count is what is checked, once 4,000 events are stored.
	st, err := sess.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 1000000, "delay_ms": 0}, "p"))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := s.Bounds(ctx, sess.Token)
		if err != nil {
			t.Fatal(err)
		}
		if b.HWM >= 4000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bounds after 30 s of flood: %+v, want 4,000 events appended", b)
		}
	}
	st.Close()
	srv.Close()
	h.Close()
	if err := s.Sync(ctx, sess.Token); err != nil {
		t.Fatal(err)
	}
	evs, b, err := s.Read(ctx, sess.Token, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, e := range evs {
		size += e.Size()
	}
	if b.Bytes != size || b.HWM < 4000 || len(evs) != b.Events {
		t.Fatalf("bounds after the flood: %+v; the log holds %d events of %d bytes (want at least 4,000 appended)", b, len(evs), size)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	if got, err := s.Bounds(ctx, sess.Token); err != nil || got.Bytes != size || got.HWM != b.HWM {
		t.Fatalf("bounds after reopen: %+v, %v; want HWM %d and %d bytes", got, err, b.HWM, size)
	}
}
