package stdio

// This file holds the limits on logging a subprocess's lines: stdout lines
// that are not JSON-RPC, and stderr lines.

import (
	"log/slog"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
)

// The two kinds of subprocess lines whose logging is limited: stdout lines
// that are not JSON-RPC messages (MCP 2025-11-25, stdio: the server MUST
// NOT write anything else there), dropped; and stderr lines, the server's
// own log. A server that writes either without end (`sh -c yes`,
// `sh -c 'yes >&2'`) costs a handful of log lines, not one per line.
const (
	// invalidInFull is how many invalid stdout lines of one subprocess
	// are logged in full, over its whole life; the rest are counted.
	invalidInFull = 5
	// invalidClip is how many bytes of an invalid line its log line holds.
	invalidClip = 200
	// invalidSummaryEvery is the shortest time between two count lines of
	// invalid stdout lines (Engine.summaryEvery).
	invalidSummaryEvery = 10 * time.Second
	// stderrLinesPerSecond is how many stderr lines of one subprocess are
	// logged in any one-second window; the rest are counted, at most one
	// count line a second.
	stderrLinesPerSecond = 100
)

// lineLimiter decides which of a subprocess's lines of one kind are logged
// in full: the first full of each window (window 0: of the subprocess's
// life). The others are counted, and the count goes into a line of its own
// at most once per every, and once more at stop. Safe for concurrent use.
type lineLimiter struct {
	logger   *slog.Logger
	full     int
	window   time.Duration
	every    time.Duration
	reason   replay.Reason
	countMsg string // the periodic count line
	endMsg   string // the count line at stop
	// countKey and totalKey name the attributes of the count lines: the
	// lines counted since the last one, and all lines seen.
	countKey, totalKey string

	mu       sync.Mutex
	total    int         // lines seen since the subprocess started
	inWindow int         // lines logged in full in the current window
	start    time.Time   // of the current window
	pending  int         // lines counted and in no log line yet
	timer    *time.Timer // logs the count of pending; nil while none is due
	stopped  bool        // the subprocess ended: no more count lines
}

func newInvalidLimiter(logger *slog.Logger, every time.Duration) *lineLimiter {
	return &lineLimiter{logger: logger, full: invalidInFull, every: every, reason: replay.ReasonInvalidMessage,
		countKey: "dropped", totalKey: "dropped_total",
		countMsg: "subprocess keeps writing lines to stdout that are not JSON-RPC messages; dropped them " +
			"(the first ones are logged in full, the rest counted here)",
		endMsg: "subprocess ended; it wrote lines to stdout that are not JSON-RPC messages, dropped since the last count"}
}

func newStderrLimiter(logger *slog.Logger) *lineLimiter {
	return &lineLimiter{logger: logger, full: stderrLinesPerSecond, window: time.Second, every: time.Second, reason: replay.ReasonStderrFlood,
		countKey: "suppressed", totalKey: "lines_total",
		countMsg: "subprocess stderr: lines not logged (more than 100 in a second)",
		endMsg:   "subprocess stderr ended: lines not logged (more than 100 in a second)"}
}

// next counts one line and reports whether the caller logs it in full,
// with the count of lines seen so far, this one included.
func (l *lineLimiter) next() (full bool, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if now := time.Now(); l.window > 0 && now.Sub(l.start) >= l.window {
		l.start, l.inWindow = now, 0
	}
	if l.inWindow < l.full {
		l.inWindow++
		return true, l.total
	}
	l.pending++
	if l.timer == nil && !l.stopped {
		l.timer = time.AfterFunc(l.every, l.summary)
	}
	return false, l.total
}

// summary logs the count of the lines counted since the last count line.
func (l *lineLimiter) summary() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	if l.stopped || l.pending == 0 {
		return
	}
	l.logger.Warn(l.countMsg, "reason", l.reason, l.countKey, l.pending, l.totalKey, l.total, "interval", l.every)
	l.pending = 0
}

// stop ends the count lines once the subprocess's output is drained,
// logging the count of lines counted since the last count line, if any.
func (l *lineLimiter) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.pending > 0 {
		l.logger.Warn(l.endMsg, "reason", l.reason, l.countKey, l.pending, l.totalKey, l.total)
		l.pending = 0
	}
}

// seen returns how many lines have been counted so far.
func (l *lineLimiter) seen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}
