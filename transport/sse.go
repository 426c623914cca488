// sse.go holds the writing of SSE frames (WHATWG HTML, "Server-sent
// events") to one response: the headers of an SSE response, events with
// their cursors as ids, and the writer that serializes a connection's
// writes and refuses them once the connection's stream is taken over.

package transport

import (
	"bytes"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// The values of the headers of every SSE response, shared by all of them:
// net/http only reads a response's header values (it copies them when the
// headers are written), and an append to a value of capacity one makes a
// new array.
var (
	sseContentType  = []string{mediaSSE}
	sseCacheControl = []string{"no-cache, no-transform"}
	// nginx and compatible proxies buffer responses unless told not to.
	sseAccelBuffering = []string{"no"}
)

// setSSEHeaders sets the headers of an SSE response. The keys are in
// canonical form (textproto.CanonicalMIMEHeaderKey), as Header.Set would
// write them.
func setSSEHeaders(h http.Header) {
	h["Content-Type"] = sseContentType
	h["Cache-Control"] = sseCacheControl
	h["X-Accel-Buffering"] = sseAccelBuffering
}

// sseWriter writes SSE frames (WHATWG HTML, "Server-sent events") to one
// response. Writes are serialized: the event loop, keep-alives and the
// shutdown notice share it.
type sseWriter struct {
	w       http.ResponseWriter
	rc      http.ResponseController
	timeout time.Duration
	tag     string
	gen     uint64
	// att is the connection's hold on its stream: once a newer connection
	// has taken the stream over, every write is refused (errTakenOver).
	att *attachment

	unprimed bool // skip priming events (protocols before 2025-11-25)

	mu        sync.Mutex
	buf       []byte
	small     [sseSmall]byte // buf's first array: a call's answer fits
	final     bool           // the final frame is written: nothing may follow it
	started   bool           // something was written: the status is sent
	lastWrite atomic.Int64   // unix nanoseconds
}

func newSSEWriter(w http.ResponseWriter, timeout time.Duration, tag string, gen uint64, att *attachment) *sseWriter {
	sw := &sseWriter{w: w, rc: *http.NewResponseController(w), timeout: timeout, tag: tag, gen: gen, att: att}
	sw.buf = sw.small[:0]
	sw.lastWrite.Store(time.Now().UnixNano())
	return sw
}

// sseSmall is the size (bytes) of the buffer an sseWriter starts with, in
// the same allocation: a priming event and a short answer fit in it, and
// larger ones grow it once.
const sseSmall = 512

// directData is the size (bytes) from which an event's message is written
// to the response as it is stored instead of being copied into the
// writer's buffer first: an answer of megabytes would otherwise be held
// twice while it is written.
const directData = 64 << 10

// appendHead renders the fields of e that precede its data: its cursor as
// `id`, and `retry` when set.
func (sw *sseWriter) appendHead(b []byte, e *store.Event) []byte {
	b = append(b, "id: "...)
	b = replay.Cursor{Tag: sw.tag, Generation: e.Generation, Stream: e.Stream, Sequence: e.Seq}.AppendText(b)
	b = append(b, '\n')
	if e.Retry > 0 {
		b = appendRetry(b, e.Retry)
	}
	return b
}

// appendEvent renders e as one SSE event: its cursor as `id`, `retry` when
// set, and its JSON-RPC message as `data` (empty for priming and close).
func (sw *sseWriter) appendEvent(b []byte, e *store.Event) []byte {
	b = sw.appendHead(b, e)
	if e.Kind != store.KindMessage || len(e.Data) == 0 {
		return append(b, "data:\n\n"...)
	}
	// A JSON-RPC message encodes without raw newlines; split defensively so
	// a line break in data can never end the event early.
	data := e.Data
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		b = append(b, "data: "...)
		b = append(b, bytes.TrimSuffix(data[:i], []byte{'\r'})...)
		b = append(b, '\n')
		data = data[i+1:]
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	return append(b, '\n', '\n')
}

func appendRetry(b []byte, d time.Duration) []byte {
	b = append(b, "retry: "...)
	b = strconv.AppendInt(b, d.Milliseconds(), 10)
	return append(b, '\n')
}

// writeEvents writes evs and flushes once, unless hold is set. It reports
// whether the stream is over: an event marked End (the last response of a
// POST stream) or a close event (SEP-1699) was written. The events that end
// a stream are not flushed: the handler returns next, and net/http sends
// them with the end of the response in one write (a flush first would cost
// a write system call of its own). With hold, events that do not end the
// stream stay in the response's buffer too, for the caller to flush (see
// (*Handler).serve, coalesceWindow).
func (sw *sseWriter) writeEvents(evs []store.Event, hold bool) (over bool, err error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.final {
		return true, nil
	}
	if sw.att.isKicked() {
		return true, errTakenOver
	}
	b := sw.buf[:0]
	for i := range evs {
		if sw.unprimed && evs[i].Kind == store.KindPriming {
			if evs[i].End { // a stream's end marker (Live.ReleaseCalls)
				over = true
				break
			}
			continue
		}
		if e := &evs[i]; e.Kind == store.KindMessage && len(e.Data) >= directData && bytes.IndexByte(e.Data, '\n') < 0 {
			// One data line, written from the event itself.
			b = append(sw.appendHead(b, e), "data: "...)
			if err := sw.writeLocked(b); err != nil {
				return false, err
			}
			if err := sw.writeLocked(e.Data); err != nil {
				return false, err
			}
			b = append(b[:0], '\n', '\n')
		} else {
			b = sw.appendEvent(b, e)
		}
		if evs[i].End || evs[i].Kind == store.KindClose {
			over = true
			break
		}
	}
	sw.buf = b
	if over || hold {
		return over, sw.writeLocked(b)
	}
	return false, sw.flushLocked(b)
}

// writeRaw writes pre-rendered frames and flushes, unless the final frame
// is written already.
func (sw *sseWriter) writeRaw(b []byte) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.final {
		return nil
	}
	if sw.att.isKicked() {
		return errTakenOver
	}
	return sw.flushLocked(b)
}

// writeFinal writes the stream's last frame (the shutdown notice) and
// flushes it; every later write is dropped, so no event can follow the
// notice that tells the client to reconnect, not even one the reader has
// in hand.
func (sw *sseWriter) writeFinal(b []byte) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.final {
		return nil
	}
	sw.final = true
	if sw.att.isKicked() {
		return errTakenOver // the newer connection sends its own notice
	}
	return sw.flushLocked(b)
}

func (sw *sseWriter) flushLocked(b []byte) error {
	if err := sw.writeLocked(b); err != nil {
		return err
	}
	return sw.rc.Flush()
}

// wrote reports whether something was written: the status is sent.
func (sw *sseWriter) wrote() bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.started
}

// refuseUnstarted reports whether nothing was written yet, and then
// refuses every later write, so that the caller may answer with a refusal
// instead of 200 and a stream.
func (sw *sseWriter) refuseUnstarted() bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.started {
		return false
	}
	sw.final = true
	return true
}

// writeLocked writes b to the response's buffer without flushing it.
func (sw *sseWriter) writeLocked(b []byte) error {
	sw.started = true
	now := time.Now()
	sw.rc.SetWriteDeadline(now.Add(sw.timeout))
	if _, err := sw.w.Write(b); err != nil {
		return err
	}
	sw.lastWrite.Store(now.UnixNano())
	return nil
}

// idleFor returns how long ago the last write was.
func (sw *sseWriter) idleFor() time.Duration {
	return time.Since(time.Unix(0, sw.lastWrite.Load()))
}
