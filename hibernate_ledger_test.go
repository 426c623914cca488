package tidemark_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// hibernationStores opens, for each store that keeps a hibernated
// session's record, a new one: nil for the Handler's memory store.
var hibernationStores = []struct {
	name string
	open func(t *testing.T) store.Store
}{
	{"memory", func(t *testing.T) store.Store { return nil }},
	{"durable", func(t *testing.T) store.Store {
		st, err := durable.Open(t.TempDir(), durable.Options{Logger: slog.New(slog.DiscardHandler), SweepInterval: -1, MinFreeBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"redis", func(t *testing.T) store.Store {
		testenv.NeedRedis(t)
		srv := redistest.Start(t, redistest.Options{})
		st, err := redis.New(context.Background(), redis.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
}

// refusedRequests returns the 409 for reason that err is, and its
// error.data lists as a string: lostRequests, then " answered " and
// answeredRequests when present.
func refusedRequests(t *testing.T, err error, reason replay.Reason) (*mcptest.StatusError, string) {
	t.Helper()
	se, ok := mcptest.AsStatusError(err)
	if !ok || se.Status != http.StatusConflict || se.Reason() != string(reason) {
		t.Fatalf("resume = %v, want 409 %s", err, reason)
	}
	var got string
	for _, k := range []struct{ key, prefix string }{{"lostRequests", ""}, {"answeredRequests", " answered "}} {
		if v, ok := se.Body.Data[k.key]; ok {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			got += k.prefix + string(b)
		}
	}
	return se, got
}

// TestHibernationKeepsAnsweredRequests: over HTTP, on each store, a
// resume from the priming cursor of a call answered and read, whose
// response retention has removed since, answers 409 cursor_compacted
// with the call in error.data.answeredRequests; after the session
// hibernates exactly, the same resume wakes it and answers the same 409,
// byte for byte (regression: it had no answeredRequests, and said the
// session no longer kept which responses came after the cursor). After a
// lossy hibernation, the resume answers 409 generation_mismatch naming
// the call as answered too.
func TestHibernationKeepsAnsweredRequests(t *testing.T) {
	for _, sc := range hibernationStores {
		for _, exact := range []bool{true, false} {
			name := sc.name + "/lossy"
			if exact {
				name = sc.name + "/exact"
			}
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				h, c := serveHibernating(t, &tidemark.Options{
					Store:      sc.open(t),
					Restorable: exact,
					Retention:  eventlog.Options{MaxEvents: 4, Budget: -1},
					// Long enough that the session is awake for the first
					// resume, even on a loaded machine.
					Sessions:      session.Options{HibernateAfter: time.Second, Logger: slog.New(slog.DiscardHandler)},
					SweepInterval: 10 * time.Millisecond,
				})
				s, cursor, _ := callHoldingCursor(t, ctx, c)
				for id := int64(3); id <= 4; id++ {
					st, err := s.Call(ctx, mcptest.ToolCall(id, "echo", map[string]any{"text": "later"}, nil))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := st.Collect(); err != nil {
						t.Fatal(err)
					}
					st.Close()
				}
				_, err := s.Resume(ctx, cursor)
				awake, got := refusedRequests(t, err, replay.ReasonCursorCompacted)
				if got != `[] answered [2]` {
					t.Fatalf("awake: 409 lists %s, want [] answered [2]: %s", got, awake.RawBody)
				}
				if n := h.Registry().Hibernated(); n != 0 {
					t.Fatalf("%d sessions hibernated before the awake resume's answer, want 0", n)
				}
				awaitHibernated(t, h, 1)

				_, err = s.Resume(ctx, cursor) // wakes the session
				if !exact {
					if _, got := refusedRequests(t, err, replay.ReasonGenerationMismatch); got != `[] answered [2]` {
						t.Fatalf("after a lossy hibernation: 409 lists %s, want [] answered [2]", got)
					}
					return
				}
				woken, _ := refusedRequests(t, err, replay.ReasonCursorCompacted)
				if string(woken.RawBody) != string(awake.RawBody) {
					t.Fatalf("after the wake: 409 %s\nwant what the awake session answered: %s", woken.RawBody, awake.RawBody)
				}
				if n := h.Registry().Len(); n != 1 {
					t.Fatalf("%d sessions live after the resume, want the woken one", n)
				}
			})
		}
	}
}
