// deliverylog_test.go tests how often a failed delivery is logged.

package transport_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/transport"
)

// boundsDownStore answers every Bounds with store.ErrUnavailable once
// down is set: a store that cannot be reached when a resume reads the
// bounds it is decided on, as during a Redis failover.
type boundsDownStore struct {
	store.Store
	down atomic.Bool
}

func (d *boundsDownStore) Bounds(ctx context.Context, token string) (store.Bounds, error) {
	if d.down.Load() {
		return store.Bounds{}, store.ErrUnavailable
	}
	return d.Store.Bounds(ctx, token)
}

// TestDeliveryFailuresLogOncePerSecond: while the store fails every
// resume's delivery, each resume is answered 503 unavailable and the log
// gets one WARN line per reason per second, carrying the session and the
// store's error, not one line per request (README, "Refusals").
func TestDeliveryFailuresLogOncePerSecond(t *testing.T) {
	ctx := testContext(t)
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	st := &boundsDownStore{Store: memory.New(memory.Options{})}
	stk := newStack(t, nil, &tidemark.Options{
		Store:     st,
		Transport: transport.Options{Logger: logger},
		Sessions:  session.Options{Logger: logger},
	}, nil)
	s := stk.initialize(t, ctx, "")
	stream, err := s.Call(ctx, mcptest.ToolCall(1, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := stream.Collect()
	if err != nil || len(evs) == 0 || !evs[len(evs)-1].HasID {
		t.Fatalf("echo: %d events, %v; want its result with an id", len(evs), err)
	}
	cursor := evs[len(evs)-1].ID
	st.down.Store(true)
	resume := func() {
		_, err := s.Resume(ctx, cursor)
		se, ok := mcptest.AsStatusError(err)
		if !ok || se.Status != http.StatusServiceUnavailable || se.Reason() != "unavailable" {
			t.Fatalf("resume with the store down: %v, want 503 unavailable", err)
		}
	}
	warns := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=WARN") {
				out = append(out, l)
			}
		}
		return out
	}
	for range 30 {
		resume()
	}
	first := warns()
	// Thirty failures within a second: the first is logged. (A slow
	// machine may take over a second for them; then a second line.)
	if len(first) == 0 || len(first) > 2 || strings.Contains(first[0], "suppressed=") {
		t.Fatalf("WARN lines after 30 failed resumes: %q, want the first alone", first)
	}
	for _, want := range []string{`msg="request refused"`, "reason=unavailable", "session=", "error=", store.ErrUnavailable.Error()} {
		if !strings.Contains(first[0], want) {
			t.Errorf("the WARN line %q lacks %s", first[0], want)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	resume()
	all := warns()
	if len(all) != len(first)+1 || !strings.Contains(all[len(all)-1], " suppressed=") {
		t.Fatalf("WARN lines after one more failure a second later: %q, want one more saying how many were held back", all)
	}
	if len(first) == 1 && !strings.Contains(all[1], " suppressed=29") {
		t.Fatalf("the second line %q, want suppressed=29", all[1])
	}
}
