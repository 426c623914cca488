package durable_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/transport"
)

// outageServer serves the demo server over real HTTP on loopback from s,
// logging the registry's lines to logs.
func outageServer(t *testing.T, s *durable.Store, logs *testenv.LogBuffer) *mcptest.Client {
	t.Helper()
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Store:     nopClose{s},
		Retention: eventlog.Options{Budget: -1},
		Sessions:  session.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))},
		Transport: transport.Options{Logger: quiet()},
	})
	srv := httptest.NewServer(h)
	hc := &http.Client{}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		srv.Close()
		h.Close()
	})
	return &mcptest.Client{URL: srv.URL, HTTP: hc}
}

// loseCall starts a countdown (request id 2) on sess, reads its stream
// until two progress events arrived, runs outage, and reads the stream to
// its end (the generation is lost: it closes after the last stored
// event). It returns the id of the last event read.
func loseCall(t *testing.T, ctx context.Context, sess *mcptest.Session, outage func()) string {
	t.Helper()
	st, err := sess.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 100, "delay_ms": 30}, "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var last string
	progress := 0
	if _, err := st.Until(func(ev mcptest.Event) bool {
		if ev.HasID && ev.ID != "" {
			last = ev.ID
		}
		if strings.Contains(string(ev.Data), "notifications/progress") {
			progress++
		}
		return progress == 2
	}); err != nil {
		t.Fatal(err)
	}
	outage()
	for {
		ev, err := st.Next()
		if err != nil {
			break
		}
		if ev.IsResponseTo(mcptest.ID(2)) {
			t.Fatalf("the countdown finished through the outage: %s", ev.Data)
		}
		if ev.HasID && ev.ID != "" {
			last = ev.ID
		}
	}
	return last
}

// TestClaimRefusedOnFullDisk: on a file system under the free-space
// guard, a request to a session whose generation was lost (a countdown in
// flight when the disk filled) answers 503 unavailable and claims no
// generation: the record stays at generation 1 and nothing is re-created.
// Once space is back, a resume with the countdown's last cursor answers
// 409 generation_mismatch naming the lost request (lostRequests [2]), and
// the session goes on at generation 2.
func TestClaimRefusedOnFullDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mnt := tmpfs(t, 48<<20)
	const minFree = 8 << 20
	s, err := durable.Open(filepath.Join(mnt, "data"), durable.Options{MinFreeBytes: minFree, SweepInterval: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logs := &testenv.LogBuffer{}
	c := outageServer(t, s, logs)
	sess, err := c.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var filler string
	cursor := loseCall(t, ctx, sess, func() { filler = fill(t, mnt, minFree-1<<20) })

	refusedNoClaim(t, ctx, s, sess, logs, "on a full disk")

	os.Remove(filler)
	_, err = sess.Resume(ctx, cursor)
	se, ok := mcptest.AsStatusError(err)
	if !ok || se.Status != http.StatusConflict || se.Reason() != "generation_mismatch" {
		t.Fatalf("resume from %s once space is back = %v, want 409 generation_mismatch", cursor, err)
	}
	if lost, _ := json.Marshal(se.Body.Data["lostRequests"]); string(lost) != "[2]" {
		t.Fatalf("409 lostRequests = %s, want [2] (body %s)", lost, se.RawBody)
	}
	if rec, err := s.Get(ctx, sess.Token); err != nil || rec.Generation != 2 {
		t.Fatalf("record once space is back: generation %d, %v; want 2", rec.Generation, err)
	}
}

// TestClaimRefusedWithoutDataDirectory: once the data directory is
// removed, a request to a session whose generation was lost answers 503
// unavailable and claims no generation (the record stays at 1).
func TestClaimRefusedWithoutDataDirectory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "data")
	s, err := durable.Open(dir, durable.Options{MinFreeBytes: 1 << 20, SweepInterval: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logs := &testenv.LogBuffer{}
	c := outageServer(t, s, logs)
	sess, err := c.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	loseCall(t, ctx, sess, func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	})
	refusedNoClaim(t, ctx, s, sess, logs, "without the data directory")
}

// TestHibernationRefusedOnFullDisk: an idle session whose hibernation
// sweeps run while the file system is under the free-space guard stays
// awake at generation 1; once space is back, a resume with the cursor
// its client held answers 200 with exactly the answer after it, and a
// later sweep hibernates it.
func TestHibernationRefusedOnFullDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mnt := tmpfs(t, 48<<20)
	const minFree = 8 << 20
	s, err := durable.Open(filepath.Join(mnt, "data"), durable.Options{MinFreeBytes: minFree, SweepInterval: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logs := &testenv.LogBuffer{}
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Store:         nopClose{s},
		Restorable:    true,
		Retention:     eventlog.Options{Budget: -1},
		Sessions:      session.Options{HibernateAfter: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		SweepInterval: 20 * time.Millisecond,
		Transport:     transport.Options{Logger: quiet()},
	})
	srv := httptest.NewServer(h)
	hc := &http.Client{}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		srv.Close()
		h.Close()
	})
	sess, err := (&mcptest.Client{URL: srv.URL, HTTP: hc}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sess.Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "before"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Collect()
	st.Close()
	if err != nil || len(evs) != 2 || !evs[0].IsPriming() || !evs[1].IsResponseTo(mcptest.ID(2)) {
		t.Fatalf("call stream: %v, %v; want the priming event and the answer", evs, err)
	}
	cursor, answer := evs[0].ID, evs[1]
	filler := fill(t, mnt, minFree-1<<20)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "hibernation failed"); {
		if time.Now().After(deadline) {
			t.Fatalf("no hibernation failed within 10 s of the disk filling; log:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, hib := h.Registry().Len(), h.Registry().Hibernated(); n != 1 || hib != 0 {
		t.Fatalf("on the full disk %d sessions live, %d hibernated; want the session awake (1, 0)", n, hib)
	}
	os.Remove(filler)

	st, err = sess.Resume(ctx, cursor)
	if err != nil {
		t.Fatalf("resume with %s once space is back: %v; log:\n%s", cursor, err, logs)
	}
	evs, err = st.Collect()
	st.Close()
	if err != nil || len(evs) != 2 || !evs[0].ResumesFrom(cursor) || evs[1].ID != answer.ID || string(evs[1].Data) != string(answer.Data) {
		t.Fatalf("resumed stream: %v, %v; want a priming event resuming from %s, then the answer %s", evs, err, cursor, answer.ID)
	}
	if strings.Contains(logs.String(), "generation ends here") || strings.Contains(logs.String(), "session re-created") {
		t.Fatalf("the full disk ended a generation; log:\n%s", logs)
	}
	for deadline := time.Now().Add(10 * time.Second); h.Registry().Hibernated() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not hibernated within 10 s of space coming back; log:\n%s", logs)
		}
	}
	if rec, err := s.Get(ctx, sess.Token); err != nil || rec.Generation != 1 || rec.Owner != "" {
		t.Fatalf("record after the later hibernation: generation %d owner %q, %v; want 1, none", rec.Generation, rec.Owner, err)
	}
}

// refusedNoClaim POSTs a call to sess, whose generation was lost during an
// outage (what says which), and wants 503 unavailable with the record
// still at generation 1 and no claim logged.
func refusedNoClaim(t *testing.T, ctx context.Context, s *durable.Store, sess *mcptest.Session, logs *testenv.LogBuffer, what string) {
	t.Helper()
	resp, err := sess.Post(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": what}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if se := mcptest.ReadStatusError(resp); se.Status != http.StatusServiceUnavailable || se.Reason() != "unavailable" {
		t.Fatalf("POST to the lost generation %s = %d %q (%s), want 503 unavailable", what, se.Status, se.Reason(), se.RawBody)
	}
	if rec, err := s.Get(ctx, sess.Token); err != nil || rec.Generation != 1 {
		t.Fatalf("record after the POST %s: generation %d, %v; want 1 (no claim)", what, rec.Generation, err)
	}
	if strings.Contains(logs.String(), "session re-created") {
		t.Fatalf("a generation was claimed %s; log:\n%s", what, logs)
	}
}
