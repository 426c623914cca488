// deadline.go holds the write bound of the responses Tidemark does not
// write itself: those of Options.Sessionless.

package transport

import (
	"net/http"
	"time"
)

// deadlineWriter is an http.ResponseWriter that sets the connection's write
// deadline, timeout from now, before each write and flush, so that a client
// that does not read for timeout loses the connection, as on the streams
// Tidemark writes itself (sseWriter.writeLocked; Options.WriteTimeout).
// The failed write makes net/http cancel the request's context, which ends
// the handler. It keeps http.Flusher and, through Unwrap, the rest of
// http.ResponseController.
type deadlineWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func newDeadlineWriter(w http.ResponseWriter, timeout time.Duration) *deadlineWriter {
	return &deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

func (d *deadlineWriter) Header() http.Header { return d.w.Header() }

func (d *deadlineWriter) WriteHeader(status int) { d.w.WriteHeader(status) }

func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.w.Write(b)
}

// FlushError flushes the response under the deadline; http.ResponseController
// calls it first.
func (d *deadlineWriter) FlushError() error {
	d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.rc.Flush()
}

func (d *deadlineWriter) Flush() { d.FlushError() }

// Unwrap gives http.ResponseController the writer underneath.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.w }
