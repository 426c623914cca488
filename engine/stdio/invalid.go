package stdio

import (
	"log/slog"
	"sync"
	"time"
)

// reasonInvalidMessage is the reason of the log lines about lines a
// subprocess wrote to stdout that are not JSON-RPC messages; such lines are
// dropped and the session goes on.
const reasonInvalidMessage = "invalid_message"

const (
	// invalidInFull is how many invalid stdout lines of one subprocess are
	// logged each in its own line, clipped to invalidClip bytes; the rest
	// are only counted.
	invalidInFull = 5
	// invalidClip is how many bytes of an invalid line its log line holds.
	invalidClip = 200
	// invalidSummaryEvery is the shortest time between two summary lines
	// counting the invalid lines not logged in full (Engine.summaryEvery).
	invalidSummaryEvery = 10 * time.Second
)

// invalidLines rate-limits the warnings about one subprocess's stdout lines
// that are not JSON-RPC messages (MCP 2025-11-25, stdio: the server MUST NOT
// write anything else there): the first invalidInFull are logged in full;
// later ones are counted, and the count goes into a summary line at most
// once per interval (every) and once more when the subprocess ends. A
// server that writes nothing but such lines (`sh -c yes`) costs a handful
// of log lines, not one per line.
type invalidLines struct {
	logger *slog.Logger
	every  time.Duration

	mu      sync.Mutex
	total   int         // lines dropped since the subprocess started
	pending int         // lines dropped and in no log line yet
	timer   *time.Timer // logs the summary of pending; nil while none is due
	stopped bool        // the subprocess ended: no more summaries
}

// drop records that line, which failed to decode with err, was dropped.
func (l *invalidLines) drop(line []byte, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if l.total <= invalidInFull {
		l.logger.Warn("subprocess wrote a line to stdout that is not a JSON-RPC message; dropped",
			"reason", reasonInvalidMessage, "error", err, "line", clip(line, invalidClip), "dropped_total", l.total)
		return
	}
	l.pending++
	if l.timer == nil && !l.stopped {
		l.timer = time.AfterFunc(l.every, l.summary)
	}
}

// summary logs the count of the lines dropped since the last log line.
func (l *invalidLines) summary() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	if l.stopped || l.pending == 0 {
		return
	}
	l.logger.Warn(
		"subprocess keeps writing lines to stdout that are not JSON-RPC messages; dropped them "+
			"(the first ones are logged in full, the rest counted here)",
		"reason", reasonInvalidMessage, "dropped", l.pending, "dropped_total", l.total, "interval", l.every)
	l.pending = 0
}

// stop ends the summaries once the subprocess's stdout is drained: it logs
// the count of the lines dropped since the last log line, if any.
func (l *invalidLines) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.pending > 0 {
		l.logger.Warn("subprocess ended; it wrote lines to stdout that are not JSON-RPC messages, dropped since the last count",
			"reason", reasonInvalidMessage, "dropped", l.pending, "dropped_total", l.total)
		l.pending = 0
	}
}

// count returns how many lines have been dropped so far.
func (l *invalidLines) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}
