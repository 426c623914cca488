// Package listentest records what a go-sdk client hears on its
// subscriptions/listen streams (MCP 2026-07-28,
// basic/patterns/subscriptions) and on a stateful session's standalone
// stream: the acknowledgments and every list-change and resource-update
// notification, counted, so that tests can assert that each arrived
// exactly once.
package listentest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Methods a Recorder counts.
const (
	Acknowledged     = "notifications/subscriptions/acknowledged"
	ResourceUpdated  = "notifications/resources/updated"
	ToolsChanged     = "notifications/tools/list_changed"
	PromptsChanged   = "notifications/prompts/list_changed"
	ResourcesChanged = "notifications/resources/list_changed"
)

// Recorder counts the notifications one client receives, by Key.
type Recorder struct {
	mu      sync.Mutex
	counts  map[string]int
	changed chan struct{} // closed and replaced at every notification
}

// New returns an empty Recorder.
func New() *Recorder {
	return &Recorder{counts: make(map[string]int), changed: make(chan struct{})}
}

// Key is what a Recorder counts a notification under: its method, and for
// resources/updated a space and the URI.
func Key(method, uri string) string {
	if uri == "" {
		return method
	}
	return method + " " + uri
}

// Options returns client options whose handlers record every list change
// and resource update, and whose receiving middleware records
// acknowledgments. Setting the list-change handlers makes a 2026-07-28
// go-sdk client open a subscriptions/listen stream for them at Connect
// when the server announces listChanged.
func (r *Recorder) Options() *mcp.ClientOptions {
	opts := &mcp.ClientOptions{
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { r.add(ToolsChanged) },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { r.add(PromptsChanged) },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { r.add(ResourcesChanged) },
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			r.add(Key(ResourceUpdated, req.Params.URI))
		},
	}
	return opts
}

// Watch adds to c the receiving middleware that records acknowledgments.
// Call it before Connect.
func (r *Recorder) Watch(c *mcp.Client) {
	c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == Acknowledged {
				r.add(Acknowledged)
			}
			return next(ctx, method, req)
		}
	})
}

func (r *Recorder) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[key]++
	close(r.changed)
	r.changed = make(chan struct{})
}

// Count returns how many notifications were counted under key.
func (r *Recorder) Count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[key]
}

// String lists the counts, sorted by key, for failure messages.
func (r *Recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.counts))
	for k := range r.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s ×%d; ", k, r.counts[k])
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// WaitFor waits up to timeout until at least n notifications were counted
// under key, and fails the test otherwise.
func (r *Recorder) WaitFor(t testing.TB, key string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		got, changed := r.counts[key], r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("listentest: %d × %q after %v, want %d; heard: %s", got, key, timeout, n, r)
		}
	}
}

// Settle is how long Exactly waits for duplicates after the expected
// notifications have arrived: longer than one delivery through Redis takes
// on a loaded machine.
const Settle = 500 * time.Millisecond

// Exactly waits up to timeout for every key of want to reach its count,
// then Settle more, and fails the test unless the counts of the keys of
// want, and of every other key it counts, are exactly as want says (a key
// absent from want must not have been heard at all, acknowledgments
// aside).
func (r *Recorder) Exactly(t testing.TB, want map[string]int, timeout time.Duration) {
	t.Helper()
	for k, n := range want {
		if n > 0 {
			r.WaitFor(t, k, n, timeout)
		}
	}
	time.Sleep(Settle)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, got := range r.counts {
		if k == Acknowledged {
			continue
		}
		if got != want[k] {
			t.Errorf("listentest: heard %q %d times, want %d", k, got, want[k])
		}
	}
}
