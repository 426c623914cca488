// evict_test.go holds the tests of making room for a session at
// Options.MaxSessions.

package session_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// endCounter is a store that counts the End calls of each token, by reason.
type endCounter struct {
	store.Store
	mu   sync.Mutex
	ends map[string][]store.EndReason
}

func (s *endCounter) End(ctx context.Context, token string, reason store.EndReason, until time.Time) error {
	s.mu.Lock()
	s.ends[token] = append(s.ends[token], reason)
	s.mu.Unlock()
	return s.Store.End(ctx, token, reason, until)
}

// TestEvictionConcurrentCreators: creators that arrive together at a full
// registry each evict a session of their own, the least recently used
// ones, none twice, and the registry ends holding exactly MaxSessions.
func TestEvictionConcurrentCreators(t *testing.T) {
	const capacity, creators = 32, 32
	ctx := context.Background()
	st := &endCounter{Store: memory.New(memory.Options{}), ends: map[string][]store.EndReason{}}
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), gosdk.New(demo.NewServer()),
		session.Options{MaxSessions: capacity, Logger: slog.New(slog.DiscardHandler)})
	defer reg.Close()
	old := make(map[string]bool, capacity)
	for range capacity {
		old[mustCreate(t, reg).Token()] = true
	}

	gate := make(chan struct{})
	created := make([]string, creators)
	var wg sync.WaitGroup
	for i := range creators {
		wg.Go(func() {
			<-gate
			l, err := reg.Create(ctx, "")
			if err != nil {
				t.Errorf("creator %d: %v", i, err)
				return
			}
			created[i] = l.Token()
		})
	}
	close(gate)
	wg.Wait()

	if n := reg.Len(); n != capacity {
		t.Errorf("registry holds %d sessions after %d creations at the cap, want %d", n, creators, capacity)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	evicted := 0
	for tok, reasons := range st.ends {
		if !old[tok] {
			t.Errorf("a session created at the cap was ended (%v)", reasons)
			continue
		}
		if len(reasons) != 1 || reasons[0] != store.EndCapacity {
			t.Errorf("session %s ended %v, want once, by capacity", store.Prefix(tok), reasons)
		}
		evicted++
	}
	if evicted != creators {
		t.Errorf("%d sessions evicted for %d creations, want one each", evicted, creators)
	}
	for _, tok := range created {
		if tok == "" {
			continue
		}
		if _, err := reg.Get(ctx, tok, ""); err != nil {
			t.Errorf("a session created at the cap: %v, want held", err)
		}
	}
}

// TestEvictionSkipsBusySessions: a session with a call in flight is never
// evicted; when all are busy, Create fails with engine.ErrCapacity, and a
// session whose last call ended is a candidate again. An open standalone
// stream alone does not protect a session.
func TestEvictionSkipsBusySessions(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{MaxSessions: 2})
	a := mustCreate(t, f.reg)
	initialize(t, f, a)
	b := mustCreate(t, f.reg)
	initialize(t, f, b)
	call := func(l *session.Live, id string) (uint64, []*jsonrpc.Request) {
		calls := []*jsonrpc.Request{request(t, id, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": id}})}
		s, err := l.OpenStream(ctx, calls, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		return s, calls
	}
	sa, callsA := call(a, "a1")
	call(b, "b1")
	if _, err := f.reg.Create(ctx, ""); !errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("Create with every session busy: %v, want engine.ErrCapacity", err)
	}
	// a's call ends (never delivered, so released): a can go, b cannot,
	// although a was used after b.
	f.reg.Get(ctx, a.Token(), "")
	a.ReleaseCalls(ctx, sa, callsA, replay.ReasonClientGone)
	detach := a.Attach() // a standalone stream is open on a
	defer detach()
	c, err := f.reg.Create(ctx, "")
	if err != nil {
		t.Fatalf("Create after a's call ended: %v", err)
	}
	var ended *store.EndedError
	if _, err := f.reg.Get(ctx, a.Token(), ""); !errors.As(err, &ended) || ended.Reason != store.EndCapacity {
		t.Fatalf("a after the Create: %v, want ended by capacity", err)
	}
	for _, l := range []*session.Live{b, c} {
		if _, err := f.reg.Get(ctx, l.Token(), ""); err != nil {
			t.Fatalf("session %s after the Create: %v, want held", store.Prefix(l.Token()), err)
		}
	}
}
