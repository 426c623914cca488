// deadline.go holds the write bound and the keep-alive of the responses
// Tidemark does not write itself: those of Options.Sessionless.

package transport

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// deadlineWriter is an http.ResponseWriter that sets the connection's write
// deadline, timeout from now, before each write and flush, so that a client
// that does not read for timeout loses the connection, as on the streams
// Tidemark writes itself (sseWriter.writeLocked; Options.WriteTimeout).
// The failed write makes net/http cancel the request's context, which ends
// the handler. It keeps http.Flusher and, through Unwrap, the rest of
// http.ResponseController. Its writes are serialized, so that keepAlive
// may write between the handler's.
type deadlineWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration

	mu        sync.Mutex
	sse       bool      // the answer is an event stream (set at its first write)
	started   bool      // the status line is written
	lineStart bool      // the last byte written ends a line
	last      time.Time // when the last write was
	timedOut  bool      // a write or flush waited timeout and failed
}

func newDeadlineWriter(w http.ResponseWriter, timeout time.Duration) *deadlineWriter {
	return &deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

func (d *deadlineWriter) Header() http.Header { return d.w.Header() }

func (d *deadlineWriter) WriteHeader(status int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.startLocked()
	d.w.WriteHeader(status)
}

// startLocked notes, at the answer's first write, whether it is an event
// stream: the handler sets its headers before, on its own goroutine.
func (d *deadlineWriter) startLocked() {
	if !d.started {
		d.started = true
		d.sse = strings.HasPrefix(d.w.Header().Get("Content-Type"), mediaSSE)
		d.lineStart = true
	}
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writeLocked(b)
}

func (d *deadlineWriter) writeLocked(b []byte) (int, error) {
	d.startLocked()
	now := time.Now()
	d.rc.SetWriteDeadline(now.Add(d.timeout))
	n, err := d.w.Write(b)
	if n > 0 {
		d.lineStart = b[n-1] == '\n'
		d.last = now
	}
	d.noteLocked(err)
	return n, err
}

// noteLocked records that err, the error of a write or flush, is the
// write deadline's: the client took nothing for timeout.
func (d *deadlineWriter) noteLocked(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		d.timedOut = true
	}
}

// cutByDeadline reports whether a write or flush failed at the write
// deadline, which ended the answer.
func (d *deadlineWriter) cutByDeadline() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.timedOut
}

// FlushError flushes the response under the deadline; http.ResponseController
// calls it first.
func (d *deadlineWriter) FlushError() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.flushLocked()
}

func (d *deadlineWriter) flushLocked() error {
	d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	err := d.rc.Flush()
	d.noteLocked(err)
	return err
}

func (d *deadlineWriter) Flush() { d.FlushError() }

// Unwrap gives http.ResponseController the writer underneath.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.w }

// keepAliveComment is the SSE comment line an idle stream gets: one line,
// so that it may come between two lines of an event without ending it
// (WHATWG HTML, "Server-sent events": a line starting with a colon is
// ignored).
var keepAliveComment = []byte(": keep-alive\n")

// keepAlive writes keepAliveComment to an event stream that has been idle
// for interval, as Tidemark's own streams get (Options.KeepAlive), so that
// proxies with idle timeouts keep a quiet subscriptions/listen stream
// open; only at a line's end, never inside one. It returns the function
// that stops it, after which it writes nothing; interval zero or less:
// none.
func (d *deadlineWriter) keepAlive(interval time.Duration) (stop func()) {
	if interval <= 0 {
		return func() {}
	}
	// A timer, not a goroutine with a ticker: a quiet stream holds no
	// goroutine of its own between looks, and every open listen stream
	// would hold one for its life. A look runs under d.mu, which stop
	// takes too, so none writes once stop has returned.
	var (
		t       *time.Timer
		stopped bool
	)
	look := func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if stopped {
			return
		}
		if d.sse && d.lineStart && time.Since(d.last) >= interval {
			if _, err := d.writeLocked(keepAliveComment); err == nil {
				d.flushLocked()
			}
		}
		t.Reset(interval / 2)
	}
	d.mu.Lock()
	t = time.AfterFunc(interval/2, look)
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		stopped = true
		t.Stop()
	}
}
