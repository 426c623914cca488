package warngate_test

import (
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/warngate"
)

// TestPass: with an interval of one second, each key's first line goes
// through, the lines of that key within the second after the last one
// that went through are held back, and the first line at or after that
// second goes through saying how many were; another key is counted on
// its own.
func TestPass(t *testing.T) {
	start := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	now := start
	g := warngate.New[string](time.Second, func() time.Time { return now })
	steps := []struct {
		at         time.Duration // since start
		key        string
		ok         bool
		suppressed int
	}{
		{0, "a", true, 0},
		{0, "a", false, 0},
		{0, "b", true, 0},
		{500 * time.Millisecond, "a", false, 0},
		{999 * time.Millisecond, "a", false, 0},
		{time.Second, "a", true, 3},
		{time.Second, "b", true, 0},
		{1500 * time.Millisecond, "b", false, 0},
		{1999 * time.Millisecond, "a", false, 0},
		{5 * time.Second, "a", true, 1},
		{5 * time.Second, "b", true, 1},
		{7 * time.Second, "a", true, 0},
	}
	for i, s := range steps {
		now = start.Add(s.at)
		ok, n := g.Pass(s.key)
		if ok != s.ok || n != s.suppressed {
			t.Fatalf("step %d: Pass(%q) at +%v = %v, %d; want %v, %d", i, s.key, s.at, ok, n, s.ok, s.suppressed)
		}
	}
}

// TestNilPassesAll: a nil gate lets every line through, holding none back.
func TestNilPassesAll(t *testing.T) {
	var g *warngate.Gate[string]
	for i := range 3 {
		if ok, n := g.Pass("a"); !ok || n != 0 {
			t.Fatalf("line %d through a nil gate: %v, %d; want true, 0", i, ok, n)
		}
	}
}

// TestPassConcurrent: 1,000 lines of one key at one instant from 8
// goroutines let exactly one through; the next line a second later says
// the other 999 were held back (under -race).
func TestPassConcurrent(t *testing.T) {
	start := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := start
	g := warngate.New[int](time.Second, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	var passed sync.Map
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 125 {
				if ok, _ := g.Pass(7); ok {
					passed.Store(w*125+i, true)
				}
			}
		})
	}
	wg.Wait()
	n := 0
	passed.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d of 1,000 lines at one instant went through, want 1", n)
	}
	mu.Lock()
	now = start.Add(time.Second)
	mu.Unlock()
	if ok, held := g.Pass(7); !ok || held != 999 {
		t.Fatalf("the line a second later: %v, %d; want true, 999", ok, held)
	}
}
