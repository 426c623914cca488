package main

// This file holds the memory bound of tidemark serve: the soft memory
// limit it gives the Go runtime from its retention settings.

import (
	"os"
	"runtime/debug"
)

// baseMemory is the room memoryLimit leaves for everything but the events
// the memory store retains: the sessions' live state (--max-sessions of
// them), the requests in progress, the embedded store's caches, the
// runtime (bytes).
const baseMemory = 768 << 20

// memoryLimit returns the soft memory limit (bytes) of a process whose
// memory store retains at most budget bytes of events (negative: the
// events are in a store outside the Go heap: --data-dir, --redis): twice
// the budget, the collector's headroom at the default GOGC, plus
// baseMemory. It returns 0 for a memory store with no budget, which no
// limit can bound.
func memoryLimit(budget int64, eventsInHeap bool) int64 {
	switch {
	case !eventsInHeap:
		return baseMemory
	case budget < 0:
		return 0
	}
	return 2*budget + baseMemory
}

// setMemoryLimit gives the Go runtime the limit memoryLimit returns, so
// that the collector runs as often as needed to keep the process under it,
// unless the GOMEMLIMIT environment variable chose one; it returns the
// limit in force (0: none).
func setMemoryLimit(budget int64, eventsInHeap bool) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1)
	}
	limit := memoryLimit(budget, eventsInHeap)
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	return limit
}
