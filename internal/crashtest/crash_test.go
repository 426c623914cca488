package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
)

const (
	iterations = 50
	sessions   = 8
)

// received is what one client got on one stream: each event's cursor and
// data, in order.
type received struct {
	mu     sync.Mutex
	events []mcptest.Event
}

// TestCrashConsistency runs `tidemark serve --data-dir` 50 times on one
// directory, killing it with SIGKILL during a progress flood on several
// sessions. Each time 8 sessions (the same 8 tokens throughout) run an
// endless countdown with no delay, so every session appends as fast as
// group commit allows; at a random moment (5 to 300 ms into the appends)
// the server gets SIGKILL. The directory is then opened with the durable
// store and every session must have: the generation of this run, a log
// that is gap-free from the replay floor to the high-water mark with every
// event intact (decodable, of this generation), and every cursor any client
// received at or below the stored high-water mark, naming the very event
// the client got; no event reached the client twice, and none of its
// stream was skipped between the first and the last it received. After
// each restart, the newest cursor of every session's previous run answers
// 409 generation_mismatch.
func TestCrashConsistency(t *testing.T) {
	bin := testenv.BuildTidemark(t)
	dir := filepath.Join(t.TempDir(), "data")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	var tokens []*mcptest.Session
	var last []string // per session, the newest cursor its client received in the previous run
	totalCursors := 0
	start := time.Now()
	var slowest time.Duration // the longest run, restart to check

	for iter := range iterations {
		began := time.Now()
		p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--log-level", "INFO")
		url := testenv.ServeURL(t, p)
		hc := &http.Client{Transport: &http.Transport{}}
		client := &mcptest.Client{URL: url, HTTP: hc}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if iter == 0 {
			for range sessions {
				s, err := client.Initialize(ctx, "")
				if err != nil {
					t.Fatal(err)
				}
				tokens = append(tokens, s)
			}
		} else {
			resumeOld(ctx, t, iter, client, tokens, last)
		}
		recv := make([]*received, sessions)
		var wg sync.WaitGroup
		started := make(chan struct{}, sessions)
		for i, s := range tokens {
			s.Client = client
			recv[i] = &received{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := s.Call(ctx, mcptest.ToolCall(int64(100+iter), "countdown", map[string]any{"n": 1000000}, "cd"))
				started <- struct{}{}
				if err != nil {
					t.Errorf("iteration %d session %d: countdown: %v", iter, i, err)
					return
				}
				defer st.Close()
				for {
					ev, err := st.Next()
					if err != nil {
						return // the kill cuts the stream
					}
					recv[i].mu.Lock()
					recv[i].events = append(recv[i].events, ev)
					recv[i].mu.Unlock()
				}
			}()
		}
		for range sessions {
			<-started
		}
		time.Sleep(time.Duration(5+rng.IntN(296)) * time.Millisecond)
		p.Kill()
		<-p.Done()
		wg.Wait()
		cancel()
		hc.CloseIdleConnections()
		if t.Failed() {
			t.FailNow()
		}
		totalCursors += check(t, dir, iter, tokens, recv)
		slowest = max(slowest, time.Since(began))
		last = make([]string, sessions)
		for i, r := range recv {
			for _, ev := range r.events {
				if ev.HasID && ev.ID != "" {
					last[i] = ev.ID
				}
			}
		}
	}
	t.Logf("%d kill -9 runs, %d cursors checked against the stored logs, in %v (the slowest run %v)",
		iterations, totalCursors, time.Since(start).Round(time.Millisecond), slowest.Round(time.Millisecond))
}

// check opens the data directory and verifies every session after run iter;
// it returns how many received cursors it checked.
func check(t *testing.T, dir string, iter int, sessions []*mcptest.Session, recv []*received) int {
	t.Helper()
	st, err := durable.Open(dir, durable.Options{SweepInterval: -1, MinFreeBytes: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("iteration %d: reopen after kill -9: %v", iter, err)
	}
	defer st.Close()
	ctx := context.Background()
	checked := 0
	for i, s := range sessions {
		rec, err := st.Get(ctx, s.Token)
		if err != nil {
			t.Fatalf("iteration %d session %d: %v", iter, i, err)
		}
		want := uint64(iter + 1) // created at 1, re-created by each run's first POST
		if rec.Generation != want {
			t.Fatalf("iteration %d session %d: generation %d, want %d", iter, i, rec.Generation, want)
		}
		b, err := st.Bounds(ctx, s.Token)
		if err != nil {
			t.Fatal(err)
		}
		// The whole log, floor to HWM: gap-free, intact, of this generation.
		stored := map[uint64]store.Event{}
		var size int64
		next := b.Floor
		for next <= b.HWM {
			evs, _, err := st.Read(ctx, s.Token, next-1, 1000)
			if err != nil {
				t.Fatalf("iteration %d session %d: read after %d: %v", iter, i, next-1, err)
			}
			if len(evs) == 0 {
				t.Fatalf("iteration %d session %d: log ends at %d, HWM %d: a hole", iter, i, next-1, b.HWM)
			}
			for _, e := range evs {
				if e.Seq != next {
					t.Fatalf("iteration %d session %d: event %d follows %d: a hole", iter, i, e.Seq, next-1)
				}
				if e.Generation != rec.Generation {
					t.Fatalf("iteration %d session %d: event %d of generation %d in generation %d", iter, i, e.Seq, e.Generation, rec.Generation)
				}
				switch {
				case e.Kind == store.KindMessage:
					if _, err := jsonrpc.DecodeMessage(e.Data); err != nil {
						t.Fatalf("iteration %d session %d: event %d is torn: %q: %v", iter, i, e.Seq, e.Data, err)
					}
				case e.Kind == store.KindPriming && e.Stream == e.Seq:
					// A POST stream's opening event holds its calls' ids
					// (session.RequestIDs), which no connection sends.
					var ids session.RequestIDs
					if err := json.Unmarshal(e.Data, &ids); err != nil {
						t.Fatalf("iteration %d session %d: opening event %d is torn: %q: %v", iter, i, e.Seq, e.Data, err)
					}
				case len(e.Data) != 0:
					t.Fatalf("iteration %d session %d: %v event %d has data %q", iter, i, e.Kind, e.Seq, e.Data)
				}
				stored[e.Seq] = e
				size += e.Size()
				next++
			}
		}
		if b.Bytes != size || b.Events != len(stored) {
			t.Fatalf("iteration %d session %d: bounds say %d events of %d bytes, the log holds %d of %d", iter, i, b.Events, b.Bytes, len(stored), size)
		}
		// Every cursor the client received: at or below the durable HWM,
		// naming the event the client got.
		recv[i].mu.Lock()
		got := recv[i].events
		recv[i].mu.Unlock()
		checkOnce(t, iter, i, got, stored)
		for _, ev := range got {
			c, ok := cursorOf(t, iter, i, ev)
			if !ok {
				continue
			}
			if c.Generation != rec.Generation || c.Sequence > b.HWM {
				t.Fatalf("iteration %d session %d: client holds cursor %s (gen %d seq %d), stored gen %d HWM %d",
					iter, i, ev.ID, c.Generation, c.Sequence, rec.Generation, b.HWM)
			}
			if e, ok := stored[c.Sequence]; ok {
				if !bytes.Equal(wireData(e), ev.Data) || e.Stream != c.Stream {
					t.Fatalf("iteration %d session %d: cursor %s: client got %q on stream %d, the log holds %q on stream %d",
						iter, i, ev.ID, ev.Data, c.Stream, wireData(e), e.Stream)
				}
			}
			checked++
		}
	}
	return checked
}

// cursorOf returns the cursor of ev, which session i's client received
// in iteration iter, and false for an event without an id.
func cursorOf(t *testing.T, iter, i int, ev mcptest.Event) (replay.Cursor, bool) {
	t.Helper()
	if !ev.HasID || ev.ID == "" {
		return replay.Cursor{}, false
	}
	c, err := replay.Parse(ev.ID)
	if err != nil {
		t.Fatalf("iteration %d session %d: cursor %q: %v", iter, i, ev.ID, err)
	}
	return c, true
}

// wireData is the data a connection sends for e: its message, or nothing
// for a priming or close event.
func wireData(e store.Event) []byte {
	if e.Kind != store.KindMessage {
		return nil
	}
	return e.Data
}

// checkOnce fails unless the events a client received on one stream have
// strictly increasing sequences (none twice) and include every stored event
// of that stream between the first and the last received (none skipped).
func checkOnce(t *testing.T, iter, i int, got []mcptest.Event, stored map[uint64]store.Event) {
	t.Helper()
	seen := map[uint64]bool{}
	var first, prev, stream uint64
	for _, ev := range got {
		c, ok := cursorOf(t, iter, i, ev)
		if !ok {
			continue
		}
		if c.Sequence <= prev {
			t.Fatalf("iteration %d session %d: cursor %s after sequence %d: delivered twice or out of order", iter, i, ev.ID, prev)
		}
		if first == 0 {
			first, stream = c.Sequence, c.Stream
		}
		prev = c.Sequence
		seen[c.Sequence] = true
	}
	for seq := first; seq <= prev && first > 0; seq++ {
		if e, ok := stored[seq]; ok && e.Stream == stream && !seen[seq] {
			t.Fatalf("iteration %d session %d: stored event %d of stream %d was skipped (received %d to %d)", iter, i, seq, stream, first, prev)
		}
	}
}

// resumeOld resumes, after a restart, each session's newest cursor of the
// previous run: every one must answer 409 generation_mismatch.
func resumeOld(ctx context.Context, t *testing.T, iter int, client *mcptest.Client, tokens []*mcptest.Session, last []string) {
	t.Helper()
	for i, s := range tokens {
		if last[i] == "" {
			continue
		}
		s.Client = client
		st, err := s.Resume(ctx, last[i])
		var se *mcptest.StatusError
		if !errors.As(err, &se) || se.Status != http.StatusConflict || se.Reason() != string(replay.ReasonGenerationMismatch) {
			if st != nil {
				st.Close()
			}
			t.Fatalf("iteration %d session %d: resume of %s after the restart = %v, want 409 generation_mismatch", iter, i, last[i], err)
		}
	}
}
