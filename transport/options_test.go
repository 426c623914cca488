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
