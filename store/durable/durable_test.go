package durable_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"

	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/store/storetest"
	"github.com/tidemark-mcp/tidemark/transport"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(taskChildEnv); dir != "" {
		os.Exit(runTaskChild(dir)) // TestTaskSurvivesKill's child process
	}
	goleak.VerifyTestMain(m)
}

// open opens a store in dir with the sweeper off and the free-space check
// off (t.TempDir's file system may be nearly full on a developer machine;
// TestDiskFull tests the check on a file system of its own).
func open(t *testing.T, dir string, opts durable.Options) *durable.Store {
	t.Helper()
	if opts.SweepInterval == 0 {
		opts.SweepInterval = -1
	}
	if opts.MinFreeBytes == 0 {
		opts.MinFreeBytes = -1
	}
	s, err := durable.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, t.TempDir(), durable.Options{Logger: quiet()}) })
}

var ctx = context.Background()

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func rec(token, owner string, seen time.Time) store.Record {
	return store.Record{Token: token, Generation: 1, Owner: owner, State: []byte(`{"protocolVersion":"2025-11-25"}`), Created: seen, LastSeen: seen}
}

func events(n int, at time.Time) []store.Event {
	evs := make([]store.Event, n)
	for i := range evs {
		evs[i] = store.Event{Stream: 1, Kind: store.KindMessage, Data: fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"m","params":{"i":%06d}}`, i), Time: at}
	}
	return evs
}

// TestReopen: records, generations, floors, HWMs, events and tombstones
// read back after Close and Open exactly as they were committed.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tok := range []string{"tok-a", "tok-b", "tok-c", "tok-d"} {
		if err := s.Create(ctx, rec(tok, "boot-1", t0)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, tok, 1, events(10, t0)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Trim(ctx, "tok-a", 1, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "tok-b", "boot-1", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "tok-b", 2, events(2, t0.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	if err := s.End(ctx, "tok-c", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.End(ctx, "tok-d", store.EndIdle, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantA, _ := s.Bounds(ctx, "tok-a")
	wantB, _ := s.Bounds(ctx, "tok-b")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "tok-a"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get after Close = %v, want ErrUnavailable", err)
	}

	s = open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	for tok, want := range map[string]store.Bounds{"tok-a": wantA, "tok-b": wantB} {
		got, err := s.Bounds(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		if got.Generation != want.Generation || got.Floor != want.Floor || got.HWM != want.HWM || got.Events != want.Events || got.Bytes != want.Bytes || !got.Oldest.Equal(want.Oldest) {
			t.Fatalf("%s bounds after reopen = %+v, want %+v", tok, got, want)
		}
	}
	if wantA.Floor != 4 || wantA.HWM != 10 || wantB.Generation != 2 || wantB.Floor != 11 || wantB.HWM != 12 {
		t.Fatalf("bounds before reopen: a %+v b %+v", wantA, wantB)
	}
	evs, _, err := s.Read(ctx, "tok-a", 0, 100)
	if err != nil || len(evs) != 7 || evs[0].Seq != 4 || string(evs[0].Data) != `{"jsonrpc":"2.0","method":"m","params":{"i":000003}}` || !evs[0].Time.Equal(t0) || evs[0].Stream != 1 {
		t.Fatalf("tok-a events after reopen = %+v, %v", evs, err)
	}
	r, err := s.Get(ctx, "tok-b")
	if err != nil || r.Generation != 2 || r.Owner != "boot-1" || string(r.State) != `{"protocolVersion":"2025-11-25"}` || !r.Created.Equal(t0) {
		t.Fatalf("tok-b record after reopen = %+v, %v", r, err)
	}
	var ended *store.EndedError
	if _, err := s.Get(ctx, "tok-c"); !errors.As(err, &ended) || ended.Reason != store.EndDeleted {
		t.Fatalf("tok-c after reopen = %v, want its tombstone (deleted)", err)
	}
	if _, err := s.Get(ctx, "tok-d"); !errors.As(err, &ended) || ended.Reason != store.EndIdle {
		t.Fatalf("tok-d after reopen = %v, want its tombstone (idle)", err)
	}
	if err := s.Create(ctx, rec("tok-c", "boot-2", t0)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Create over the tombstone after reopen = %v, want ErrExists", err)
	}
	// Sequences continue after the reopen.
	more := events(1, t0)
	if _, err := s.Append(ctx, "tok-a", 1, more); err != nil || more[0].Seq != 11 {
		t.Fatalf("append after reopen: seq %d, %v; want 11", more[0].Seq, err)
	}
}

// TestSecondOpenRefused: a second Store on the same directory fails with
// ErrInUse and leaves the first working.
func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	_, err := durable.Open(dir, durable.Options{MinFreeBytes: -1, Logger: quiet()})
	if !errors.Is(err, durable.ErrInUse) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "stop that process") {
		t.Fatalf("second Open = %v, want ErrInUse naming %s and what to do", err, dir)
	}
	if err := s.Create(ctx, rec("tok", "p", time.Now())); err != nil {
		t.Fatalf("first store after the refused second open: %v", err)
	}
}

// TestUncreatableDirectory: a data directory that cannot be created (under
// /proc, whose mkdir fails with ENOENT) is refused with ErrNotWritable,
// saying it cannot be created, and not called damaged.
func TestUncreatableDirectory(t *testing.T) {
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("no /proc here: the test needs Linux's procfs")
	}
	_, err := durable.Open("/proc/nope", durable.Options{Logger: quiet()})
	if !errors.Is(err, durable.ErrNotWritable) || errors.Is(err, durable.ErrCorrupt) ||
		!strings.Contains(err.Error(), "data directory /proc/nope: data directory is not writable: it cannot be created") {
		t.Fatalf("Open(/proc/nope) = %v, want ErrNotWritable saying it cannot be created", err)
	}
}

// TestBadDirectory: a newer format, damaged files and foreign directories
// are refused with the sentinel, the directory's name and advice, and are
// left as they were, lock file included: a foreign directory keeps no LOCK
// file of the refused Open.
func TestBadDirectory(t *testing.T) {
	populated := func(t *testing.T) string {
		dir := t.TempDir()
		s := open(t, dir, durable.Options{Logger: quiet()})
		s.Create(ctx, rec("tok", "p", time.Now()))
		s.Append(ctx, "tok", 1, events(2000, time.Now()))
		if err := s.Compact(ctx); err != nil { // writes a table file
			t.Fatal(err)
		}
		s.Close()
		return dir
	}
	truncate := func(t *testing.T, dir, pattern string) {
		files, _ := filepath.Glob(filepath.Join(dir, pattern))
		if len(files) == 0 {
			t.Fatalf("no %s in %s", pattern, dir)
		}
		for _, f := range files {
			fi, _ := os.Stat(f)
			if err := os.Truncate(f, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name    string
		prepare func(t *testing.T) string
		want    error
		advice  string
	}{
		{"newer format", func(t *testing.T) string {
			dir := populated(t)
			os.WriteFile(filepath.Join(dir, "FORMAT"), []byte("tidemark-durable 2\n"), 0o600)
			return dir
		}, durable.ErrNewerFormat, "format 2, this build reads format 1: run a newer tidemark"},
		{"truncated FORMAT", func(t *testing.T) string {
			dir := populated(t)
			truncate(t, dir, "FORMAT")
			return dir
		}, durable.ErrCorrupt, "restore the directory from a backup"},
		{"truncated table", func(t *testing.T) string {
			dir := populated(t)
			truncate(t, dir, "*.sst")
			return dir
		}, durable.ErrCorrupt, "restore it from a backup"},
		{"not a Tidemark directory", func(t *testing.T) string {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600)
			return dir
		}, durable.ErrForeign, "has files (notes.txt) but no FORMAT file: choose an empty or new directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.prepare(t)
			before := listing(t, dir)
			_, err := durable.Open(dir, durable.Options{MinFreeBytes: -1, SweepInterval: -1, Logger: quiet()})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), c.advice) {
				t.Fatalf("Open = %v\nwant %v naming %s and saying %q", err, c.want, dir, c.advice)
			}
			if after := listing(t, dir); after != before {
				t.Fatalf("the refused Open changed the directory:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestUnusableDirectory: a directory no file can be created in, such as
// one of /proc, is refused as not writable, never as damage: restoring it
// from a backup would not help.
func TestUnusableDirectory(t *testing.T) {
	const dir = "/proc/self"
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("%s: %v (the test needs Linux's /proc)", dir, err)
	}
	_, err := durable.Open(dir, durable.Options{MinFreeBytes: -1, SweepInterval: -1, Logger: quiet()})
	const advice = "no file can be created in it: give --data-dir a directory on a writable file system"
	if !errors.Is(err, durable.ErrNotWritable) || errors.Is(err, durable.ErrCorrupt) || !strings.Contains(err.Error(), advice) {
		t.Fatalf("Open(%s) = %v\nwant ErrNotWritable saying %q", dir, err, advice)
	}
}

// TestTruncatedManifestRecovers: a manifest cut in the middle of a write is
// what a crash leaves; Pebble recovers the last complete state from it and
// the write-ahead log, and nothing committed is lost.
func TestTruncatedManifestRecovers(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	s.Create(ctx, rec("tok", "p", time.Now()))
	if _, err := s.Append(ctx, "tok", 1, events(2000, time.Now())); err != nil {
		t.Fatal(err)
	}
	s.Sync(ctx, "tok")
	s.Compact(ctx)
	s.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	for _, f := range files {
		fi, _ := os.Stat(f)
		os.Truncate(f, fi.Size()/2)
	}
	s = open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	evs, b, err := s.Read(ctx, "tok", 0, 5000)
	if err != nil || b.HWM != 2000 || len(evs) != 2000 || evs[1999].Seq != 2000 {
		t.Fatalf("after a truncated manifest: %d events, bounds %+v, %v; want all 2000", len(evs), b, err)
	}
}

// listing returns the names and sizes of dir's files, but the lock file
// (which Open creates before it reads anything).
func listing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, _ := e.Info()
		fmt.Fprintf(&b, "%s:%d ", e.Name(), fi.Size())
	}
	return b.String()
}

// TestNotWritable: a directory the process cannot write is refused with
// ErrNotWritable. As root, permission bits do not stop writes, so the
// directory is made read-only with a read-only bind mount.
func TestNotWritable(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	s.Create(ctx, rec("tok", "p", time.Now()))
	s.Close()
	if os.Geteuid() == 0 {
		if out, err := exec.Command("mount", "--bind", "-o", "ro", dir, dir).CombinedOutput(); err != nil {
			t.Fatalf("mount --bind -o ro %s: %v: %s (the test needs mount(8) from util-linux and CAP_SYS_ADMIN when run as root)", dir, err, out)
		}
		t.Cleanup(func() { exec.Command("umount", dir).Run() })
	} else {
		os.Chmod(dir, 0o500)
		t.Cleanup(func() { os.Chmod(dir, 0o700) })
	}
	_, err := durable.Open(dir, durable.Options{MinFreeBytes: -1, Logger: quiet()})
	if !errors.Is(err, durable.ErrNotWritable) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "give the tidemark user write permission") {
		t.Fatalf("Open of a read-only directory = %v, want ErrNotWritable naming %s and what to do", err, dir)
	}
}

// tmpfs mounts a file system of size bytes of its own, so the test can fill
// it.
func tmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount -t tmpfs: %v: %s (the test needs root, or CAP_SYS_ADMIN, and mount(8) from util-linux)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file in dir until the file system has less than left bytes
// free, and returns its path.
func fill(t *testing.T, dir string, left uint64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		var st unix.Statfs_t
		unix.Statfs(dir, &st)
		if st.Bavail*uint64(st.Bsize) < left {
			return path
		}
		if _, err := f.Write(chunk); err != nil {
			return path
		}
	}
}

// TestDiskFull: when the file system runs low, the events appended are
// never stored nor visible: the generation is lost (store.ErrLost, its
// cause wrapping store.ErrUnavailable and ErrNoSpace), its later appends
// fail, its Waits return, the LossNotifier hears of it once, and nothing
// committed is lost; Claim is refused on the full disk (the record keeps
// its generation) and starts the next one once space is back; the
// transport answers 503 unavailable; once space is back, appends work
// again. Opening on a full file system is refused.
func TestDiskFull(t *testing.T) {
	mnt := tmpfs(t, 48<<20)
	dir := filepath.Join(mnt, "data")
	const minFree = 8 << 20
	s, err := durable.Open(dir, durable.Options{MinFreeBytes: minFree, SweepInterval: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var lost []string
	var lostMu sync.Mutex
	s.NotifyLost(func(token string, gen uint64, err error) {
		lostMu.Lock()
		lost = append(lost, fmt.Sprintf("%s gen %d: %v", token, gen, errors.Is(err, store.ErrLost)))
		lostMu.Unlock()
	})
	if err := s.Create(ctx, rec("tok", "p", time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "tok", 1, events(100, time.Now())); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, rec("two", "p", time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "two", 1, events(1, time.Now())); err != nil || s.Sync(ctx, "two") != nil {
		t.Fatalf("Append to two: %v", err)
	}
	filler := fill(t, mnt, minFree-1<<20)

	waited := make(chan error, 1)
	go func() { waited <- s.Wait(ctx, "tok", 100) }()
	evs := events(1, time.Now())
	if _, err = s.Append(ctx, "tok", 1, evs); err != nil || evs[0].Seq != 101 {
		t.Fatalf("Append on a full disk = %v (seq %d), want accepted as 101", err, evs[0].Seq)
	}
	err = s.Sync(ctx, "tok")
	var le *store.LostError
	if !errors.As(err, &le) || le.Seq != 101 || le.Generation != 1 || !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, durable.ErrNoSpace) {
		t.Fatalf("Sync after an append on a full disk = %v, want LostError from 101 wrapping ErrUnavailable and ErrNoSpace", err)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, store.ErrLost) {
			t.Fatalf("Wait on the lost generation = %v, want ErrLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait on the lost generation did not return")
	}
	if _, err := s.Append(ctx, "tok", 1, events(1, time.Now())); !errors.Is(err, store.ErrLost) {
		t.Fatalf("Append to the lost generation = %v, want ErrLost", err)
	}
	got, b, err := s.Read(ctx, "tok", 0, 1000)
	if err != nil || len(got) != 100 || b.HWM != 100 || got[99].Seq != 100 {
		t.Fatalf("after the lost append: %d events, HWM %d, %v; want the 100 committed", len(got), b.HWM, err)
	}
	lostMu.Lock()
	heard := append([]string(nil), lost...)
	lostMu.Unlock()
	if len(heard) != 1 || heard[0] != "tok gen 1: true" {
		t.Fatalf("LossNotifier heard %q, want one loss of tok gen 1", heard)
	}
	// Removing data still works when the disk is full; a Claim, which
	// would start a generation that could store nothing, is refused and
	// leaves the record at generation 1.
	if _, err := s.Trim(ctx, "tok", 1, 11); err != nil {
		t.Fatalf("Trim on a full disk: %v", err)
	}
	if _, err := s.Claim(ctx, "tok", "p", 1, time.Time{}); !errors.Is(err, durable.ErrNoSpace) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Claim on a full disk = %v, want ErrNoSpace and ErrUnavailable", err)
	}
	if r, err := s.Get(ctx, "tok"); err != nil || r.Generation != 1 {
		t.Fatalf("record after the refused Claim: generation %d, %v; want 1", r.Generation, err)
	}
	// Once a group found the disk full, an append fails at once and
	// loses nothing: the other session goes on at 2 once space is back.
	if _, err := s.Append(ctx, "two", 1, events(1, time.Now())); !errors.Is(err, durable.ErrNoSpace) || errors.Is(err, store.ErrLost) {
		t.Fatalf("Append to another session on a full disk = %v, want ErrNoSpace at once, not a loss", err)
	}
	// Check, what /readyz asks, says the store refuses new data.
	if err := s.Check(ctx); !errors.Is(err, durable.ErrNoSpace) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Check on a full disk = %v, want ErrNoSpace and ErrUnavailable", err)
	}
	if _, err := durable.Open(filepath.Join(mnt, "other"), durable.Options{MinFreeBytes: minFree, Logger: quiet()}); !errors.Is(err, durable.ErrNoSpace) || !strings.Contains(err.Error(), "free space on its file system") {
		t.Fatalf("Open on a full file system = %v, want ErrNoSpace with advice", err)
	}

	// Through the HTTP transport: a POST whose events cannot be stored
	// answers 503 unavailable; the first one after the disk filled, handed
	// to the server before its opening event was refused, may instead be
	// answered 200 with its JSON-RPC error, generation_lost, saying it may
	// have run, and the next one gets the 503.
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{Store: nopClose{s}, Retention: eventlog.Options{Budget: -1}, Transport: transport.Options{Logger: quiet()}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	os.Remove(filler)
	sess, err := (&mcptest.Client{URL: srv.URL, HTTP: srv.Client()}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	filler = fill(t, mnt, minFree-1<<20)
	resp, err := sess.Post(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"id":2,"error":{"code":-32603,`) || !strings.Contains(string(body), `"reason":"generation_lost"`) ||
			!strings.Contains(string(body), "it may have run") {
			t.Fatalf("POST on a full disk = 200 %s, want the call's error, generation_lost, saying it may have run", body)
		}
		if resp, err = sess.Post(ctx, mcptest.ToolCall(4, "echo", map[string]any{"text": "x"}, nil)); err != nil {
			t.Fatal(err)
		}
	}
	se := mcptest.ReadStatusError(resp)
	if se.Status != http.StatusServiceUnavailable || se.Reason() != "unavailable" {
		t.Fatalf("POST on a full disk = %d %q (%s), want 503 unavailable", se.Status, se.Reason(), se.RawBody)
	}

	os.Remove(filler)
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check once space is back = %v, want nil", err)
	}
	st, err := sess.Call(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "back"}, nil))
	if err != nil {
		t.Fatalf("POST once space is back: %v", err)
	}
	if evs, err := st.Collect(); err != nil || len(evs) != 2 || !evs[1].IsResponseTo(mcptest.ID(3)) {
		t.Fatalf("echo once space is back: %v, %v", evs, err)
	}
	if _, err := s.Claim(ctx, "tok", "p", 1, time.Time{}); err != nil {
		t.Fatalf("Claim once space is back: %v", err)
	}
	more := events(1, time.Now())
	if _, err := s.Append(ctx, "tok", 2, more); err != nil || more[0].Seq != 101 || s.Sync(ctx, "tok") != nil {
		t.Fatalf("Append to generation 2 once space is back: seq %d, %v; want 101, stored", more[0].Seq, err)
	}
	more = events(1, time.Now())
	if _, err := s.Append(ctx, "two", 1, more); err != nil || more[0].Seq != 2 || s.Sync(ctx, "two") != nil {
		t.Fatalf("Append to two once space is back: seq %d, %v; want 2, stored", more[0].Seq, err)
	}
}

// TestCheckedRefusalRefusesAppend: once Check, what /readyz asks, has
// found the store refusing new data (its file system low on space, its
// data directory gone), the next Append fails at once and appends
// nothing, where before it was accepted, its group then failed and its
// generation was lost with a call already handed to the engine (nc15
// m2); once the store takes data again, appends go on at the same
// generation.
func TestCheckedRefusalRefusesAppend(t *testing.T) {
	t.Run("low space", func(t *testing.T) {
		mnt := tmpfs(t, 48<<20)
		dir := filepath.Join(mnt, "data")
		const minFree = 8 << 20
		s, err := durable.Open(dir, durable.Options{MinFreeBytes: minFree, SweepInterval: -1, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Create(ctx, rec("tok", "p", time.Now())); err != nil {
			t.Fatal(err)
		}
		filler := fill(t, mnt, minFree-1<<20)
		if err := s.Check(ctx); !errors.Is(err, durable.ErrNoSpace) {
			t.Fatalf("Check on a full disk = %v, want ErrNoSpace", err)
		}
		if _, err := s.Append(ctx, "tok", 1, events(1, time.Now())); !errors.Is(err, durable.ErrNoSpace) || errors.Is(err, store.ErrLost) {
			t.Fatalf("Append after Check found the disk full = %v, want ErrNoSpace at once, not a loss", err)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		evs := events(1, time.Now())
		if _, err := s.Append(ctx, "tok", 1, evs); err != nil || evs[0].Seq != 1 || s.Sync(ctx, "tok") != nil {
			t.Fatalf("Append once space is back = %v (seq %d), want stored as 1", err, evs[0].Seq)
		}
	})
	t.Run("directory gone", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		s := open(t, dir, durable.Options{Logger: quiet()})
		defer s.Close()
		if err := s.Create(ctx, rec("tok", "p", time.Now())); err != nil {
			t.Fatal(err)
		}
		moved := dir + ".moved"
		if err := os.Rename(dir, moved); err != nil {
			t.Fatal(err)
		}
		if err := s.Check(ctx); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "restore it") {
			t.Fatalf("Check with the directory gone = %v, want ErrUnavailable saying to restore it", err)
		}
		_, err := s.Append(ctx, "tok", 1, events(1, time.Now()))
		if err := os.Rename(moved, dir); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrLost) {
			t.Fatalf("Append after Check found the directory gone = %v, want ErrUnavailable at once, not a loss", err)
		}
		evs := events(1, time.Now())
		if _, err := s.Append(ctx, "tok", 1, evs); err != nil || evs[0].Seq != 1 || s.Sync(ctx, "tok") != nil {
			t.Fatalf("Append once the directory is back = %v (seq %d), want stored as 1", err, evs[0].Seq)
		}
	})
}

// nopClose keeps the handler from closing a store the test closes itself;
// it passes the store's losses on, as the store would.
type nopClose struct{ store.Store }

func (nopClose) Close() error { return nil }

func (n nopClose) NotifyLost(f func(token string, gen uint64, err error)) {
	n.Store.(store.LossNotifier).NotifyLost(f)
}

// TestMaxBytes: over the bound, the oldest events go first, until the
// total is the bound less a sixteenth.
func TestMaxBytes(t *testing.T) {
	s := open(t, t.TempDir(), durable.Options{MaxBytes: 100 * 1000, Logger: quiet()})
	defer s.Close()
	t0 := time.Now()
	s.Create(ctx, rec("old", "p", t0))
	s.Create(ctx, rec("new", "p", t0))
	// Each event is 52 bytes of data + 64 = 116 bytes: 500 events = 58,000.
	if _, err := s.Append(ctx, "old", 1, events(500, t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "new", 1, events(500, t0.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	s.Sync(ctx, "old")
	s.Sync(ctx, "new")
	b, _ := s.Bounds(ctx, "new")
	// 116,000 bytes against 100,000 - 6,250: the oldest 192 events go
	// (22,272 bytes, the fewest that free 22,250), all of "old".
	old, _ := s.Bounds(ctx, "old")
	if old.Floor != 193 || old.Events != 308 || b.Floor != 1 || b.Events != 500 {
		t.Fatalf("after 116,000 bytes against a bound of 100,000: old %+v new %+v; want old floor 193, new untouched", old, b)
	}
	if size := events(1, t0)[0].Size(); size != 116 {
		t.Fatalf("test event of %d bytes, want 116", size)
	}
	if u := s.Usage(); u.RetainedBytes != 808*116 {
		t.Fatalf("retained %d bytes, want %d", u.RetainedBytes, 808*116)
	}
}

// TestMaxBytesKeepsTheNewestEvent: the directory bound never trims a
// session's newest event, so a caught-up client can still cite it, even
// when the newest events alone exceed the bound (an operator's case:
// with --data-dir, 2,000 sessions, then 270 calls echoing 4 MiB each; a
// resume with the newest cursor must answer 200, not 409 cursor_compacted
// with floor = HWM+1). Here: 30 sessions of one
// 116-byte event against a bound of 1,000 bytes. An append in that state
// costs its own fsync and no other, and the condition is logged once, not
// once per append.
func TestMaxBytesKeepsTheNewestEvent(t *testing.T) {
	var logs testenv.LogBuffer
	s := open(t, t.TempDir(), durable.Options{MaxBytes: 1000, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	t0 := time.Now()
	for i := range 30 {
		tok := fmt.Sprintf("s%02d", i)
		s.Create(ctx, rec(tok, "p", t0))
		if _, err := s.Append(ctx, tok, 1, events(1, t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
		s.Sync(ctx, tok)
	}
	for i := range 30 {
		b, err := s.Bounds(ctx, fmt.Sprintf("s%02d", i))
		if err != nil || b.Floor != 1 || b.HWM != 1 || b.Events != 1 {
			t.Fatalf("session s%02d = %+v, %v; want its newest event kept (floor 1, HWM 1)", i, b, err)
		}
	}
	if u := s.Usage(); u.RetainedBytes != 30*116 {
		t.Fatalf("retained %d bytes, want %d", u.RetainedBytes, 30*116)
	}
	// Ten more appends over the bound: one fsync each, their own.
	s.Create(ctx, rec("more", "p", t0))
	before := s.Groups()
	for i := range 10 {
		if _, err := s.Append(ctx, "more", 1, events(1, t0.Add(time.Hour+time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
		s.Sync(ctx, "more")
	}
	if b, _ := s.Bounds(ctx, "more"); b.Floor != 10 || b.HWM != 10 {
		t.Fatalf("session more = %+v, want its older events trimmed and its newest kept (floor 10, HWM 10)", b)
	}
	if n := s.Groups() - before; n > 10+9 {
		t.Fatalf("10 appends over the bound took %d group commits, want at most 19 (each append's own, and one trim per append at most)", n)
	}
	if n := strings.Count(logs.String(), "over its bound"); n != 1 {
		t.Fatalf("%d log lines say the directory is over its bound, want 1 (once per change of condition):\n%s", n, logs.String())
	}
}

// TestSweepInherited: a session inherited from a previous process and idle
// beyond IdleTTL is ended by Sweep; one of this process's is not, nor an
// inherited one seen recently.
func TestSweepInherited(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := open(t, dir, durable.Options{Now: clock, Logger: quiet()})
	s.Create(ctx, rec("idle", "boot-1", now.Add(-time.Hour)))
	s.Create(ctx, rec("recent", "boot-1", now.Add(-time.Minute)))
	s.Close()
	s = open(t, dir, durable.Options{Now: clock, IdleTTL: 30 * time.Minute, Logger: quiet()})
	defer s.Close()
	s.Create(ctx, rec("mine", "boot-2", now.Add(-time.Hour)))
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var ended *store.EndedError
	if _, err := s.Get(ctx, "idle"); !errors.As(err, &ended) || ended.Reason != store.EndIdle {
		t.Fatalf("inherited idle session after Sweep: %v, want ended (idle)", err)
	}
	for _, tok := range []string{"recent", "mine"} {
		if _, err := s.Get(ctx, tok); err != nil {
			t.Fatalf("%s after Sweep: %v, want live", tok, err)
		}
	}
	// The tombstone expires after TombstoneTTL (24 h) and Sweep drops it.
	now = now.Add(25 * time.Hour)
	s.Touch(ctx, "mine", now)
	s.Touch(ctx, "recent", now)
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "idle"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after the tombstone expired: %v, want ErrNotFound", err)
	}
}

// TestCompactReclaims: ending sessions and compacting returns the space of
// their events: the table files shrink to almost nothing.
func TestCompactReclaims(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	for i := range 4 {
		tok := fmt.Sprintf("tok-%d", i)
		s.Create(ctx, rec(tok, "p", time.Now()))
		for range 10 {
			if _, err := s.Append(ctx, tok, 1, events(1000, time.Now())); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Compact(ctx)
	full := s.Usage()
	for i := range 4 {
		s.End(ctx, fmt.Sprintf("tok-%d", i), store.EndDeleted, time.Now().Add(time.Hour))
	}
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	// Pebble deletes the files a compaction made obsolete in the
	// background: wait for them rather than race the cleaner.
	after := s.Usage()
	for deadline := time.Now().Add(5 * time.Second); after.TableBytes > full.TableBytes/20 && time.Now().Before(deadline); after = s.Usage() {
		time.Sleep(10 * time.Millisecond)
	}
	if full.TableBytes < 100_000 || after.TableBytes > full.TableBytes/20 || after.RetainedBytes != 0 {
		t.Fatalf("table files: %d bytes with 40,000 events, %d after ending every session and compacting (retained %d); want under 5%%",
			full.TableBytes, after.TableBytes, after.RetainedBytes)
	}
}

// TestGroupCommit: concurrent appends of different sessions share fsyncs.
func TestGroupCommit(t *testing.T) {
	s := open(t, t.TempDir(), durable.Options{CommitWindow: 5 * time.Millisecond, Logger: quiet()})
	defer s.Close()
	const sessions, per = 8, 20
	for i := range sessions {
		s.Create(ctx, rec(fmt.Sprintf("tok-%d", i), "p", time.Now()))
	}
	before := s.Groups()
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				if _, err := s.Append(ctx, fmt.Sprintf("tok-%d", i), 1, events(1, time.Now())); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if g := s.Groups() - before; g > sessions*per/2 {
		t.Fatalf("%d appends from %d sessions took %d fsyncs; want at most %d (grouped)", sessions*per, sessions, g, sessions*per/2)
	}
}

// TestBadByteCountRecounted: a session whose log meta holds a byte count
// below zero (what a trim racing the committer wrote before its fix) is
// counted again from its events at Open, with a WARN line; the directory
// opens, that session and the others are whole.
func TestBadByteCountRecounted(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	for _, tok := range []string{"bad", "good"} {
		if err := s.Create(ctx, rec(tok, "p", time.Now())); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, tok, 1, events(10, time.Now())); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := s.Bounds(ctx, "bad")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := durable.SetMetaBytes(dir, "bad", -6610020); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s = open(t, dir, durable.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	for _, tok := range []string{"bad", "good"} {
		b, err := s.Bounds(ctx, tok)
		if err != nil || b.Bytes != want.Bytes || b.HWM != 10 || want.Bytes != 10*events(1, time.Now())[0].Size() {
			t.Fatalf("%s after reopen: %+v, %v; want %d bytes, HWM 10", tok, b, err, want.Bytes)
		}
	}
	if line := logs.String(); !strings.Contains(line, "level=WARN") || !strings.Contains(line, "bytes_stored=-6610020") ||
		!strings.Contains(line, fmt.Sprintf("bytes_counted=%d", want.Bytes)) || !strings.Contains(line, "session=bad") {
		t.Fatalf("log: %s; want a WARN line with the stored and counted bytes", line)
	}
}

// TestCheckStalledDisk: while a commit waits on the disk for longer than
// the stall bound (a frozen or failing disk: every write waits behind it),
// Check, what /readyz asks, reports the store unavailable and says what
// to check; once the commit finishes, Check is nil again and the write
// is stored. Regression: Check read only the directory and its free
// space, and /readyz said ready while every request hung.
func TestCheckStalledDisk(t *testing.T) {
	s := open(t, t.TempDir(), durable.Options{Logger: quiet()})
	defer s.Close()
	held, release := s.HoldCommits(50 * time.Millisecond)
	defer release()
	created := make(chan error, 1)
	go func() { created <- s.Create(ctx, rec("tok", "p", time.Now())) }()
	<-held
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check as the commit begins = %v, want nil", err)
	}
	time.Sleep(100 * time.Millisecond)
	err := s.Check(ctx)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "a write to its disk has not finished for") ||
		!strings.HasSuffix(err.Error(), "check the disk (stalled, frozen, or failing); writes go on when it answers") {
		t.Fatalf("Check with a commit held 100 ms = %v, want ErrUnavailable saying the disk is stalled", err)
	}
	release()
	if err := <-created; err != nil {
		t.Fatalf("Create once the disk answers: %v", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check once the commit finished = %v, want nil", err)
	}
	if r, err := s.Get(ctx, "tok"); err != nil || r.Generation != 1 {
		t.Fatalf("record after the stall: generation %d, %v; want 1", r.Generation, err)
	}
}

// TestDamagedLogRefused: a write-ahead log overwritten in its middle, with
// records committed after the damaged one in a later 32 KiB block of it,
// is refused as damaged, as a damaged table is, instead of read as a log
// that ends there; the directory's first log too, which is all a fresh
// directory has until its next open. Damage that no later block's record
// contradicts reads as the torn tail of a crash and is not detected
// (docs/stores.md).
func TestDamagedLogRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	s.Create(ctx, rec("tok", "p", time.Now()))
	for range 20 {
		if _, err := s.Append(ctx, "tok", 1, events(50, time.Now())); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(ctx, "tok"); err != nil { // one commit each
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // the events stay in the log, unflushed
		t.Fatal(err)
	}
	// The log that holds the events is the largest.
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var log string
	var fi os.FileInfo
	for _, l := range logs {
		if li, err := os.Stat(l); err == nil && (fi == nil || li.Size() > fi.Size()) {
			log, fi = l, li
		}
	}
	if fi == nil || fi.Size() < 3*32<<10 {
		t.Fatalf("logs %v: want one of at least 96 KiB", logs)
	}
	f, err := os.OpenFile(log, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("0123456789abcdef"), fi.Size()/3)
	f.Close()
	s2, err := durable.Open(dir, durable.Options{MinFreeBytes: -1, Logger: quiet()})
	if err == nil {
		evs, _, _ := s2.Read(ctx, "tok", 0, 5000)
		s2.Close()
		t.Fatalf("Open after the log was overwritten at %d of %d bytes succeeded, with %d of 1000 events; want ErrCorrupt", fi.Size()/3, fi.Size(), len(evs))
	}
	if !errors.Is(err, durable.ErrCorrupt) || !strings.Contains(err.Error(), "restore it from a backup") {
		t.Fatalf("Open after the log was overwritten at %d of %d bytes = %v, want ErrCorrupt", fi.Size()/3, fi.Size(), err)
	}
}

// TestOpeningsAfterCrash: the openings a trim keeps in a record, the mark
// of the streams whose ids it did not keep included (store.Openings),
// read back from what a killed process leaves: a copy of the directory
// taken while the store is open, opened without the first store's Close.
func TestOpeningsAfterCrash(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	if err := s.Create(ctx, rec("tok", "p", time.Now())); err != nil {
		t.Fatal(err)
	}
	evs := []store.Event{{Stream: store.NewStream, Kind: store.KindPriming, Data: []byte(`["` + strings.Repeat("x", store.MaxOpeningBytes) + `"]`)}}
	for i := range store.MaxOpenings + 1 {
		evs = append(evs, store.Event{Stream: store.NewStream, Kind: store.KindPriming, Data: fmt.Appendf(nil, "[%d]", i)})
	}
	evs = append(evs, store.Event{Stream: 0, Kind: store.KindPriming})
	for i := range evs {
		if _, err := s.Append(ctx, "tok", 1, evs[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Trim(ctx, "tok", 1, uint64(len(evs))); err != nil {
		t.Fatal(err)
	}
	// The trim's batch is committed with the next group commit.
	if _, err := s.Append(ctx, "tok", 1, []store.Event{{Stream: 0, Kind: store.KindPriming}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	want, err := s.Get(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	if want.Openings.Dropped() != 2 || len(want.Openings) != store.MaxOpenings+1 {
		t.Fatalf("openings after the trim: mark %d, %d openings; want the mark at stream 2 and %d openings",
			want.Openings.Dropped(), len(want.Openings), store.MaxOpenings+1)
	}
	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	c := open(t, crashed, durable.Options{Logger: quiet()})
	defer c.Close()
	got, err := c.Get(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Openings) != fmt.Sprint(want.Openings) {
		t.Fatalf("openings after the crash:\n%v\nwant\n%v", got.Openings, want.Openings)
	}
}
