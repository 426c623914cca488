package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func setup(t *testing.T, opts eventlog.Options, tokens ...string) (*memory.Store, *eventlog.Log, *testenv.Clock) {
	t.Helper()
	clk := testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	opts.Now = clk.Now
	st := memory.New(memory.Options{})
	for _, tok := range tokens {
		if err := st.Create(context.Background(), store.Record{Token: tok, Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return st, eventlog.New(st, opts), clk
}

func msg(stream uint64, data string) store.Event {
	return store.Event{Stream: stream, Kind: store.KindMessage, Data: []byte(data)}
}

func datas(evs []store.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("%d:%s", e.Seq, e.Data)
	}
	return out
}

func TestReaderReplaysThenTails(t *testing.T) {
	ctx := context.Background()
	_, log, _ := setup(t, eventlog.Options{}, "s")
	for _, e := range []store.Event{msg(1, "a"), msg(2, "x"), msg(1, "b"), msg(2, "y")} {
		if err := log.Append(ctx, "s", 1, e); err != nil {
			t.Fatal(err)
		}
	}
	rd := log.NewReader("s", 1, 1, 0)
	got, err := rd.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(datas(got)) != "[1:a 3:b]" {
		t.Fatalf("replay of stream 1 = %v, want [1:a 3:b]", datas(got))
	}
	if rd.Position() != 4 {
		t.Fatalf("position after scanning = %d, want 4", rd.Position())
	}
	// Live: the next Next blocks until an event of stream 1 arrives; events
	// of other streams only move the position.
	done := make(chan []string, 1)
	go func() {
		evs, err := rd.Next(ctx)
		if err != nil {
			done <- []string{err.Error()}
			return
		}
		done <- datas(evs)
	}()
	time.Sleep(20 * time.Millisecond)
	log.Append(ctx, "s", 1, msg(2, "z"))
	select {
	case got := <-done:
		t.Fatalf("Next returned %v for another stream's event", got)
	case <-time.After(30 * time.Millisecond):
	}
	log.Append(ctx, "s", 1, msg(1, "c"))
	select {
	case got := <-done:
		if fmt.Sprint(got) != "[6:c]" {
			t.Fatalf("live event = %v, want [6:c]", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return the live event")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := rd.Next(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a cancelled context = %v", err)
	}
}

func TestRetentionByEvents(t *testing.T) {
	ctx := context.Background()
	st, log, _ := setup(t, eventlog.Options{MaxEvents: 3}, "s")
	for i := range 5 {
		log.Append(ctx, "s", 1, msg(1, fmt.Sprint(i)))
	}
	b, _ := st.Bounds(ctx, "s")
	if b.Floor != 3 || b.HWM != 5 || b.Events != 3 {
		t.Fatalf("bounds = %+v, want floor 3, HWM 5, 3 events", b)
	}
}

func TestRetentionByBytes(t *testing.T) {
	ctx := context.Background()
	// Each event counts 64 + 36 = 100 bytes; 250 bytes keep two.
	st, log, _ := setup(t, eventlog.Options{MaxBytes: 250}, "s")
	for range 4 {
		log.Append(ctx, "s", 1, msg(1, "012345678901234567890123456789012345"))
	}
	b, _ := st.Bounds(ctx, "s")
	if b.Floor != 3 || b.Bytes != 200 {
		t.Fatalf("bounds = %+v, want floor 3 and 200 bytes", b)
	}
}

// TestRetentionKeepsTheNewestEvent: an event larger than MaxBytes is
// retained until the next one arrives, so the reader waiting for it gets
// it: a large response trimmed on arrival would leave its call
// unanswered.
func TestRetentionKeepsTheNewestEvent(t *testing.T) {
	ctx := context.Background()
	st, log, _ := setup(t, eventlog.Options{MaxBytes: 250}, "s")
	log.Append(ctx, "s", 1, msg(1, "small"))
	rd := log.NewReader("s", 1, 1, 1)
	big := strings.Repeat("x", 1000)
	if err := log.Append(ctx, "s", 1, msg(1, big)); err != nil {
		t.Fatal(err)
	}
	b, _ := st.Bounds(ctx, "s")
	if b.Floor != 2 || b.HWM != 2 || b.Events != 1 {
		t.Fatalf("bounds = %+v, want only the large event (floor 2, HWM 2)", b)
	}
	evs, err := rd.Next(ctx)
	if err != nil || len(evs) != 1 || string(evs[0].Data) != big {
		t.Fatalf("reader after the large event: %d events, %v; want the large event", len(evs), err)
	}
	log.Append(ctx, "s", 1, msg(1, "next"))
	if b, _ := st.Bounds(ctx, "s"); b.Floor != 3 || b.Events != 1 {
		t.Fatalf("bounds after the next event = %+v, want the large event trimmed (floor 3)", b)
	}
}

// TestBudgetKeepsTheNewestEvent: a process budget smaller than one event
// trims every session down to its newest event and no further.
func TestBudgetKeepsTheNewestEvent(t *testing.T) {
	ctx := context.Background()
	st, log, _ := setup(t, eventlog.Options{Budget: 50}, "a", "b")
	for range 3 {
		log.Append(ctx, "a", 1, msg(1, "012345678901234567890123456789012345"))
		log.Append(ctx, "b", 1, msg(1, "012345678901234567890123456789012345"))
	}
	for _, tok := range []string{"a", "b"} {
		b, _ := st.Bounds(ctx, tok)
		if b.Events != 1 || b.Floor != 3 {
			t.Fatalf("session %s = %+v, want only its newest event (floor 3)", tok, b)
		}
	}
	if log.Usage() != 200 {
		t.Fatalf("Usage = %d, want 200", log.Usage())
	}
}

func TestRetentionByAge(t *testing.T) {
	ctx := context.Background()
	st, log, clk := setup(t, eventlog.Options{MaxAge: time.Minute}, "s", "quiet")
	log.Append(ctx, "s", 1, msg(1, "old"))
	log.Append(ctx, "quiet", 1, msg(1, "old"))
	clk.Advance(45 * time.Second)
	log.Append(ctx, "s", 1, msg(1, "mid"))
	clk.Advance(30 * time.Second) // "old" is 75 s old, "mid" 30 s
	log.Append(ctx, "s", 1, msg(1, "new"))
	got, b, _ := st.Read(ctx, "s", 0, 10)
	if fmt.Sprint(datas(got)) != "[2:mid 3:new]" || b.Floor != 2 {
		t.Fatalf("after aging: %v floor %d, want [2:mid 3:new] floor 2", datas(got), b.Floor)
	}
	// A session with no new appends is aged by Sweep, but never below its
	// newest event, here its only one (75 s old).
	log.Sweep(ctx)
	if got, b, _ := st.Read(ctx, "quiet", 0, 10); fmt.Sprint(datas(got)) != "[1:old]" || b.Floor != 1 || b.HWM != 1 {
		t.Fatalf("quiet session after Sweep = %v %+v, want [1:old] floor 1 HWM 1", datas(got), b)
	}
}

// TestAgeKeepsTheNewestEvent: age never removes a session's newest event, so
// a client that has seen everything can still cite it. The input:
// --retention-age 2s, a countdown whose priming event is the newest, a
// resume 3 s later with that cursor, which must answer 200 (floor 3 =
// cursor = HWM), not 409 cursor_compacted: nothing was missed.
func TestAgeKeepsTheNewestEvent(t *testing.T) {
	ctx := context.Background()
	st, log, clk := setup(t, eventlog.Options{MaxAge: 2 * time.Second}, "s")
	for _, d := range []string{"init", "initialized", "priming"} {
		log.Append(ctx, "s", 1, msg(1, d))
	}
	clk.Advance(3 * time.Second)
	log.Sweep(ctx)
	got, b, _ := st.Read(ctx, "s", 0, 10)
	if fmt.Sprint(datas(got)) != "[3:priming]" || b.Floor != 3 || b.HWM != 3 {
		// floor ≤ 3 ≤ HWM: the replay decision accepts the cursor (200).
		t.Fatalf("after Sweep: %v %+v, want [3:priming] floor 3 HWM 3", datas(got), b)
	}
	// An append later ages the old event out on arrival; the new one stays.
	clk.Advance(10 * time.Second)
	log.Append(ctx, "s", 1, msg(1, "progress"))
	got, b, _ = st.Read(ctx, "s", 0, 10)
	if fmt.Sprint(datas(got)) != "[4:progress]" || b.Floor != 4 {
		t.Fatalf("after a new append: %v %+v, want [4:progress] floor 4", datas(got), b)
	}
}

func TestBudgetTrimsTheOldestSession(t *testing.T) {
	ctx := context.Background()
	// 100 bytes per event; budget 1000 bytes.
	st, log, clk := setup(t, eventlog.Options{Budget: 1000}, "old", "new")
	for range 6 {
		log.Append(ctx, "old", 1, msg(1, "012345678901234567890123456789012345"))
	}
	clk.Advance(time.Second)
	for range 5 {
		log.Append(ctx, "new", 1, msg(1, "012345678901234567890123456789012345"))
	}
	bo, _ := st.Bounds(ctx, "old")
	bn, _ := st.Bounds(ctx, "new")
	if bn.Events != 5 {
		t.Fatalf("the newer session lost events: %+v", bn)
	}
	// 1,100 bytes against 1,000 - 62: its two oldest events go.
	if bo.Events != 4 || bo.Floor != 3 {
		t.Fatalf("the older session = %+v, want its 2 oldest events trimmed (floor 3)", bo)
	}
	if log.Usage() != 900 {
		t.Fatalf("Usage = %d, want 900", log.Usage())
	}
}

func TestReaderDetectsCompaction(t *testing.T) {
	ctx := context.Background()
	st, log, _ := setup(t, eventlog.Options{}, "s")
	for range 5 {
		log.Append(ctx, "s", 1, msg(1, "e"))
	}
	rd := log.NewReader("s", 1, 1, 1)
	if _, err := st.Trim(ctx, "s", 1, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Next(ctx); !errors.Is(err, eventlog.ErrCompacted) {
		t.Fatalf("Next after its events were trimmed = %v, want ErrCompacted", err)
	}
	// A reader exactly at the floor's predecessor has lost nothing.
	rd = log.NewReader("s", 1, 1, 3)
	if evs, err := rd.Next(ctx); err != nil || len(evs) != 2 {
		t.Fatalf("Next at floor-1 = %d events, %v; want 2", len(evs), err)
	}
}

func TestReaderEndsWithTheGeneration(t *testing.T) {
	ctx := context.Background()
	st, log, _ := setup(t, eventlog.Options{}, "s")
	log.Append(ctx, "s", 1, msg(1, "a"))
	rd := log.NewReader("s", 1, 1, 1)
	errc := make(chan error, 1)
	go func() { _, err := rd.Next(ctx); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	if _, err := st.Claim(ctx, "s", "p2", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, eventlog.ErrGenerationChanged) {
			t.Fatalf("Next across a re-creation = %v, want ErrGenerationChanged", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not notice the new generation")
	}
	// A stale writer is fenced and nothing is stored.
	err := log.Append(ctx, "s", 1, msg(1, "late"))
	var fe *store.FencedError
	if !errors.As(err, &fe) || fe.Have != 1 || fe.Want != 2 {
		t.Fatalf("Append with generation 1 after the claim = %v, want FencedError 1 < 2", err)
	}
	if b, _ := st.Bounds(ctx, "s"); b.HWM != 1 {
		t.Fatalf("HWM after a fenced append = %d, want 1", b.HWM)
	}
	// The end of the session ends readers.
	rd = log.NewReader("s", 2, 1, 1)
	go func() { _, err := rd.Next(ctx); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	st.End(ctx, "s", store.EndDeleted, time.Now().Add(time.Hour))
	select {
	case err := <-errc:
		if !errors.Is(err, store.ErrEnded) {
			t.Fatalf("Next after End = %v, want ErrEnded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not notice the end of the session")
	}
}

func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	st.Create(ctx, store.Record{Token: "s", Generation: 1})
	log := eventlog.New(st, eventlog.Options{MaxEvents: 100000})
	data := []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"total":100}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := log.Append(ctx, "s", 1, store.Event{Stream: 1, Kind: store.KindMessage, Data: data}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadAfter measures replaying 10,000 events of one stream after a
// cursor, the read side of a resume.
func BenchmarkReadAfter(b *testing.B) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	st.Create(ctx, store.Record{Token: "s", Generation: 1})
	log := eventlog.New(st, eventlog.Options{MaxEvents: 20000})
	data := []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"total":100}}`)
	for i := range 10001 {
		log.Append(ctx, "s", 1, store.Event{Stream: uint64(1 + i%2), Kind: store.KindMessage, Data: data})
	}
	b.ReportAllocs()
	for b.Loop() {
		rd := log.NewReader("s", 1, 1, 1)
		n := 0
		for n < 5000 {
			evs, err := rd.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += len(evs)
		}
	}
}

// TestUsageUnderConcurrency appends to several sessions from several
// goroutines while their accounting is forgotten at random moments; once
// every session has been appended to again, Usage is exactly the sum of
// what the sessions retain. (An append accounted after a concurrent Forget
// must not add its bytes to the total under an entry that is gone.)
func TestUsageUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	tokens := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"}
	st, log, _ := setup(t, eventlog.Options{MaxEvents: 50}, tokens...)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				tok := tokens[(g+i)%len(tokens)]
				if i%7 == 0 {
					log.Forget(tok)
					continue
				}
				if err := log.Append(ctx, tok, 1, msg(1, "0123456789")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var want int64
	for _, tok := range tokens {
		if err := log.Append(ctx, tok, 1, msg(1, "0123456789")); err != nil {
			t.Fatal(err)
		}
		b, _ := st.Bounds(ctx, tok)
		want += b.Bytes
	}
	if got := log.Usage(); got != want {
		t.Fatalf("Usage = %d, want %d (the sum of the sessions' retained bytes)", got, want)
	}
}

// flakyReads is a store whose Read fails with store.ErrUnavailable while
// fail is above zero (each failure counts one down; -1: for ever), as a
// Redis client does until it has read a failover's new topology.
type flakyReads struct {
	store.Log
	mu    sync.Mutex
	fail  int
	reads int
}

func (f *flakyReads) Read(ctx context.Context, token string, after uint64, max int) ([]store.Event, store.Bounds, error) {
	f.mu.Lock()
	f.reads++
	failing := f.fail != 0
	if f.fail > 0 {
		f.fail--
	}
	f.mu.Unlock()
	if failing {
		return nil, store.Bounds{}, fmt.Errorf("flaky: %w: MOVED 9679 127.0.0.1:7001", store.ErrUnavailable)
	}
	return f.Log.Read(ctx, token, after, max)
}

// TestReaderRetriesUnavailable: a read that fails with ErrUnavailable is
// tried again, so the Reader returns the events once the store answers
// (three failures, then the events, at the same position); a store that
// keeps failing ends the Reader with its error after five reads, with
// pauses of 50, 100, 200 and 400 ms between them; a lost generation
// (ErrLost) ends it at once.
func TestReaderRetriesUnavailable(t *testing.T) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	if err := st.Create(ctx, store.Record{Token: "s", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	f := &flakyReads{Log: st, fail: 3}
	log := eventlog.New(f, eventlog.Options{})
	for _, d := range []string{"a", "b"} {
		if err := log.Append(ctx, "s", 1, msg(1, d)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := log.NewReader("s", 1, 1, 0).Next(ctx)
	if err != nil || fmt.Sprint(datas(evs)) != "[1:a 2:b]" || f.reads != 4 {
		t.Fatalf("Next over three failed reads = %v, %v after %d reads; want [1:a 2:b] after 4", datas(evs), err, f.reads)
	}

	f.fail, f.reads = -1, 0
	start := time.Now()
	_, err = log.NewReader("s", 1, 1, 0).Next(ctx)
	if took := time.Since(start); !errors.Is(err, store.ErrUnavailable) || f.reads != 5 || took < 750*time.Millisecond || took > 5*time.Second {
		t.Fatalf("Next on a store that keeps failing = %v after %d reads, %v; want ErrUnavailable after 5 reads, 750 ms of pauses", err, f.reads, took)
	}

	lost := &store.LostError{Token: "s", Generation: 1, Seq: 3, Err: store.ErrUnavailable}
	log = eventlog.New(lostReads{st, lost}, eventlog.Options{})
	start = time.Now()
	if _, err := log.NewReader("s", 1, 1, 0).Next(ctx); !errors.Is(err, store.ErrLost) || time.Since(start) > 40*time.Millisecond {
		t.Fatalf("Next on a lost generation = %v after %v; want ErrLost at once", err, time.Since(start))
	}
}

// lostReads is a store whose every Read fails with err.
type lostReads struct {
	store.Log
	err error
}

func (l lostReads) Read(context.Context, string, uint64, int) ([]store.Event, store.Bounds, error) {
	return nil, store.Bounds{}, l.err
}
