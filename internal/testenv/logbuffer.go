// A log sink tests read: the io.Writer of a slog handler.

package testenv

import (
	"bytes"
	"log/slog"
	"sync"
)

// LogBuffer collects the log lines of a component under test (as the
// io.Writer of a slog handler) for assertions; it is safe for the
// component's goroutines and the test's at once.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger returns a text logger writing to l whose lines carry no time,
// so that a test can compare them whole.
func (l *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}
