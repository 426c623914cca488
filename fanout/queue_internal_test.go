package fanout

// A listener's queue and its writing goroutine, which runs only while the
// queue holds notifications.

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestQueueWriterRunsWhileQueued: nothing queued before the
// acknowledgment is written until it is sent; then the queue is written in
// order and the writer ends; a later notification starts a writer again,
// and goes after the earlier ones.
func TestQueueWriterRunsWhileQueued(t *testing.T) {
	b := &Bus{logger: slog.New(slog.DiscardHandler), stop: make(chan struct{})}
	var (
		mu   sync.Mutex
		sent []string
	)
	l := newListener(func() {})
	l.ctx = context.Background()
	l.send = func(_ context.Context, method string, _ mcp.Request) (mcp.Result, error) {
		mu.Lock()
		sent = append(sent, method)
		mu.Unlock()
		return nil, nil
	}
	writing := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.writing
	}
	waitSent := func(want []string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			got := slices.Clone(sent)
			mu.Unlock()
			if slices.Equal(got, want) && !writing() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("sent %q, writing %v; want %q and no writer", got, writing(), want)
			}
		}
	}

	b.enqueue(l, ToolsListChanged, nil)
	b.enqueue(l, PromptsListChanged, nil)
	if writing() {
		t.Fatal("a writer runs before the acknowledgment is sent")
	}
	if !l.acknowledged() {
		t.Fatal("acknowledged with two queued: no writer to start")
	}
	go b.write(l)
	waitSent([]string{ToolsListChanged, PromptsListChanged})

	b.enqueue(l, ResourcesListChanged, nil)
	waitSent([]string{ToolsListChanged, PromptsListChanged, ResourcesListChanged})

	l.end()
	b.enqueue(l, ToolsListChanged, nil)
	waitSent([]string{ToolsListChanged, PromptsListChanged, ResourcesListChanged})
	if l2 := newListener(func() {}); l2.acknowledged() {
		t.Fatal("acknowledged with nothing queued: a writer to start")
	}
}
