package crashtest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
)

// acked is one call a client had answered: the id of its stream's priming
// event (the cursor a client holds when the stream is cut at once) and the
// answer's event.
type acked struct {
	priming string
	answer  mcptest.Event
}

// TestHibernateCrash runs `tidemark serve --data-dir --hibernate-after
// 100ms` 12 times on one directory and kills it with SIGKILL while its
// sessions hibernate and wake: 8 clients call echo with pauses of 0 to
// 250 ms, so sessions keep going to sleep (idle 100 ms, swept every 100
// ms) and waking, and the kill lands at a random moment (300 to 1,500 ms
// in). After each kill the durable store must hold every answer a client
// received, at its cursor, byte for byte, when the session is still at
// that generation, and a high-water mark at or above every cursor in any
// case. After the restart a session found hibernated (no owner) resumes
// its newest held cursor with 200 and exactly the answer after it, at the
// same generation; any other answers 409 generation_mismatch.
func TestHibernateCrash(t *testing.T) {
	const rounds, clients = 12, 8
	bin := testenv.BuildTidemark(t)
	dir := filepath.Join(t.TempDir(), "data")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	var tokens []*mcptest.Session
	last := make([]acked, clients) // per session, the newest call answered in any run
	var owners []string            // per session, the record's owner after the previous kill
	var gens []uint64
	resumed, refused, answers := 0, 0, 0
	for round := range rounds {
		p := testenv.StartProcess(t, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--hibernate-after", "100ms")
		hc := &http.Client{Transport: &http.Transport{}}
		client := &mcptest.Client{URL: testenv.ServeURL(t, p), HTTP: hc}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if round == 0 {
			for range clients {
				s, err := client.Initialize(ctx, "")
				if err != nil {
					t.Fatal(err)
				}
				tokens = append(tokens, s)
			}
		}
		for i, s := range tokens {
			s.Client = client
			if round == 0 || last[i].priming == "" {
				continue
			}
			if owners[i] == "" && last[i].answer.ID != "" && sameGeneration(t, last[i].priming, gens[i]) {
				checkResume(ctx, t, round, i, s, last[i])
				resumed++
			} else {
				_, err := s.Resume(ctx, last[i].priming)
				if se, ok := mcptest.AsStatusError(err); !ok || se.Status != http.StatusConflict || se.Reason() != string(replay.ReasonGenerationMismatch) {
					t.Fatalf("round %d session %d: resume of %s, owner %q at generation %d after the kill = %v, want 409 generation_mismatch",
						round, i, last[i].priming, owners[i], gens[i], err)
				}
				refused++
			}
		}
		got := make([][]acked, clients)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range tokens {
			pause := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
			wg.Go(func() {
				for c := 0; ; c++ {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(pause.IntN(251)) * time.Millisecond):
					}
					text := fmt.Sprintf("r%d-s%d-c%d", round, i, c)
					st, err := s.Call(ctx, mcptest.ToolCall(int64(1000*round+c+2), "echo", map[string]any{"text": text}, nil))
					if err != nil {
						return // the kill
					}
					evs, err := st.Collect()
					st.Close()
					if err != nil || len(evs) != 2 {
						return // cut by the kill
					}
					got[i] = append(got[i], acked{priming: evs[0].ID, answer: evs[1]})
				}
			})
		}
		time.Sleep(time.Duration(300+rng.IntN(1201)) * time.Millisecond)
		p.Kill()
		<-p.Done()
		close(stop)
		wg.Wait()
		cancel()
		hc.CloseIdleConnections()
		owners, gens = checkAcked(t, dir, round, tokens, got)
		for i := range got {
			if n := len(got[i]); n > 0 {
				last[i] = got[i][n-1]
				answers += n
			}
		}
	}
	if resumed == 0 {
		t.Fatalf("no kill found a session hibernated in %d rounds: the test checked no wake after a kill", rounds)
	}
	t.Logf("%d kill -9 runs, %d answers checked; after the kills %d sessions found hibernated resumed at the same generation, %d were refused 409",
		rounds, answers, resumed, refused)
}

// sameGeneration reports whether cursor belongs to generation gen.
func sameGeneration(t *testing.T, cursor string, gen uint64) bool {
	c, err := replay.Parse(cursor)
	if err != nil {
		t.Fatalf("cursor %q: %v", cursor, err)
	}
	return c.Generation == gen
}

// checkResume resumes a's priming cursor on s and wants 200: a priming
// event resuming from it, then a's answer exactly.
func checkResume(ctx context.Context, t *testing.T, round, i int, s *mcptest.Session, a acked) {
	st, err := s.Resume(ctx, a.priming)
	if err != nil {
		t.Fatalf("round %d session %d: resume of %s, hibernated at the kill: %v; want 200", round, i, a.priming, err)
	}
	evs, err := st.Collect()
	st.Close()
	if err != nil || len(evs) != 2 || !evs[0].ResumesFrom(a.priming) || evs[1].ID != a.answer.ID || string(evs[1].Data) != string(a.answer.Data) {
		t.Fatalf("round %d session %d: resumed %s: %v, %v; want its priming event and the answer %s: %s",
			round, i, a.priming, evs, err, a.answer.ID, a.answer.Data)
	}
}

// checkAcked opens the data directory after a kill and checks every
// answer the clients received against it; it returns each session's
// record owner and generation.
func checkAcked(t *testing.T, dir string, round int, tokens []*mcptest.Session, got [][]acked) ([]string, []uint64) {
	t.Helper()
	st, err := durable.Open(dir, durable.Options{SweepInterval: -1, MinFreeBytes: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("round %d: reopen after kill -9: %v", round, err)
	}
	defer st.Close()
	ctx := context.Background()
	owners := make([]string, len(tokens))
	gens := make([]uint64, len(tokens))
	for i, s := range tokens {
		rec, err := st.Get(ctx, s.Token)
		if err != nil {
			t.Fatalf("round %d session %d: %v", round, i, err)
		}
		owners[i], gens[i] = rec.Owner, rec.Generation
		b, err := st.Bounds(ctx, s.Token)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range got[i] {
			c, err := replay.Parse(a.answer.ID)
			if err != nil {
				t.Fatalf("round %d session %d: cursor %q: %v", round, i, a.answer.ID, err)
			}
			if c.Sequence > b.HWM || c.Generation > rec.Generation {
				t.Fatalf("round %d session %d: client holds %s (generation %d, sequence %d); the store is at generation %d, HWM %d: an acknowledged event is lost",
					round, i, a.answer.ID, c.Generation, c.Sequence, rec.Generation, b.HWM)
			}
			if c.Generation != rec.Generation {
				continue // an earlier generation's events are dropped by design
			}
			evs, _, err := st.Read(ctx, s.Token, c.Sequence-1, 1)
			if err != nil || len(evs) != 1 || evs[0].Seq != c.Sequence || evs[0].Kind != store.KindMessage || string(evs[0].Data) != string(a.answer.Data) {
				t.Fatalf("round %d session %d: cursor %s: the client got %s, the store holds %+v (%v)", round, i, a.answer.ID, a.answer.Data, evs, err)
			}
		}
	}
	return owners, gens
}
