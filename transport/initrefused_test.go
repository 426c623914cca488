// initrefused_test.go tests an initialize answered with a refusal: after
// its session was created, the session never began, so nothing of it
// stays live in the process and its record ends (initialize_failed);
// when the store refuses the record itself, nothing of it stays at all.

package transport_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/transport"
)

// endings is a metrics.Sessions that counts sessions started, and
// sessions ended by reason.
type endings struct {
	metrics.Recorder
	mu      sync.Mutex
	started int
	ended   map[replay.Reason]int
}

func (e *endings) SessionStarted() {
	e.mu.Lock()
	e.started++
	e.mu.Unlock()
}

func (e *endings) SessionEnded(reason replay.Reason, _ time.Duration) {
	e.mu.Lock()
	if e.ended == nil {
		e.ended = map[replay.Reason]int{}
	}
	e.ended[reason]++
	e.mu.Unlock()
}

func (e *endings) counts() (int, map[replay.Reason]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := map[replay.Reason]int{}
	for k, v := range e.ended {
		m[k] = v
	}
	return e.started, m
}

// initStack is the demo server behind the transport on st, on a loopback
// listener, with the registry's log lines in logs and its sessions
// measured by rec; everything ends with the test.
type initStack struct {
	reg    *session.Registry
	client *mcptest.Client
	logs   *testenv.LogBuffer
	rec    *endings
}

func newInitStack(t *testing.T, st store.Store) *initStack {
	t.Helper()
	logs := &testenv.LogBuffer{}
	rec := &endings{Recorder: metrics.Discard}
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), gosdk.New(demo.NewServer()), session.Options{
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: rec,
	})
	h := transport.New(reg, transport.Options{Logger: slog.New(slog.DiscardHandler)})
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		h.Shutdown(context.Background())
		reg.Close()
	})
	return &initStack{reg: reg, client: &mcptest.Client{URL: hs.URL, HTTP: hs.Client()}, logs: logs, rec: rec}
}

// checkEndedInitialize checks what is left of the session created for
// an initialize that was refused: no live state (Registry.Len, which is
// also the leases held in fleet mode), one session created and none
// ended otherwise than initialize_failed (measured only when the store
// ended the record, measured), and its end logged with that reason.
func (s *initStack) checkEndedInitialize(t *testing.T, measured bool) {
	t.Helper()
	if n := s.reg.Len(); n != 0 {
		t.Errorf("registry holds %d live sessions after the refused initialize, want 0", n)
	}
	started, ended := s.rec.counts()
	want := map[replay.Reason]int{}
	if measured {
		want[replay.ReasonInitializeFailed] = 1
	}
	if started != 1 || len(ended) != len(want) || ended[replay.ReasonInitializeFailed] != want[replay.ReasonInitializeFailed] {
		t.Errorf("sessions started %d, ended %v; want 1 started, ended %v", started, ended, want)
	}
	logged := regexp.MustCompile(`msg="session ended" session=\S+ generation=1 reason=initialize_failed`)
	if got := len(logged.FindAllString(s.logs.String(), -1)); got != 1 {
		t.Errorf("%d log lines say the session ended with reason initialize_failed, want 1; log:\n%s", got, s.logs.String())
	}
}

// TestInitializeRefusedUnderRedisOOM: on a real redis-server out of
// memory under noeviction, initializes answer 503 unavailable with no
// Mcp-Session-Id, and nothing of them stays: Redis refuses each one's
// record whole, so no session starts, no live state or lease stays in
// the process, and Redis holds exactly the keys it held before
// (regression: the create script's first write was a DEL, which Redis
// runs past maxmemory and then lets the rest of the script write, so
// each refused initialize left its record, then, once ended
// initialize_failed, a tombstone and a wake stream).
func TestInitializeRefusedUnderRedisOOM(t *testing.T) {
	ctx := testContext(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	st, err := redis.New(ctx, redis.Options{URL: "redis://" + srv.Addr() + "/0"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := newInitStack(t, st)

	// Out of memory: maxmemory just above what Redis uses, then a value
	// that takes it past.
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`used_memory:(\d+)`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("no used_memory in INFO memory:\n%s", info)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", m[1]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, "filler").Err(); err != nil {
		t.Fatal(err)
	}
	// A SET under maxmemory may pass once while usage is below it; the
	// filler grows until Redis refuses it.
	for i := 0; ; i++ {
		err := rdb.Append(ctx, "filler", strings.Repeat("x", 4096)).Err()
		if err != nil && strings.HasPrefix(err.Error(), "OOM ") {
			break
		}
		if err != nil || i == 100 {
			t.Fatalf("filling Redis: %v after %d appends, want an OOM refusal", err, i)
		}
	}
	before, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}

	const n = 3
	for range n {
		_, err = s.client.Initialize(ctx, "2025-11-25")
		se := wantRefusal(t, err, http.StatusServiceUnavailable, "unavailable")
		if tok := se.Header.Get("Mcp-Session-Id"); tok != "" {
			t.Fatalf("the refused initialize names session %s", tok)
		}
	}
	after, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(before)
	slices.Sort(after)
	if !slices.Equal(after, before) {
		t.Errorf("Redis holds the keys %q after %d refused initializes, want those it held before, %q", after, n, before)
	}
	if n := s.reg.Len(); n != 0 {
		t.Errorf("registry holds %d live sessions after the refused initializes, want 0", n)
	}
	if started, ended := s.rec.counts(); started != 0 || len(ended) != 0 {
		t.Errorf("sessions started %d, ended %v; want none", started, ended)
	}
}

// downStore is a store that refuses every Append and End, with
// store.ErrUnavailable, once down is set: a store that goes away between
// a session's Create and the opening event of its initialize's stream.
type downStore struct {
	store.Store
	mu    sync.Mutex
	down  bool
	token string // the session created
}

func (d *downStore) Create(ctx context.Context, rec store.Record) error {
	err := d.Store.Create(ctx, rec)
	d.mu.Lock()
	d.down, d.token = true, rec.Token
	d.mu.Unlock()
	return err
}

func (d *downStore) isDown() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.down
}

func (d *downStore) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	if d.isDown() {
		return store.Bounds{}, store.ErrUnavailable
	}
	return d.Store.Append(ctx, token, gen, evs)
}

func (d *downStore) End(ctx context.Context, token string, reason store.EndReason, until time.Time) error {
	if d.isDown() {
		return store.ErrUnavailable
	}
	return d.Store.End(ctx, token, reason, until)
}

// TestInitializeRefusedStoreDown: when the store goes away right after
// an initialize's session is created, the initialize answers 503
// unavailable and the store cannot end the record either; the process
// still drops the session's live state (and with it the lease it would
// renew), and logs its end with reason initialize_failed. The record
// stays as it was created, for the store's own rules to end.
func TestInitializeRefusedStoreDown(t *testing.T) {
	ctx := testContext(t)
	mem := memory.New(memory.Options{})
	st := &downStore{Store: mem}
	s := newInitStack(t, st)

	_, err := s.client.Initialize(ctx, "2025-11-25")
	se := wantRefusal(t, err, http.StatusServiceUnavailable, "unavailable")
	if tok := se.Header.Get("Mcp-Session-Id"); tok != "" {
		t.Fatalf("the refused initialize names session %s", tok)
	}
	s.checkEndedInitialize(t, false)
	rec, err := mem.Get(ctx, st.token)
	if err != nil || rec.Generation != 1 {
		t.Errorf("store.Get of the refused initialize's session: generation %d, %v; want its record at generation 1, as created", rec.Generation, err)
	}
}
