package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
)

// listenStandalone opens s's standalone GET stream, waits for its priming event,
// and reads it on until it ends: the returned channel receives the error
// that ended it. The stream is closed at the end of the test.
func listenStandalone(t *testing.T, ctx context.Context, s *mcptest.Session) <-chan error {
	t.Helper()
	get, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { get.Close() })
	firstCursor(t, get)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := get.Next(); err != nil {
				ended <- err
				return
			}
		}
	}()
	return ended
}

// callEcho calls the demo server's echo tool on s with id: nil when the
// stream ends with its answer, the *mcptest.StatusError of a refusal.
func callEcho(ctx context.Context, s *mcptest.Session, id int64) error {
	text := fmt.Sprintf("echo %d", id)
	st, err := s.Call(ctx, mcptest.ToolCall(id, "echo", map[string]any{"text": text}, nil))
	if err != nil {
		return err
	}
	defer st.Close()
	evs, err := st.Collect()
	if err != nil {
		return err
	}
	if len(evs) == 0 || !evs[len(evs)-1].IsResponseTo(mcptest.ID(id)) || !strings.Contains(string(evs[len(evs)-1].Data), text) {
		return fmt.Errorf("call %d: stream without its answer: %v", id, evs)
	}
	return nil
}

// answerOf names the answer an error of callEcho stands for: "200", or the
// HTTP status and reason of a refusal.
func answerOf(err error) string {
	if err == nil {
		return "200"
	}
	if se, ok := mcptest.AsStatusError(err); ok {
		return fmt.Sprintf("%d %s", se.Status, se.Reason())
	}
	return err.Error()
}

// untilRoom calls f until it does not fail with 503 capacity, for at
// most 10 s, and fails the test if it fails otherwise.
func untilRoom(t *testing.T, f func() error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := f()
		if err == nil {
			return
		}
		if answerOf(err) != "503 capacity" || time.Now().After(deadline) {
			t.Fatalf("%v, want it answered once the room is free", err)
		}
	}
}

// TestCapacityHibernatesNeverEndsBusy: with --max-sessions, a session that
// can hibernate (the demo server is restorable) is never ended to make
// room. Two sessions keep their standalone GET stream open from the start,
// so they are the least recently used ones throughout; 4 clients then
// call echo 6 times each, in turn on 3 sessions of their own, while 10
// sessions fit. Every call is answered 200, the open streams stay open,
// sessions hibernate and wake to make room, and none ends. The room
// always suffices: each client holds at most two sessions busy at once
// (its current one, and the previous one until its handler returns), so
// 2 + 2×4 - 1 are busy at most when a wake needs room among 10.
func TestCapacityHibernatesNeverEndsBusy(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	const listeners, clients, each, calls = 2, 4, 3, 6
	const maxSessions = listeners + 2*clients
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"memory", nil},
		{"durable", []string{"--data-dir", filepath.Join(t.TempDir(), "data")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--max-sessions", fmt.Sprint(maxSessions)}, tc.args...)
			p := testenv.StartProcess(t, bin, args...)
			c := &mcptest.Client{URL: testenv.ServeURL(t, p)}
			initialize := func() *mcptest.Session {
				t.Helper()
				s, err := c.Initialize(ctx, "")
				if err != nil {
					t.Fatalf("initialize with %d sessions under --max-sessions %d: %v", listeners+clients*each, maxSessions, err)
				}
				return s
			}
			var listening []*mcptest.Session
			var open []<-chan error
			for range listeners {
				s := initialize()
				listening = append(listening, s)
				open = append(open, listenStandalone(t, ctx, s))
			}
			own := make([][]*mcptest.Session, clients)
			for i := range own {
				for range each {
					own[i] = append(own[i], initialize())
				}
			}

			var mu sync.Mutex
			answers := map[string]int{}
			var wg sync.WaitGroup
			for i, mine := range own {
				wg.Go(func() {
					for n := range calls {
						id := int64(100*(i+1) + n)
						got := answerOf(callEcho(ctx, mine[n%each], id))
						mu.Lock()
						answers[got]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if answers["200"] != clients*calls || len(answers) != 1 {
				t.Errorf("answers %v, want 200 to all %d calls", answers, clients*calls)
			}
			for i, ended := range open {
				select {
				case err := <-ended:
					t.Errorf("listening session %d: its GET stream ended (%v), want it open", i, err)
				default:
				}
			}
			// Every session still answers, without a new initialize.
			id := int64(1000)
			for _, s := range append(listening, allSessions(own)...) {
				id++
				if err := callEcho(ctx, s, id); err != nil {
					t.Errorf("session %s after the calls: %v, want 200", store.Prefix(s.Token), err)
				}
			}
			out := p.Output()
			if n := strings.Count(out, `msg="session ended"`); n != 0 {
				t.Errorf("%d sessions ended, want none:\n%s", n, out)
			}
			if !strings.Contains(out, `msg="session woke"`) {
				t.Errorf("no session woke: the calls never needed room; log:\n%s", out)
			}
		})
	}
}

// TestCapacityRefusesWhenAllBusy: with --max-sessions 1 and the one
// session's standalone GET stream open, it can neither hibernate nor be
// ended: a new initialize is answered 503 capacity with Retry-After, the
// session keeps its stream and answers, and nothing ends. Once its stream
// closes, the next initialize hibernates it and it wakes on its next call.
func TestCapacityRefusesWhenAllBusy(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--max-sessions", "1")
	c := &mcptest.Client{URL: testenv.ServeURL(t, p)}
	a, err := c.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	getCtx, closeGet := context.WithCancel(ctx)
	ended := listenStandalone(t, getCtx, a)

	_, err = c.Initialize(ctx, "")
	se := wantRefusal(t, err, http.StatusServiceUnavailable, "capacity")
	if got := se.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	select {
	case err := <-ended:
		t.Fatalf("the session's GET stream ended (%v) when another asked for room, want it open", err)
	default:
	}
	if err := callEcho(ctx, a, 2); err != nil {
		t.Fatalf("the session after the refusal: %v, want 200", err)
	}

	closeGet()
	<-ended
	// The server sees a request end (the stream closed, the answer read)
	// just after the client does: until then it is busy, and a request
	// needing its room is refused as above.
	var b *mcptest.Session
	untilRoom(t, func() (err error) {
		b, err = c.Initialize(ctx, "")
		return err
	})
	p.WaitFor(t, `msg="session hibernated" session=`+store.Prefix(a.Token), 5*time.Second)
	untilRoom(t, func() error { return callEcho(ctx, a, 3) })
	p.WaitFor(t, `msg="session woke" session=`+store.Prefix(a.Token), 5*time.Second)
	untilRoom(t, func() error { return callEcho(ctx, b, 4) })
	if out := p.Output(); strings.Contains(out, `msg="session ended"`) {
		t.Errorf("a session ended, want none:\n%s", out)
	}
}

// allSessions returns the sessions of ss in order.
func allSessions(ss [][]*mcptest.Session) []*mcptest.Session {
	var out []*mcptest.Session
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}
