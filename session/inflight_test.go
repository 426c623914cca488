// inflight_test.go holds the tests of what a registry counts as a call in
// flight (Registry.CallsInFlight), which a graceful shutdown waits for.

package session_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// gatedStore is a memory store whose Append of a JSON-RPC response waits,
// while gate is set, until release is closed, as a durable store's append
// waits for its fsync; entered is closed when the first such append waits.
type gatedStore struct {
	*memory.Store
	gate    atomic.Bool
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *gatedStore) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	if s.gate.Load() && holdsResponse(evs) {
		s.once.Do(func() { close(s.entered) })
		<-s.release
	}
	return s.Store.Append(ctx, token, gen, evs)
}

func holdsResponse(evs []store.Event) bool {
	for _, ev := range evs {
		if ev.Kind != store.KindMessage {
			continue
		}
		if msg, err := jsonrpc.DecodeMessage(ev.Data); err == nil {
			if _, ok := msg.(*jsonrpc.Response); ok {
				return true
			}
		}
	}
	return false
}

// TestCallInFlightUntilStored: a call counts as in flight until its
// response is in the event log. While the append of the response waits
// (for an fsync, here for the test), CallsInFlight is 1; once it is 0 the
// log's newest event is that response, so a shutdown that waits for no
// call in flight and then takes the high-water mark sends the answer.
func TestCallInFlightUntilStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := &gatedStore{Store: memory.New(memory.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
	log := eventlog.New(st, eventlog.Options{})
	reg := session.New(st, log, gosdk.New(demo.NewServer()), session.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { reg.Close() })
	f := &fixture{reg: reg, log: log}
	l := mustCreate(t, reg)
	initialize(t, f, l)

	req := request(t, 2, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}})
	s, err := l.OpenStream(ctx, []*jsonrpc.Request{req}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	st.gate.Store(true)
	if err := l.Deliver(ctx, req, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.entered:
	case <-ctx.Done():
		t.Fatal("the echo's response was not appended within 10 s")
	}
	if n := reg.CallsInFlight(); n != 1 {
		close(st.release)
		t.Fatalf("while the response is being appended CallsInFlight = %d, want 1", n)
	}
	close(st.release)
	for reg.CallsInFlight() != 0 {
		if ctx.Err() != nil {
			t.Fatal("CallsInFlight is not 0 within 10 s of the response's append")
		}
		time.Sleep(time.Millisecond)
	}
	b, err := log.Bounds(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	ev, found, err := log.At(ctx, l.Token(), b.HWM)
	if err != nil || !found {
		t.Fatalf("the event at the high-water mark %d: found %v, %v", b.HWM, found, err)
	}
	msg, err := jsonrpc.DecodeMessage(ev.Data)
	if resp, ok := msg.(*jsonrpc.Response); err != nil || !ok || resp.ID != req.ID || ev.Stream != s || !ev.End {
		t.Fatalf("with no call in flight the newest event is %s on stream %d (end %v), want the response to id 2 ending stream %d", ev.Data, ev.Stream, ev.End, s)
	}
}
