// takeover_test.go tests takeovers while the connection serving a stream
// is stuck in a write: only the newest connection writes.

package transport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// TestTakeoverChainWhileOlderIsStuck: the connection serving a stream is
// stuck in a write (its client stopped reading; a half-open connection
// looks the same), and k resumes from the same cursor arrive one after
// another, each taking the stream over from the previous one while that one
// still waits for the stuck connection to stop. When the stuck connection
// is released, the newest resume alone serves the stream: the resumes taken
// over while waiting write nothing, and the stuck connection writes nothing
// after it was taken over, not even events that were already in the log
// (one reader per stream: no event is ever written to two connections;
// DESIGN.md, "Delivery rules"). Rounds with k = 1, 2, 3 and 4, twice each,
// all at once on their own servers, so that the takeovers run under load.
func TestTakeoverChainWhileOlderIsStuck(t *testing.T) {
	for k := 1; k <= 4; k++ {
		for round := 1; round <= 2; round++ {
			t.Run(fmt.Sprintf("resumes=%d/round=%d", k, round), func(t *testing.T) {
				t.Parallel()
				takeoverChain(t, k)
			})
		}
	}
}

func takeoverChain(t *testing.T, k int) {
	const (
		pad     = 32 << 10 // bytes of message per progress notification
		stuckAt = 12       // notifications released before the resumes: 384 KiB, more than the connection's buffers hold
		n       = stuckAt + 2
	)
	ctx := testContext(t)
	server := demo.NewServer()
	g := addGated(server)
	watch := &stallWatch{stalled: 500 * time.Millisecond, detected: make(chan struct{})}
	st := newStackOn(t, server, &tidemark.Options{Retention: eventlog.Options{MaxBytes: -1}}, watch.wrap, smallSendBuffer)
	s := st.initialize(t, ctx, "")

	// The original connection reads its priming event, then nothing: its
	// writes stall once the connection's buffers are full.
	orig, err := s.Call(ctx, mcptest.ToolCall(2, "gated", GatedArgs{Gate: "g", N: n, Pad: pad}, "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	cursor := next(t, orig).ID
	first := parseCursor(t, cursor).Sequence
	g.release("g", stuckAt)
	waitFor(t, ctx, "the first notifications in the log", func() bool { return st.bounds(t, s.Token).HWM == first+stuckAt })
	select {
	case <-watch.detected:
	case <-ctx.Done():
		t.Fatal("the original connection's writes never stalled")
	}

	// k resumes, each waiting behind the previous one.
	type result struct {
		evs []mcptest.Event
		err error
	}
	results := make([]chan result, k)
	for i := range k {
		results[i] = make(chan result, 1)
		go func() {
			rs, err := s.Resume(ctx, cursor)
			if err != nil {
				results[i] <- result{err: err}
				return
			}
			defer rs.Close()
			evs, err := rs.Collect()
			results[i] <- result{evs, err}
		}()
		waitFor(t, ctx, fmt.Sprintf("%d resumes waiting", i+1), func() bool { return st.h.TakeoverWaiters() == i+1 })
	}
	// Events appended after the takeovers (the last notifications and the
	// response): in the log before the stuck connection wakes up.
	g.release("g", n-stuckAt)
	waitFor(t, ctx, "the last events in the log", func() bool { return st.bounds(t, s.Token).HWM == first+n+1 })

	// Release the stuck connection: its client reads to the end.
	onOrig, err := orig.Collect()
	if err != nil {
		t.Fatalf("the original connection: %v", err)
	}
	for _, e := range onOrig {
		if e.IsResponseTo(mcptest.ID(2)) {
			t.Fatalf("the original connection delivered the response after it was taken over (it carried %d events)", len(onOrig))
		}
		if p := progressOf(t, e).Progress; p > stuckAt {
			t.Fatalf("the original connection delivered progress %v after it was taken over (it carried %d events)", p, len(onOrig))
		}
	}
	for i := range k - 1 {
		r := <-results[i]
		if r.err != nil || len(r.evs) != 0 {
			t.Fatalf("resume %d of %d, taken over while it waited: %v, events %v; want 200 and no event", i+1, k, r.err, ids(r.evs))
		}
	}
	last := <-results[k-1]
	if last.err != nil {
		t.Fatalf("the newest resume: %v", last.err)
	}
	if len(last.evs) != n+2 {
		t.Fatalf("the newest resume delivered %d events, want the priming event, %d notifications and the response", len(last.evs), n)
	}
	wantResumePriming(t, last.evs[0], cursor, time.Second)
	for i, e := range last.evs[1 : n+1] {
		if p := progressOf(t, e).Progress; p != float64(i+1) {
			t.Fatalf("the newest resume's event %d is progress %v, want %d", i+1, p, i+1)
		}
	}
}

// waitFor polls cond every millisecond until it holds, failing the test
// when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}
