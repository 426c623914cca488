package agequeue_test

// The queue against a sorted list of the same items.

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/agequeue"
)

// TestAgainstSort drives a Queue with random Sets and Removes and checks,
// after each, that Oldest and Second are the two earliest times of the
// queued items, as sorting them says.
func TestAgainstSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	epoch := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var q agequeue.Queue[int]
	items := make([]*agequeue.Item[int], 50)
	for i := range items {
		items[i] = agequeue.NewItem(i)
	}
	for step := range 5000 {
		it := items[r.IntN(len(items))]
		if r.IntN(4) == 0 {
			q.Remove(it)
		} else {
			q.Set(it, epoch.Add(time.Duration(r.IntN(1000))*time.Second))
		}
		var times []time.Time
		for _, it := range items {
			if it.Queued() {
				times = append(times, it.At())
			}
		}
		slices.SortFunc(times, time.Time.Compare)
		if q.Len() != len(times) {
			t.Fatalf("step %d: Len %d, want %d", step, q.Len(), len(times))
		}
		if len(times) == 0 {
			if q.Oldest() != nil {
				t.Fatalf("step %d: Oldest of an empty queue = item %d", step, q.Oldest().Value)
			}
			continue
		}
		if got := q.Oldest().At(); !got.Equal(times[0]) {
			t.Fatalf("step %d: Oldest at %v, want %v", step, got, times[0])
		}
		second, ok := q.Second()
		if ok != (len(times) > 1) || (ok && !second.Equal(times[1])) {
			t.Fatalf("step %d: Second = %v, %v; want %v of %d items", step, second, ok, times[min(1, len(times)-1)], len(times))
		}
	}
}
