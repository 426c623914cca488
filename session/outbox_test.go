// outbox_test.go holds the tests of what the engine's Outbox answers
// when a message cannot be stored.

package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// failingStore is a memory store whose Append fails with ErrUnavailable
// while fail is set, as a store that lost its connection does.
type failingStore struct {
	*memory.Store
	fail atomic.Bool
}

func (s *failingStore) Append(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	if s.fail.Load() {
		return store.Bounds{}, fmt.Errorf("append session %s: connection lost: %w", store.Prefix(token), store.ErrUnavailable)
	}
	return s.Store.Append(ctx, token, gen, evs)
}

// TestSendErrors: Live.Send, the engines' Outbox, wraps the store's
// refusal with the engine.Outbox error it means (engine.ErrFenced,
// engine.ErrSessionEnded, engine.ErrUnavailable), keeping the store's
// error in the chain and its text.
func TestSendErrors(t *testing.T) {
	ctx := context.Background()
	st := &failingStore{Store: memory.New(memory.Options{})}
	log := eventlog.New(st, eventlog.Options{})
	reg := session.New(st, log, gosdk.New(demo.NewServer()), session.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { reg.Close() })
	create := func() *session.Live {
		t.Helper()
		l, err := reg.Create(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	fenced := create()
	if _, err := reg.Recreate(ctx, fenced.Token()); err != nil {
		t.Fatal(err)
	}
	ended := create()
	if err := reg.End(ctx, ended.Token(), store.EndDeleted); err != nil {
		t.Fatal(err)
	}
	unavailable := create()

	msg := &jsonrpc.Request{Method: "notifications/message", Params: json.RawMessage(`{"level":"info","data":"x"}`)}
	for _, tc := range []struct {
		name       string
		l          *session.Live
		want, from error
		text       string
	}{
		{"fenced", fenced, engine.ErrFenced, store.ErrFenced,
			"eventlog: append session %[1]s gen 1: append session %[1]s gen 1: fenced by a newer generation (gen 2)"},
		{"ended", ended, engine.ErrSessionEnded, store.ErrEnded,
			"eventlog: append session %[1]s gen 1: session %[1]s: session ended: deleted"},
		{"unavailable", unavailable, engine.ErrUnavailable, store.ErrUnavailable,
			"eventlog: append session %[1]s gen 1: append session %[1]s: connection lost: store unavailable"},
	} {
		st.fail.Store(tc.l == unavailable)
		err := session.OutboxOf(tc.l).Send(ctx, msg, jsonrpc.ID{})
		text := fmt.Sprintf(tc.text, store.Prefix(tc.l.Token()))
		if !errors.Is(err, tc.want) || !errors.Is(err, tc.from) || err.Error() != text {
			t.Errorf("%s: Send = %v, want an error wrapping %v and %v, reading %q", tc.name, err, tc.want, tc.from, text)
		}
		for _, other := range []error{engine.ErrFenced, engine.ErrSessionEnded, engine.ErrUnavailable} {
			if other != tc.want && errors.Is(err, other) {
				t.Errorf("%s: Send = %v, which also wraps %v", tc.name, err, other)
			}
		}
	}
}
