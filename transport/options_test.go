package transport

import (
	"testing"
	"time"
)

// TestOptionsLeastIntervals: a positive KeepAlive or Retry below its least
// value is taken as that value; zero takes the default and a negative value
// stays (never, none). A KeepAlive of 1ns made every SSE stream's watcher
// start a ticker of 0 and panic the process.
func TestOptionsLeastIntervals(t *testing.T) {
	for _, tc := range []struct {
		keepAlive, retry         time.Duration
		wantKeepAlive, wantRetry time.Duration
	}{
		{1, 1, MinKeepAlive, MinRetry},
		{3 * time.Millisecond, 500 * time.Microsecond, MinKeepAlive, MinRetry},
		{MinKeepAlive, MinRetry, MinKeepAlive, MinRetry},
		{time.Minute, 2 * time.Second, time.Minute, 2 * time.Second},
		{0, 0, DefaultKeepAlive, DefaultRetry},
		{-1, -1, -1, -1},
	} {
		got := Options{KeepAlive: tc.keepAlive, Retry: tc.retry}.withDefaults()
		if got.KeepAlive != tc.wantKeepAlive || got.Retry != tc.wantRetry {
			t.Errorf("Options{KeepAlive: %v, Retry: %v}: KeepAlive %v, Retry %v; want %v, %v",
				tc.keepAlive, tc.retry, got.KeepAlive, got.Retry, tc.wantKeepAlive, tc.wantRetry)
		}
	}
}

// TestOptionsMaxListens: zero MaxListens takes DefaultMaxListens, and a
// positive or negative one (no bound) stays; listens.add registers up to
// the bound, none past it, and a removed stream's room is the next one's.
func TestOptionsMaxListens(t *testing.T) {
	for in, want := range map[int]int{0: DefaultMaxListens, 1: 1, 5000: 5000, -1: -1} {
		if got := (Options{MaxListens: in}).withDefaults().MaxListens; got != want {
			t.Errorf("Options{MaxListens: %d}: %d, want %d", in, got, want)
		}
	}
	var l listens
	nop := func() {}
	removeFirst, ok1 := l.add(nop, 2)
	_, ok2 := l.add(nop, 2)
	_, ok3 := l.add(nop, 2)
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("three adds under a bound of 2: %v %v %v, want true true false", ok1, ok2, ok3)
	}
	removeFirst()
	if _, ok := l.add(nop, 2); !ok {
		t.Fatal("an add once one of 2 was removed was refused")
	}
	for i := range 3 {
		if _, ok := l.add(nop, -1); !ok {
			t.Fatalf("add %d with no bound was refused", i)
		}
	}
	if n := len(l.cancel); n != 5 {
		t.Fatalf("%d streams registered, want 5", n)
	}
}
