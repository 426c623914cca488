// fixture_test.go holds what the tests of package session share: a
// registry on a memory store with the demo server, the replicas of a fleet
// on one store, and helpers to send requests.

package session_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	st     *memory.Store
	log    *eventlog.Log
	reg    *session.Registry
	clk    *testenv.Clock
	server *mcp.Server
}

func newFixture(t *testing.T, opts session.Options) *fixture {
	t.Helper()
	f := &fixture{clk: testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), server: demo.NewServer()}
	f.st = memory.New(memory.Options{Now: f.clk.Now})
	f.log = eventlog.New(f.st, eventlog.Options{Now: f.clk.Now})
	opts.Now = f.clk.Now
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f.reg = session.New(f.st, f.log, gosdk.New(f.server), opts)
	t.Cleanup(func() { f.reg.Close() })
	return f
}

func request(t testing.TB, id any, method string, params any) *jsonrpc.Request {
	t.Helper()
	if n, ok := id.(int); ok {
		id = float64(n)
	}
	jid, err := jsonrpc.MakeID(id)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	return &jsonrpc.Request{ID: jid, Method: method, Params: raw}
}

// roundTrip delivers req on a new stream and collects the stream's messages
// until the stream ends.
func roundTrip(t testing.TB, f *fixture, l *session.Live, req *jsonrpc.Request) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := l.OpenStream(ctx, []*jsonrpc.Request{req}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	rd := l.Reader(s, s) // after the opening event
	if err := l.Deliver(ctx, req, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		evs, err := rd.Next(ctx)
		if err != nil {
			t.Fatalf("stream %d after %v: %v", s, out, err)
		}
		for _, e := range evs {
			out = append(out, string(e.Data))
			if e.End {
				return out
			}
		}
	}
}

func initialize(t testing.TB, f *fixture, l *session.Live) {
	t.Helper()
	out := roundTrip(t, f, l, request(t, 1, "initialize", map[string]any{
		"protocolVersion": "2025-11-25",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "test", "version": "1"},
	}))
	if len(out) != 1 || !strings.Contains(out[0], `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("initialize answered %v", out)
	}
	note := &jsonrpc.Request{Method: "notifications/initialized"}
	if err := l.Deliver(context.Background(), note, engine.Request{}); err != nil {
		t.Fatal(err)
	}
}

// flaky is a store whose appends fail with ErrUnavailable while failing
// is set, and whose Claim lets a competitor claim first once when race is
// set.
type flaky struct {
	store.Store
	failing atomic.Bool
	// down fails every read and lease renewal too: the store does not
	// answer at all.
	down atomic.Bool
	race atomic.Pointer[func(token string, from uint64)]
}

func (s *flaky) Get(ctx context.Context, token string) (store.Record, error) {
	if s.down.Load() {
		return store.Record{}, store.ErrUnavailable
	}
	return s.Store.Get(ctx, token)
}

func (s *flaky) Renew(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) error {
	if s.down.Load() {
		return store.ErrUnavailable
	}
	return s.Store.Renew(ctx, token, owner, gen, leaseUntil)
}

func (s *flaky) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	if s.failing.Load() || s.down.Load() {
		return store.Bounds{}, store.ErrUnavailable
	}
	return s.Store.Append(ctx, token, gen, evs)
}

func (s *flaky) Claim(ctx context.Context, token, owner string, from uint64, leaseUntil time.Time) (store.Record, error) {
	if f := s.race.Swap(nil); f != nil {
		(*f)(token, from)
	}
	return s.Store.Claim(ctx, token, owner, from, leaseUntil)
}

// replicas is several registries (replicas of a fleet) on one store, with
// one clock.
type replicas struct {
	st  *flaky
	clk *testenv.Clock
}

func newReplicas() *replicas {
	clk := testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	return &replicas{st: &flaky{Store: memory.New(memory.Options{Now: clk.Now})}, clk: clk}
}

// registry returns replica owner with the given lease, and its log.
func (rs *replicas) registry(t *testing.T, owner string, lease time.Duration) (*session.Registry, *testenv.LogBuffer) {
	t.Helper()
	logs := &testenv.LogBuffer{}
	reg := session.New(rs.st, eventlog.New(rs.st, eventlog.Options{Now: rs.clk.Now, Budget: -1}), gosdk.New(demo.NewServer()),
		session.Options{Owner: owner, Lease: lease, Now: rs.clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(func() { reg.Close() })
	return reg, logs
}

// mustCreate creates a session on reg, failing the test if it cannot.
func mustCreate(t *testing.T, reg *session.Registry) *session.Live {
	t.Helper()
	l, err := reg.Create(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func wantLog(t *testing.T, logs *testenv.LogBuffer, pattern string) {
	t.Helper()
	if !regexp.MustCompile(pattern).MatchString(logs.String()) {
		t.Fatalf("no log line matches %q; log:\n%s", pattern, logs)
	}
}
