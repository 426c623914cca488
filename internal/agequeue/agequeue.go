// Package agequeue orders sessions by the time of their oldest retained
// event, so that a bound on the bytes retained across all sessions (the
// event log's process budget, the durable store's directory bound) finds
// the oldest events in O(log n) instead of looking at every session.
//
// A Queue is not safe for concurrent use: its user guards it with a lock of
// its own, and each Item belongs to one Queue.
package agequeue

import (
	"container/heap"
	"time"
)

// Item is one entry of a Queue: a value and the time it is ordered by.
type Item[T any] struct {
	// Value is the caller's: the session the item stands for.
	Value T
	at    time.Time
	index int // position in the heap; -1 while not queued
}

// NewItem returns an Item for v that is in no Queue.
func NewItem[T any](v T) *Item[T] { return &Item[T]{Value: v, index: -1} }

// Queued reports whether it is in a Queue.
func (it *Item[T]) Queued() bool { return it.index >= 0 }

// At returns the time it is ordered by, as last given to Queue.Set.
func (it *Item[T]) At() time.Time { return it.at }

// Queue is a min-heap of Items by time: Oldest is the Item with the
// earliest time. Set and Remove cost O(log n), Oldest and Second O(1). The
// zero value is an empty Queue.
type Queue[T any] struct {
	h items[T]
}

// Len returns the number of queued Items.
func (q *Queue[T]) Len() int { return len(q.h) }

// Set queues it at time at, or moves it there if it is queued already.
func (q *Queue[T]) Set(it *Item[T], at time.Time) {
	it.at = at
	if it.index >= 0 {
		heap.Fix(&q.h, it.index)
		return
	}
	heap.Push(&q.h, it)
}

// Remove takes it out of the Queue; an Item that is not queued is left
// as it is.
func (q *Queue[T]) Remove(it *Item[T]) {
	if it.index >= 0 {
		heap.Remove(&q.h, it.index)
	}
}

// Oldest returns the Item with the earliest time, or nil when the Queue is
// empty. It stays queued.
func (q *Queue[T]) Oldest() *Item[T] {
	if len(q.h) == 0 {
		return nil
	}
	return q.h[0]
}

// Second returns the earliest time of the Items other than Oldest, and
// false when there is none: how far the oldest session may be trimmed
// before another session holds the oldest event.
func (q *Queue[T]) Second() (time.Time, bool) {
	switch len(q.h) {
	case 0, 1:
		return time.Time{}, false
	case 2:
		return q.h[1].at, true
	}
	if q.h[2].at.Before(q.h[1].at) {
		return q.h[2].at, true
	}
	return q.h[1].at, true
}

// items implements heap.Interface.
type items[T any] []*Item[T]

func (h items[T]) Len() int           { return len(h) }
func (h items[T]) Less(i, j int) bool { return h[i].at.Before(h[j].at) }

func (h items[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *items[T]) Push(x any) {
	it := x.(*Item[T])
	it.index = len(*h)
	*h = append(*h, it)
}

func (h *items[T]) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	it.index = -1
	*h = old[:len(old)-1]
	return it
}
