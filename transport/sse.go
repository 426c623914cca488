package transport

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// deadEngineGrace is how long a stream stays open after the engine session
// of its generation ended, for the answers the engine still appends.
const deadEngineGrace = time.Second

// setSSEHeaders sets the headers of an SSE response.
func setSSEHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	// nginx and compatible proxies buffer responses unless told not to.
	h.Set("X-Accel-Buffering", "no")
}

// sseWriter writes SSE frames (WHATWG HTML, "Server-sent events") to one
// response. Writes are serialized: the event loop, keep-alives and the
// shutdown notice share it.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	tag     string
	gen     uint64
	// att is the connection's hold on its stream: once a newer connection
	// has taken the stream over, every write is refused (errTakenOver).
	att *attachment

	unprimed bool // skip priming events (protocols before 2025-11-25)

	mu        sync.Mutex
	buf       []byte
	final     bool         // the final frame is written: nothing may follow it
	lastWrite atomic.Int64 // unix nanoseconds
}

func newSSEWriter(w http.ResponseWriter, timeout time.Duration, tag string, gen uint64, att *attachment) *sseWriter {
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: timeout, tag: tag, gen: gen, att: att}
	sw.lastWrite.Store(time.Now().UnixNano())
	return sw
}

// appendEvent renders e as one SSE event: its cursor as `id`, `retry` when
// set, and its JSON-RPC message as `data` (empty for priming and close).
func (sw *sseWriter) appendEvent(b []byte, e *store.Event) []byte {
	b = append(b, "id: "...)
	b = replay.Cursor{Tag: sw.tag, Generation: e.Generation, Stream: e.Stream, Sequence: e.Seq}.AppendText(b)
	b = append(b, '\n')
	if e.Retry > 0 {
		b = appendRetry(b, e.Retry)
	}
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

// writeEvents writes evs and flushes once. It reports whether the stream is
// over: an event marked End (the last response of a POST stream) or a
// close event (SEP-1699) was written. The events that end a stream are not
// flushed: the handler returns next, and net/http sends them with the end
// of the response in one write (a flush first would cost a write system
// call of its own).
func (sw *sseWriter) writeEvents(evs []store.Event) (over bool, err error) {
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
		b = sw.appendEvent(b, &evs[i])
		if evs[i].End || evs[i].Kind == store.KindClose {
			over = true
			break
		}
	}
	sw.buf = b
	if over {
		return true, sw.writeLocked(b)
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
// notice that tells the client to reconnect (regression: a progress event
// the reader had in hand was written after it).
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

// writeLocked writes b to the response's buffer without flushing it.
func (sw *sseWriter) writeLocked(b []byte) error {
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

// stream is one connection serving one stream of one session generation.
type stream struct {
	live   *session.Live
	stream uint64
	after  uint64 // the reader starts after this sequence
	// preamble is written before the first event: headers are sent with
	// it. For a resumed stream it is a priming event that echoes the
	// client's cursor.
	preamble []byte
	// unprimed: the client's protocol predates priming events (2025-11-25),
	// so the stream's opening event is not sent.
	unprimed bool
	// finished: the stream already ended at or before after; only the
	// preamble is written.
	finished bool
	// fresh: a new standalone stream; after is set by serve, once the
	// connection holds the stream (see start).
	fresh bool
}

// serve tails the stream and writes its events until the stream is over,
// the client goes away, a newer connection takes the stream over, the
// session or its generation ends, or the server shuts down. The response
// headers must be set (not written) by the caller.
func (h *Handler) serve(ctx context.Context, w http.ResponseWriter, s stream) {
	l := s.live
	key := streamKey{token: l.Token(), gen: l.Generation(), stream: s.stream}
	att, err := h.conns.attach(ctx, key)
	if err != nil {
		return
	}
	defer h.conns.detach(key, att)
	defer l.Attach()()
	if s.fresh {
		if s.after, err = h.start(ctx, l, s); err != nil {
			h.deliverError(l, err).write(w, h.logger)
			return
		}
	}

	sw := newSSEWriter(w, h.opts.WriteTimeout, l.Tag(), l.Generation(), att)
	sw.unprimed = s.unprimed
	w.WriteHeader(http.StatusOK)
	// The headers go out with the preamble, or, when there is none and
	// the stream's opening event (priming) is in the log already, with
	// the first events: the reader returns that event at once, so a flush
	// of the headers alone would only cost a write system call. A stream
	// without priming may wait long for its first event: its headers are
	// flushed now.
	if len(s.preamble) > 0 || s.unprimed || s.finished {
		if err := sw.writeRaw(s.preamble); err != nil || s.finished {
			return
		}
	}

	var helpers sync.WaitGroup
	defer helpers.Wait() // runs after cancel: no write after serve returns
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	helpers.Add(1)
	go func() {
		defer helpers.Done()
		h.watchStream(ctx, cancel, sw, att, l)
	}()

	rd := l.Reader(s.stream, s.after)
	for {
		evs, err := rd.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				l.Logger().Info("stream closed", "stream", s.stream, "reason", streamEndReason(err), "position", rd.Position())
			}
			return
		}
		over, err := sw.writeEvents(evs)
		if errors.Is(err, errTakenOver) {
			return
		}
		if err != nil {
			l.Logger().Info("stream write failed", "stream", s.stream, "reason", "client_gone", "error", err)
			return
		}
		if over {
			return
		}
	}
}

// start returns the position a new standalone stream's reader starts
// after: just before its priming event, appended now (2025-11-25 and
// later), or else the high-water mark. It runs once the connection holds
// the stream, so the connection it took over has stopped writing and no
// event after this position can reach both.
func (h *Handler) start(ctx context.Context, l *session.Live, s stream) (uint64, error) {
	if !s.unprimed {
		seq, err := l.Prime(ctx, s.stream, max(h.opts.Retry, 0))
		if err != nil {
			return 0, err
		}
		return seq - 1, nil
	}
	b, err := h.reg.Log().Bounds(ctx, l.Token())
	if err != nil {
		return 0, err
	}
	return b.HWM, nil
}

// watchStream ends a connection's context when a newer connection takes its
// stream over, when the session's live state ends, or at shutdown (after a
// final retry field); meanwhile it writes keep-alive comments.
func (h *Handler) watchStream(ctx context.Context, cancel context.CancelFunc, sw *sseWriter, att *attachment, l *session.Live) {
	engineDone := l.Done()
	var grace <-chan time.Time
	var tick <-chan time.Time
	if h.opts.KeepAlive > 0 {
		t := time.NewTicker(h.opts.KeepAlive / 2)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-att.kicked:
			cancel()
			return
		case <-engineDone:
			// The engine's live state ended; an engine may still append the
			// answers it owes (the stdio engine fails the calls its dead
			// subprocess left in flight). Let the stream deliver them, then
			// close it: nothing else will come for this generation.
			engineDone = nil
			t := time.NewTimer(deadEngineGrace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			cancel()
			return
		case <-h.shutdown:
			var b []byte
			if h.opts.Retry > 0 {
				b = appendRetry(b, h.opts.Retry)
				b = append(b, '\n')
			}
			sw.writeFinal(b)
			cancel()
			return
		case <-tick:
			if sw.idleFor() >= h.opts.KeepAlive {
				if sw.writeRaw([]byte(": keep-alive\n\n")) != nil {
					cancel()
					return
				}
				l.Touch()
			}
		}
	}
}

// streamEndReason names why a reader stopped, for logs.
func streamEndReason(err error) string {
	switch {
	case errors.Is(err, eventlog.ErrCompacted):
		return "cursor_compacted"
	case errors.Is(err, eventlog.ErrGenerationChanged):
		return "generation_mismatch"
	case errors.Is(err, store.ErrEnded), errors.Is(err, store.ErrNotFound):
		return "session_not_found"
	default:
		return "store_error"
	}
}
