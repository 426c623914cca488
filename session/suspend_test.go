package session_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// keeping is a lossy engine over the demo server whose sessions keep
// something outside the process (engine.Suspender), as a gateway's
// upstream session: it records the suspension each Start was given, and
// whether each session's Close came after Keep.
type keeping struct {
	*gosdk.Engine
	mu     sync.Mutex
	starts []json.RawMessage // State.Suspended of each Start
	closes []bool            // whether Keep preceded each Close
}

func (k *keeping) Hibernation() engine.Hibernation { return engine.HibernateLossy }

func (k *keeping) Start(ctx context.Context, info engine.Info, out engine.Outbox) (engine.Session, error) {
	var got json.RawMessage
	if info.State != nil {
		got = info.State.Suspended
	}
	k.mu.Lock()
	k.starts = append(k.starts, got)
	k.mu.Unlock()
	es, err := k.Engine.Start(ctx, info, out)
	if err != nil {
		return nil, err
	}
	return &kept{Session: es, k: k}, nil
}

type kept struct {
	engine.Session
	k    *keeping
	once sync.Once
	mu   sync.Mutex
	keep bool
}

func (s *kept) Suspension() json.RawMessage { return json.RawMessage(`{"upstreamSession":"up-1"}`) }

func (s *kept) Keep() {
	s.mu.Lock()
	s.keep = true
	s.mu.Unlock()
}

func (s *kept) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.k.mu.Lock()
		s.k.closes = append(s.k.closes, s.keep)
		s.k.mu.Unlock()
		s.mu.Unlock()
	})
	return s.Session.Close()
}

// TestHibernateKeepsSuspension: a session whose engine session keeps
// something outside the process hibernates with its Suspension in the
// record's State, and its Close follows Keep; the wake's engine session
// starts with it, the woken session's own state does not hold it, and a
// later generation of a held record (Recreate) starts without it: two
// generations never share what one kept.
func TestHibernateKeepsSuspension(t *testing.T) {
	ctx := context.Background()
	clk := testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := &fixture{clk: clk, server: demo.NewServer()}
	f.st = memory.New(memory.Options{Now: clk.Now})
	f.log = eventlog.New(f.st, eventlog.Options{Now: clk.Now})
	eng := &keeping{Engine: gosdk.New(f.server)}
	f.reg = session.New(f.st, f.log, eng, session.Options{HibernateAfter: time.Minute, IdleTTL: 1000 * time.Hour, Now: clk.Now, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { f.reg.Close() })

	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	roundTrip(t, f, l, echo(t, 2, "before"))
	// A call's end may be recorded after an advance of the clock: advance
	// it again until the sweep finds the session idle.
	waitFor(t, func() bool { clk.Advance(2 * time.Minute); f.reg.Sweep(ctx); return f.reg.Hibernated() == 1 })
	rec, err := f.st.Get(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	var saved struct {
		Suspended json.RawMessage `json:"suspended"`
	}
	if err := json.Unmarshal(rec.State, &saved); err != nil || string(saved.Suspended) != `{"upstreamSession":"up-1"}` || rec.Owner != "" {
		t.Fatalf("record after hibernation: owner %q, state %s; want no owner and suspended {\"upstreamSession\":\"up-1\"}", rec.Owner, rec.State)
	}
	waitFor(t, func() bool { eng.mu.Lock(); defer eng.mu.Unlock(); return len(eng.closes) == 1 })

	woken, err := f.reg.Get(ctx, l.Token(), "")
	if err != nil {
		t.Fatal(err)
	}
	if woken.Generation() != 2 || woken.State().Suspended != nil {
		t.Fatalf("woken at generation %d with state suspended %s; want generation 2 and none", woken.Generation(), woken.State().Suspended)
	}
	if _, err := f.reg.Recreate(ctx, l.Token()); err != nil {
		t.Fatal(err)
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	want := []string{"", `{"upstreamSession":"up-1"}`, ""}
	if len(eng.starts) != len(want) {
		t.Fatalf("%d engine starts, want %d", len(eng.starts), len(want))
	}
	for i, w := range want {
		if string(eng.starts[i]) != w {
			t.Errorf("engine start %d given suspended %q, want %q", i+1, eng.starts[i], w)
		}
	}
	if len(eng.closes) < 2 || !eng.closes[0] || eng.closes[1] {
		t.Errorf("closes after Keep: %v; want the hibernated generation's after Keep, the re-created one's not", eng.closes)
	}
}
