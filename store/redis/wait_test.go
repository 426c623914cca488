package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// waitAsync starts s.Wait(after) and returns the channel of its result.
func waitAsync(ctx context.Context, s store.Store, token string, after uint64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx, token, after) }()
	return done
}

// mustWake fails unless done delivers want (errors.Is; nil for nil) within 5 s.
func mustWake(t *testing.T, what string, done <-chan error, want error) {
	t.Helper()
	select {
	case err := <-done:
		if (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("Wait woken by %s returned %v, want %v", what, err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Wait was not woken by %s within 5s", what)
	}
}

// mustStayBlocked fails if done delivers anything within d.
func mustStayBlocked(t *testing.T, what string, done <-chan error, d time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v after %s, want it still blocked", err, what)
	case <-time.After(d):
	}
}

// TestWaitAcrossStores: a Wait on one Store (one replica) is woken by
// writes made through another Store, for each reason the contract names,
// and not by a trim that leaves the floor at or below after+1.
func TestWaitAcrossStores(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	reader := open(t, srv, redis.Options{})
	writer := open(t, srv, redis.Options{})
	create(t, writer, "tok")
	if _, err := writer.Append(ctx, "tok", 1, msgs("a", "b", "c")); err != nil {
		t.Fatal(err)
	}

	done := waitAsync(ctx, reader, "tok", 3)
	mustStayBlocked(t, "nothing", done, 100*time.Millisecond)
	if _, err := writer.Append(ctx, "tok", 1, msgs("d")); err != nil {
		t.Fatal(err)
	}
	mustWake(t, "an append on another store", done, nil)

	// A trim to a floor at or below after+1 changes nothing a reader at
	// after cares about: the Wait stays blocked.
	done = waitAsync(ctx, reader, "tok", 4)
	time.Sleep(50 * time.Millisecond)
	if _, err := writer.Trim(ctx, "tok", 1, 3); err != nil {
		t.Fatal(err)
	}
	mustStayBlocked(t, "a trim to floor 3 (after 4)", done, 200*time.Millisecond)
	if _, err := writer.Trim(ctx, "tok", 1, 5); err != nil {
		t.Fatal(err)
	}
	mustStayBlocked(t, "a trim to floor 5 = after+1", done, 200*time.Millisecond)
	// A second reader at 4, then an append wakes both.
	behind := waitAsync(ctx, reader, "tok", 4)
	if _, err := writer.Append(ctx, "tok", 1, msgs("e", "f")); err != nil {
		t.Fatal(err)
	}
	mustWake(t, "an append", done, nil)
	mustWake(t, "an append", behind, nil)
	done = waitAsync(ctx, reader, "tok", 6)
	time.Sleep(50 * time.Millisecond)
	if _, err := writer.Trim(ctx, "tok", 1, 100); err != nil { // floor 7 > after+1
		t.Fatal(err)
	}
	mustStayBlocked(t, "a trim to floor 7 = after+1", done, 200*time.Millisecond)
	b, _ := writer.Bounds(ctx, "tok")
	if b.Floor != 7 || b.HWM != 6 {
		t.Fatalf("bounds after trimming everything: %+v, want floor 7 HWM 6", b)
	}
	// A trim can raise the floor at most to HWM+1, so it never overtakes a
	// blocked reader; a reader that starts behind the floor (7 > 4+1)
	// returns at once.
	if err := reader.Wait(ctx, "tok", 4); err != nil {
		t.Fatalf("Wait behind the floor = %v, want nil at once", err)
	}

	if _, err := writer.Claim(ctx, "tok", "p2", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	mustWake(t, "a claim on another store", done, nil)

	done = waitAsync(ctx, reader, "tok", 6)
	time.Sleep(50 * time.Millisecond)
	if err := writer.End(ctx, "tok", store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	mustWake(t, "an end on another store", done, store.ErrEnded)

	if err := reader.Wait(ctx, "nope", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Wait(unknown) = %v, want ErrNotFound", err)
	}
}

// TestWaitCancel: cancelling a Wait's context releases it at once (CLIENT
// UNBLOCK), well before WaitBlock, and its connection serves the next Wait.
func TestWaitCancel(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{WaitBlock: time.Minute, MaxWaits: 1})
	create(t, s, "tok")
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		done := waitAsync(ctx, s, "tok", 0)
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: cancelled Wait = %v, want context.Canceled", i, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: cancelled Wait still blocked after 2s (WaitBlock is 1 min)", i)
		}
	}
	// A deadline works the same way.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Wait(ctx, "tok", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline = %v, want DeadlineExceeded", err)
	}
}

// TestWaitBeyondMaxWaits: with MaxWaits 1, a second concurrent Wait polls
// and is still woken by an append.
func TestWaitBeyondMaxWaits(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := open(t, srv, redis.Options{MaxWaits: 1, PollInterval: 20 * time.Millisecond})
	create(t, s, "tok")
	first := waitAsync(ctx, s, "tok", 0)
	second := waitAsync(ctx, s, "tok", 0)
	mustStayBlocked(t, "nothing", first, 100*time.Millisecond)
	mustStayBlocked(t, "nothing", second, 0)
	if _, err := s.Append(ctx, "tok", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	mustWake(t, "an append", first, nil)
	mustWake(t, "an append", second, nil)
}

// TestWaitBlockExpires: a Wait whose blocking read times out (WaitBlock)
// re-reads and blocks again, and is still woken afterwards.
func TestWaitBlockExpires(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := open(t, srv, redis.Options{WaitBlock: 50 * time.Millisecond})
	create(t, s, "tok")
	done := waitAsync(ctx, s, "tok", 0)
	mustStayBlocked(t, "several WaitBlock periods", done, 300*time.Millisecond)
	if _, err := s.Append(ctx, "tok", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	mustWake(t, "an append", done, nil)
}

// TestCloseReleasesWait: Close returns a blocked Wait with ErrUnavailable,
// and calls after Close fail with ErrUnavailable.
func TestCloseReleasesWait(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s, err := redis.New(ctx, redis.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, "tok")
	done := waitAsync(ctx, s, "tok", 0)
	time.Sleep(50 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	mustWake(t, "Close", done, store.ErrUnavailable)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s")
	}
	if _, err := s.Get(ctx, "tok"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get after Close = %v, want ErrUnavailable", err)
	}
	if _, err := s.Append(ctx, "tok", 1, msgs("x")); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Append after Close = %v, want ErrUnavailable", err)
	}
	if err := s.Wait(ctx, "tok", 0); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Wait after Close = %v, want ErrUnavailable", err)
	}
}

// TestWaitEndsWithSession: a Wait in any phase (snapshot, blocking read,
// re-read) when another store ends the session returns ErrEnded, never nil.
func TestWaitEndsWithSession(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	reader := open(t, srv, redis.Options{})
	writer := open(t, srv, redis.Options{})
	for i := range 100 {
		tok := fmt.Sprintf("tok%d", i)
		create(t, writer, tok)
		if _, err := writer.Append(ctx, tok, 1, msgs("a", "b")); err != nil {
			t.Fatal(err)
		}
		if _, err := writer.Claim(ctx, tok, "p2", 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
		done := waitAsync(ctx, reader, tok, 2)
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		if err := writer.End(ctx, tok, store.EndDeleted, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		mustWake(t, fmt.Sprintf("End of %s after %d ms", tok, i%5), done, store.ErrEnded)
	}
}

// TestWaitForOwnAppendAsksRedisNothing: a Wait for events that this
// process appended and Redis has not acknowledged yet (the primary is
// paused with SIGSTOP) waits for the committer's round trip, and returns
// nil once Redis stored them, having sent Redis no transaction and no
// XREAD: a live reader that catches up with its own process's appends
// costs no round trip but its next Read. A Wait for another process's
// appends still blocks on Redis (TestWaitAcrossStores).
func TestWaitForOwnAppendAsksRedisNothing(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{})
	create(t, s, "tok")
	appendStored(t, s, "tok", "a", "b")
	execs, xreads := cmdCalls(t, srv, "exec"), cmdCalls(t, srv, "xread")
	srv.Pause()
	b, err := s.Append(ctx, "tok", 1, msgs("c"))
	if err != nil || b.HWM != 3 {
		srv.Resume()
		t.Fatalf("Append = %+v, %v; want HWM 3", b, err)
	}
	done := waitAsync(ctx, s, "tok", 2)
	mustStayBlocked(t, "an append Redis has not stored", done, 200*time.Millisecond)
	srv.Resume()
	mustWake(t, "the round trip that stored the append", done, nil)
	if got := cmdCalls(t, srv, "exec") - execs; got != 0 {
		t.Errorf("Wait for its own append ran %d transactions (EXEC), want 0", got)
	}
	if got := cmdCalls(t, srv, "xread") - xreads; got != 0 {
		t.Errorf("Wait for its own append ran %d XREADs, want 0", got)
	}
	evs, b, err := s.Read(ctx, "tok", 2, 10)
	if err != nil || len(evs) != 1 || string(evs[0].Data) != "c" || b.HWM != 3 {
		t.Fatalf("Read after the Wait = %d events, %+v, %v; want event 3 \"c\", HWM 3", len(evs), b, err)
	}
}

// TestLiveReaderReadsOnce: a live eventlog.Reader whose next event is an
// append of its own process not sent to Redis yet (it lingers,
// store.Event.Linger, for 300 ms) waits for it before it reads
// (Store.Queued), and gets it with one transaction (the Read that returns
// it) and no XREAD; a Reader that read first read nothing, then read
// again (two).
func TestLiveReaderReadsOnce(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{Linger: 300 * time.Millisecond})
	create(t, s, "tok")
	appendStored(t, s, "tok", "a", "b")
	r := eventlog.New(s, eventlog.Options{Budget: -1}).NewReader("tok", 1, 1, 2)
	execs, xreads := cmdCalls(t, srv, "exec"), cmdCalls(t, srv, "xread")
	c := msgs("c")
	c[0].Linger = true
	if _, err := s.Append(ctx, "tok", 1, c); err != nil {
		t.Fatal(err)
	}
	if !s.Queued("tok", 2) || s.Queued("tok", 3) {
		t.Fatalf("Queued(2), Queued(3) = %v, %v; want true, false", s.Queued("tok", 2), s.Queued("tok", 3))
	}
	evs, err := r.Next(ctx)
	if err != nil || len(evs) != 1 || evs[0].Seq != 3 || string(evs[0].Data) != "c" {
		t.Fatalf("Next = %d events, %v; want event 3 \"c\"", len(evs), err)
	}
	if got := cmdCalls(t, srv, "exec") - execs; got != 1 {
		t.Errorf("the live read ran %d transactions (EXEC), want 1", got)
	}
	if got := cmdCalls(t, srv, "xread") - xreads; got != 0 {
		t.Errorf("the live read ran %d XREADs, want 0", got)
	}
}

// appendStored appends one message per data to token's generation 1 and
// waits until each is stored: the first append is stored before it
// returns, the second loads the pipelined append script (NOSCRIPT), so
// that a test counting Redis commands after it counts only its own.
func appendStored(t *testing.T, s *redis.Store, token string, datas ...string) {
	t.Helper()
	for _, d := range datas {
		if _, err := s.Append(context.Background(), token, 1, msgs(d)); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(context.Background(), token); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadEndsWithItsContext: a Read, and a Wait that must ask Redis,
// return ctx's error within 500 ms of its cancellation while Redis is
// stopped (SIGSTOP), instead of when Redis answers or the 3 s timeout
// passes: the stream of a generation lost during the stop then ends once
// the transport cancels its reader (the newcomer's attack of 2026-12-02:
// streams stayed open, with no keep-alive, until Redis came back).
func TestReadEndsWithItsContext(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{Timeout: 3 * time.Second})
	create(t, s, "tok")
	appendStored(t, s, "tok", "a")
	for _, op := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Read", func(ctx context.Context) error { _, _, err := s.Read(ctx, "tok", 0, 10); return err }},
		{"Wait", func(ctx context.Context) error { return s.Wait(ctx, "tok", 1) }},
	} {
		t.Run(op.name, func(t *testing.T) {
			srv.Pause()
			defer srv.Resume()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- op.call(ctx) }()
			time.Sleep(100 * time.Millisecond)
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("%s returned %v after its context was cancelled, want context.Canceled", op.name, err)
				}
			case <-time.After(500 * time.Millisecond):
				t.Fatalf("%s still blocked 500 ms after its context was cancelled, Redis stopped", op.name)
			}
		})
	}
}
