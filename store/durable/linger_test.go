package durable_test

// This file tests the committer's hold on lingering events
// (store.Event.Linger): a POST stream's opening event is stored in one
// fsync with the event that follows it, not in one of its own.

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
)

// opening is a POST stream's opening event, which lingers.
func opening(at time.Time) []store.Event {
	return []store.Event{{Stream: store.NewStream, Kind: store.KindPriming, Data: []byte(`[2]`), Time: at, Linger: true}}
}

// TestLingerSharesTheNextCommit: an opening event waits, invisible, for
// the session's next append, and both are stored by one group commit (one
// fsync), so a reader of the stream waits for one commit, not two.
func TestLingerSharesTheNextCommit(t *testing.T) {
	s := open(t, t.TempDir(), durable.Options{Linger: time.Hour, Logger: quiet()})
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	if err := s.Create(ctx, rec("tok", "p", now)); err != nil {
		t.Fatal(err)
	}
	before := s.Groups()
	first := opening(now)
	if _, err := s.Append(ctx, "tok", 1, first); err != nil || first[0].Seq != 1 || first[0].Stream != 1 {
		t.Fatalf("Append of the opening event = %v, seq %d stream %d; want 1 and 1", err, first[0].Seq, first[0].Stream)
	}
	time.Sleep(50 * time.Millisecond)
	if b, err := s.Bounds(ctx, "tok"); err != nil || b.HWM != 0 || s.Groups() != before {
		t.Fatalf("50 ms after the opening event alone: HWM %d, %d group commits, %v; want 0 and none (held back)", b.HWM, s.Groups()-before, err)
	}
	answer := events(1, now)
	if _, err := s.Append(ctx, "tok", 1, answer); err != nil || answer[0].Seq != 2 {
		t.Fatalf("Append of the answer = %v, seq %d; want 2", err, answer[0].Seq)
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	got, b, err := s.Read(ctx, "tok", 0, 10)
	if err != nil || len(got) != 2 || got[0].Seq != 1 || got[0].Kind != store.KindPriming || got[1].Seq != 2 || b.HWM != 2 {
		t.Fatalf("Read = %v, HWM %d, %v; want the opening event and the answer, HWM 2", got, b.HWM, err)
	}
	if n := s.Groups() - before; n != 1 {
		t.Fatalf("%d group commits stored the opening event and its answer, want 1", n)
	}
	if got[0].Linger {
		t.Fatal("Read reports Linger: it is not stored")
	}
}

// TestLingerEndsAtItsBound: an opening event with nothing after it is
// stored once Options.Linger has passed, and a Sync waits for it.
func TestLingerEndsAtItsBound(t *testing.T) {
	const linger = 40 * time.Millisecond
	s := open(t, t.TempDir(), durable.Options{Linger: linger, Logger: quiet()})
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	if err := s.Create(ctx, rec("tok", "p", now)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := s.Append(ctx, "tok", 1, opening(now)); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < linger {
		t.Fatalf("the opening event alone was stored after %v, want at least the linger, %v", waited, linger)
	}
	if b, err := s.Bounds(ctx, "tok"); err != nil || b.HWM != 1 {
		t.Fatalf("after Sync: HWM %d, %v; want 1", b.HWM, err)
	}
}

// TestLingerHeldAtClose: an opening event held back when the store closes
// is stored, and is there when the directory is opened again.
func TestLingerHeldAtClose(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, durable.Options{Linger: time.Hour, Logger: quiet()})
	ctx := context.Background()
	now := time.Now()
	if err := s.Create(ctx, rec("tok", "p", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "tok", 1, opening(now)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, durable.Options{Logger: quiet()})
	defer s.Close()
	if got, b, err := s.Read(ctx, "tok", 0, 10); err != nil || len(got) != 1 || got[0].Seq != 1 || b.HWM != 1 {
		t.Fatalf("after reopening: %v, HWM %d, %v; want the opening event", got, b.HWM, err)
	}
}
