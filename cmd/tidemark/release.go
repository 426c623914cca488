package main

// This file holds how tidemark serve gives the memory of hibernated
// sessions back to the operating system: after a sweep, once enough
// sessions hibernated since the last time, it collects and returns every
// free page at once (runtime/debug.FreeOSMemory), at most once a minute.
//
// Without it the runtime returns freed pages in the background only down
// to about 10% above its next heap goal, twice the live heap at the
// default GOGC: 100,000 sessions of the memory store that hibernated kept
// 491 MiB of RSS for 187 MiB of heap in use, 4.6 KiB per session where
// the heap was 1.9 KiB (BENCHMARKS.md, (d)).

import (
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// releaseLeast is the fewest sessions hibernated since the last release
// that make the next one: each frees 9 to 11 KiB of heap (BENCHMARKS.md,
// (d): heap per session awake minus hibernated, on every store), so 1,000
// free about 10 MiB.
const releaseLeast = 1000

// sessionFreed is the heap one hibernation frees, as counted against the
// live heap (bytes; the lower figure of releaseLeast's).
const sessionFreed = 9 << 10

// releaseShare is the least part of the live heap the sessions hibernated
// since the last release must have freed (sessionFreed each), as its
// divisor: the release's collection marks the whole live heap, one cycle
// more than the runtime would run, which 100,000 hibernated sessions of
// the memory store (124 MB live) made 1.3 s long and 2.7 s of CPU on a
// loaded 2-core machine (bench (d), GODEBUG=gctrace=1). Worth it after a
// mass hibernation, where RSS falls by hundreds of MiB, not for a few
// MiB among a heap of hibernated sessions.
const releaseShare = 4

// releaseEvery is the least time between two releases, so that the
// collections they force stay rare however sessions come and go; the
// sessions hibernated meanwhile wait for the first sweep after it.
const releaseEvery = time.Minute

// shouldRelease reports whether a sweep gives memory back: pending
// sessions hibernated since the last release, which was since ago (the
// process's start when none), in a process whose last collection left
// live bytes of heap.
func shouldRelease(pending int, since time.Duration, live uint64) bool {
	return pending >= releaseLeast && since >= releaseEvery && uint64(pending)*sessionFreed >= live/releaseShare
}

// releaser gives freed memory back after the sweeps that hibernated
// sessions (session.Options.Swept). Only the sweeping goroutine calls it.
type releaser struct {
	logger  *slog.Logger
	now     func() time.Time
	free    func()        // debug.FreeOSMemory
	live    func() uint64 // the live heap of the last collection (bytes)
	pending int           // sessions hibernated since the last release
	last    time.Time
}

// newReleaser returns a releaser of this process's memory.
func newReleaser(logger *slog.Logger) *releaser {
	return &releaser{logger: logger, now: time.Now, free: debug.FreeOSMemory, live: func() uint64 { return readMemory().live }}
}

// swept counts the n sessions a sweep hibernated and, when shouldRelease
// says so, collects and returns the free pages to the operating system,
// with one log line: the sessions counted, the bytes returned, the heap
// the collection left live, and how long it took.
func (r *releaser) swept(n int) {
	r.pending += n
	start := r.now()
	if r.pending < releaseLeast || !shouldRelease(r.pending, start.Sub(r.last), r.live()) {
		return
	}
	before := readMemory()
	r.free()
	after := readMemory()
	r.last = r.now()
	r.logger.Info("gave the memory of hibernated sessions back to the operating system",
		"hibernated", r.pending, "returned_bytes", int64(after.released)-int64(before.released),
		"heap_live_bytes", after.live, "took", r.last.Sub(start))
	r.pending = 0
}

// memory is what the runtime reports of its heap (bytes).
type memory struct {
	released uint64 // returned to the operating system and not reused
	live     uint64 // objects the last collection marked
}

// readMemory reads the runtime's figures (runtime/metrics).
func readMemory() memory {
	s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	var m memory
	if s[0].Value.Kind() == metrics.KindUint64 {
		m.released = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		m.live = s[1].Value.Uint64()
	}
	return m
}
