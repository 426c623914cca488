package main

// This file holds the memory settings of tidemark serve: the soft memory
// limit it gives the Go runtime from its retention settings, and the floor
// under the collector's heap goal.

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/tidemark-mcp/tidemark/transport"
)

// storeMemory is the room memoryLimit leaves, beside sessionMemory per
// live session, for everything else of a process whose events are outside
// its heap (--data-dir, --redis): the requests in progress, the embedded
// store's caches, the runtime (bytes). With the default 10,000 sessions
// the limit is 766 MiB.
const storeMemory = 688 << 20

// sessionMemory is what one live session holds beside its events (bytes):
// an idle session of the go-sdk engine takes about 17 KiB of RSS at the
// default GOGC, half of it the collector's headroom (bench/NOTES.md, "what
// profiling changed"), which a memory limit makes the collector give up.
// It is the session of a client like the SDKs', not the worst case: a
// client that fills its session's state to the bounds of
// engine.State.Admit (16 KiB of initialize params, 64 subscriptions of
// 16 KiB of URIs) makes it hold about twenty times more (session's
// BenchmarkFullSession), which docs/operating.md ("Retention and memory")
// tells operators to meet with authorization or a lower --max-sessions
// rather than with a limit sized for it.
const sessionMemory = 8 << 10

// runtimeMemory is the room for the runtime, the goroutines' stacks and
// the garbage of the requests in progress that memoryLimit leaves beside
// what it counts of the memory store's process (bytes).
const runtimeMemory = 64 << 20

// memoryLimit returns the soft memory limit (bytes) of a process whose
// memory store retains at most budget bytes of events (negative: the
// events are in a store outside the Go heap: --data-dir, --redis), whose
// calls being answered hold at most inflight bytes for their bodies
// (transport.Options.MaxInflightBytes, each body counted at what it costs;
// negative: no bound, counted as transport.DefaultMaxInflightBytes), and
// which holds at most sessions live sessions. With the memory store it
// counts each thing the process holds once: the budget (the retained
// events are live; under the limit the collector runs before the heap
// reaches twice them, its goal at the default GOGC), the in-flight bound,
// sessionMemory per session, and runtimeMemory: 782 MiB at the defaults.
// Otherwise it is storeMemory and sessionMemory per session: a fixed limit
// below what --max-sessions live sessions hold would keep the collector
// running without pause once they are live (100,000 sessions under a
// 768 MiB limit opened at 200 a second instead of 1,200). It returns 0 for
// a memory store with no budget, which no limit can bound.
func memoryLimit(budget, inflight int64, sessions int, eventsInHeap bool) int64 {
	switch {
	case !eventsInHeap:
		return storeMemory + int64(sessions)*sessionMemory
	case budget < 0:
		return 0
	}
	if inflight < 0 {
		inflight = transport.DefaultMaxInflightBytes
	}
	return budget + inflight + int64(sessions)*sessionMemory + runtimeMemory
}

// setMemoryLimit gives the Go runtime the limit memoryLimit returns, so
// that the collector runs as often as needed to keep the process under it,
// unless the GOMEMLIMIT environment variable chose one; it returns the
// limit in force (0: none).
func setMemoryLimit(budget, inflight int64, sessions int, eventsInHeap bool) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1)
	}
	limit := memoryLimit(budget, inflight, sessions, eventsInHeap)
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	return limit
}

// heapFloor is the least heap goal of tidemark serve with --data-dir or
// --redis (bytes): the collector does not start a cycle before the heap
// reaches it. At the default GOGC of 100 the goal is twice the live heap,
// and a process whose events are outside it lives in a few MiB while each
// call allocates a few hundred KB (the go-sdk's JSON decoding), so without
// a floor it collects many times a second and spends more CPU on the
// collector than on its store. A larger floor costs a flood on one stream
// more CPU per event, since the allocations then walk a heap larger than
// the processor's caches; bench/NOTES.md ("2026-12-02: heap floor") has
// the figures that chose 16 MiB.
const heapFloor = 16 << 20

// setHeapFloor keeps the collector's heap goal at heapFloor or above, and
// otherwise where GOGC=100 puts it (twice the live heap), for a process
// whose events are outside its heap (eventsInHeap false: the memory
// store's retained events are its live heap, and the goal grows with
// them), unless the GOGC environment variable chose the collector's pace.
// It returns the floor in force (bytes; 0: none). The memory limit still
// caps the goal (setMemoryLimit).
//
// The runtime has no such setting (GOMEMLIMIT is a ceiling), so after
// each cycle a cleanup sets the GC percent that puts the next goal at the
// floor, from the live heap the cycle marked (runtime/metrics
// /gc/heap/live:bytes), never below 100. gctuner (bytedance/gopkg)
// computes the percent from HeapInuse, which is not the heap the percent
// applies to, and so misses the floor (a 36.8 MiB goal for a 64 MiB floor
// under TestHeapFloor's load).
func setHeapFloor(eventsInHeap bool) int64 {
	if eventsInHeap || os.Getenv("GOGC") != "" {
		return 0
	}
	armHeapFloor()
	return heapFloor
}

// armHeapFloor makes the next collection call floorGCPercent: a cleanup
// runs once its object, unreachable from the start, has been collected.
// The object holds a pointer so that it is not one of the tiny
// allocations that share a block with objects still live.
func armHeapFloor() {
	runtime.AddCleanup(new(*int), func(struct{}) {
		debug.SetGCPercent(floorGCPercent(liveHeap()))
		armHeapFloor()
	}, struct{}{})
}

// floorGCPercent returns the GC percent that puts the heap goal of a
// process whose live heap is live bytes at heapFloor, or 100 (the
// default) when twice live is already above it.
func floorGCPercent(live uint64) int {
	if live == 0 || 2*live >= heapFloor {
		return 100
	}
	return int(heapFloor*100/live) - 100
}

// liveHeap returns the heap the last collection marked live (bytes).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
