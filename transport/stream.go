// stream.go holds the serving of one stream on one connection: the reader
// that tails the stream's events from the log (replay, then live), the
// connection's hold on the stream (attach.go), keep-alives, and the ends
// of a stream: its last event, a takeover, the end of its generation, and
// shutdown, which first delivers what the log holds.

package transport

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// deadEngineGrace is how long a stream stays open after the engine session
// of its generation ended, for the answers the engine still appends.
const deadEngineGrace = time.Second

// coalesceWindow is how long a POST stream holds what it writes first (its
// headers, its priming event) for the events that follow: an engine that
// answers at once, from its own goroutine, appends the answer within
// microseconds of the stream's start, and the headers, the priming event
// and the answer then leave in one write system call instead of two. A
// slower call's client gets its priming event (and its cursor) at most this
// much later.
const coalesceWindow = 2 * time.Millisecond

// stream is one connection serving one stream of one session generation.
type stream struct {
	live   *session.Live
	stream uint64
	after  uint64 // the reader starts after this sequence
	// preamble is written before the first event: headers are sent with
	// it. For a resumed stream it is the priming event that names the
	// client's cursor under a new id (resumePriming).
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
	// kind labels the stream in metrics.
	kind metrics.StreamKind
	// calls are the ids of a POST stream's calls, handed to the engine
	// before the stream is served; nil for a GET stream and for an
	// initialize, which sending again cannot run twice (answerUnstored).
	calls session.RequestIDs
	// opening is a POST stream's opening event (priming) as it was
	// stored, until the first events are written: when retention trims it
	// before it was written, serve writes it from here (nil: not primed).
	opening *store.Event
	// cursor is the client's cursor of a resumed stream.
	cursor replay.Cursor
	// replay measures a resumed stream's replay (replayed.go).
	replay replayed
}

// serve tails the stream and writes its events until the stream is over,
// the client goes away, a newer connection takes the stream over, the
// session or its generation ends, or the server shuts down. It sets the
// headers of an SSE response first. It returns a refusal
// only when a new standalone stream cannot be started (its priming event
// cannot be stored), before anything is written. A connection taken over
// before it could serve writes nothing: the client sees a stream that
// ends at once.
func (h *Handler) serve(ctx context.Context, w http.ResponseWriter, s stream) *refusal {
	setSSEHeaders(w.Header())
	l := s.live
	key := streamKey{token: l.Token(), gen: l.Generation(), stream: s.stream}
	att, err := h.conns.attach(ctx, key)
	if err != nil {
		return nil
	}
	defer h.conns.detach(key, att)
	defer l.Attach()()
	if s.fresh {
		if s.after, err = h.start(ctx, l, s); err != nil {
			return deliveryRefusal(l, err)
		}
	}

	sw := newSSEWriter(w, h.opts.WriteTimeout, l.Tag(), l.Generation(), att)
	sw.unprimed = s.unprimed
	// The status (200) goes out with the first write, so that a stream
	// whose first event could never be stored is refused instead (503).
	h.opts.Metrics.StreamOpened(s.kind)
	defer h.opts.Metrics.StreamClosed(s.kind)
	s.replay.check(h.opts.Metrics, s.after)
	// The headers go out with the preamble, or, when there is none and
	// the stream's opening event (priming) is in the log already, with
	// the first events: the reader returns that event at once, so a flush
	// of the headers alone would only cost a write system call. A POST
	// stream holds its headers and what it writes during its first
	// coalesceWindow (flushBy), and flushes them with the event that ends
	// it or at the window's end, whichever comes first. Any other stream
	// without priming may wait long for its first event: its headers are
	// flushed now.
	coalesce := s.kind == metrics.StreamPost && len(s.preamble) == 0 && !s.finished
	if len(s.preamble) > 0 || (s.unprimed && !coalesce) || s.finished {
		if err := sw.writeRaw(s.preamble); err != nil || s.finished {
			return nil
		}
	}
	var flushBy time.Time // non-zero: writes are held until then
	if coalesce {
		flushBy = time.Now().Add(coalesceWindow)
	}

	// The watcher (watchStream: takeover, the engine's end, shutdown,
	// keep-alives) and the context it cancels start before the first read
	// that may wait for new events longer than the coalescing window. A
	// POST stream answered within its window ends before that: the read
	// of its opening event waits only for the store to hold that event,
	// its later reads are bounded by the window, and a takeover meanwhile
	// is still seen by the writer (errTakenOver).
	var helpers sync.WaitGroup
	defer helpers.Wait() // runs after cancel: no write after serve returns
	reqCtx := ctx
	var cancel context.CancelFunc // non-nil once the watcher runs
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	watch := func() {
		ctx, cancel = context.WithCancel(reqCtx)
		helpers.Add(1)
		go func(ctx context.Context, cancel context.CancelFunc) {
			defer helpers.Done()
			h.watchStream(ctx, cancel, sw, att, l)
		}(ctx, cancel)
	}
	var window context.Context // reqCtx until flushBy, made on the first wait
	var stopWindow context.CancelFunc
	defer func() {
		if stopWindow != nil {
			stopWindow()
		}
	}()

	rd := l.Reader(s.stream, s.after)
	for {
		var evs []store.Event
		var err error
		switch {
		case s.opening != nil:
			// The opening event is in the log, appended before the
			// stream started: the read returns once the store holds it,
			// and nothing is written before it (so that a stream whose
			// events were never stored is still refused). It is not
			// bounded by the window: a pipelined store (store/redis)
			// holds the event back for up to store.LingerMax and stores
			// it in a round trip of its own, so the window often ends
			// while the read is a command in flight, and a command that
			// its context's deadline cancels costs Redis its connection
			// (a new one, HELLO and CLIENT SETNAME) and the read a second
			// round trip. Once it returns after the window's end, its
			// events are written at once (flushBy is cleared below).
			evs, err = rd.Next(ctx)
		case cancel == nil && !flushBy.IsZero():
			// Within the window: the next events, or else a wait until
			// the window's end.
			var expired bool
			evs, expired, err = nextWithin(ctx, rd, &window, &stopWindow, flushBy)
			if expired {
				// Nothing more came in the window: the headers and the
				// priming event go out now.
				watch()
				flushBy = time.Time{}
				if sw.writeRaw(nil) != nil {
					return nil
				}
				continue
			}
		default:
			if cancel == nil {
				watch()
			}
			evs, err = rd.Next(ctx)
		}
		if err != nil && s.opening != nil && errors.Is(err, eventlog.ErrCompacted) {
			// Retention trimmed the opening event before it was written
			// (an answer larger than the session's retention followed it
			// at once, and the newest event is the one kept). It was
			// stored, so it is written as it was appended, and the reader
			// goes on after it: the client gets the answer, and a cursor.
			evs, err = []store.Event{*s.opening}, nil
			rd = l.Reader(s.stream, s.opening.Seq)
		}
		s.opening = nil
		if err != nil {
			if lost := h.unstored(reqCtx, l, sw, err); lost != nil {
				if len(s.calls) > 0 {
					h.answerUnstored(l, s.calls, lost, sw)
					return nil
				}
				if sw.refuseUnstarted() {
					return deliveryRefusal(l, lost)
				}
			}
			switch {
			case h.shuttingDown():
				h.endAtShutdown(l, rd, sw)
			case ctx.Err() == nil:
				l.Logger().Info("stream closed", "stream", s.stream, "reason", streamEndReason(err), "position", rd.Position())
				h.endDeleted(l, s.stream, rd.Position(), sw)
			}
			return nil
		}
		if !flushBy.IsZero() && !time.Now().Before(flushBy) {
			flushBy = time.Time{}
		}
		over, err := sw.writeEvents(evs, !flushBy.IsZero())
		s.replay.count(h.opts.Metrics, evs, rd.Position())
		if err != nil && !errors.Is(err, errTakenOver) {
			l.Logger().Info("stream write failed", "stream", s.stream, "reason", replay.ReasonClientGone, "error", err)
		}
		if err != nil || over {
			return nil
		}
	}
}

// nextWithin returns the stream's next events, waiting for them until by:
// expired reports that none came by then (and ctx is not done), the Reader
// staying where it was. The deadline's context is made once per stream and
// kept in *window (its cancel in *stop) for the stream's later reads before
// by. Each read is one store read, a round trip with Redis or a Pebble
// read with --data-dir, so nothing reads the log before it: the read
// that waits returns at once what the log already holds.
func nextWithin(ctx context.Context, rd *eventlog.Reader, window *context.Context, stop *context.CancelFunc, by time.Time) (evs []store.Event, expired bool, err error) {
	if *window == nil {
		*window, *stop = context.WithDeadline(ctx, by)
	}
	evs, err = rd.Next(*window)
	if err != nil && ctx.Err() == nil && (*window).Err() != nil {
		return nil, true, nil
	}
	return evs, false, err
}

// unstored returns why the events of a stream whose reader stopped with
// err before anything was written could not be stored (the store's
// *store.LostError; the store unavailable; the session's end): a GET
// stream is then refused (503 unavailable, or 404) and may be opened
// again, and a POST stream's calls are answered with the loss
// (answerUnstored). The reader may stop with the loss itself, or first
// see the session's generation dropped for it; the store's Sync tells
// which. It returns nil, and the stream ends, when the client went away,
// the server shuts down, something was written, or nothing was lost.
func (h *Handler) unstored(reqCtx context.Context, l *session.Live, sw *sseWriter, err error) error {
	if reqCtx.Err() != nil || h.shuttingDown() || sw.wrote() {
		return nil
	}
	if !errors.Is(err, store.ErrLost) {
		ctx, cancel := context.WithTimeout(reqCtx, h.opts.WriteTimeout)
		defer cancel()
		if err = h.reg.Log().Sync(ctx, l.Token()); err == nil || ctx.Err() != nil {
			return nil
		}
	}
	return err
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

// endAtShutdown ends a stream when the server shuts down: it writes the
// stream's events the log holds already (the answers of the calls Drain
// let finish, which may be appended but not yet written), then, unless
// the stream is over, a final retry field that tells the client to
// reconnect (to this process after a restart, or to another replica). It
// takes at most the write timeout.
func (h *Handler) endAtShutdown(l *session.Live, rd *eventlog.Reader, sw *sseWriter) {
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.WriteTimeout)
	defer cancel()
	h.reg.Log().Sync(ctx, l.Token()) // what was appended becomes readable, or never will
	if b, err := h.reg.Log().Bounds(ctx, l.Token()); err == nil {
		for {
			evs, err := rd.NextUpTo(ctx, b.HWM)
			if err != nil || len(evs) == 0 {
				break
			}
			if over, err := sw.writeEvents(evs, false); over || err != nil {
				return
			}
		}
	}
	var b []byte
	if h.opts.Retry > 0 {
		b = appendRetry(b, h.opts.Retry)
		b = append(b, '\n')
	}
	sw.writeFinal(b)
}

// endDeleted ends a stream whose reader stopped with an error after
// sequence after because its client ended the session with DELETE: each
// request of the stream not answered by then gets its JSON-RPC error
// (deletedAnswers) in an event with no id, which cannot be resumed, as
// the stream's last frame.
func (h *Handler) endDeleted(l *session.Live, stream, after uint64, sw *sseWriter) {
	answers := h.deletedAnswers(l, stream, after, nil)
	if len(answers) == 0 {
		return
	}
	sw.writeFinal(dataFrames(answers))
}

// watchStream ends a connection's context when a newer connection takes its
// stream over, when the session's live state ends, or at shutdown (the
// stream then ends with endAtShutdown); meanwhile it writes keep-alive
// comments.
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
func streamEndReason(err error) replay.Reason {
	switch {
	case errors.Is(err, eventlog.ErrCompacted):
		return replay.ReasonCursorCompacted
	case errors.Is(err, eventlog.ErrGenerationChanged):
		return replay.ReasonGenerationMismatch
	case errors.Is(err, store.ErrLost):
		return replay.ReasonGenerationLost
	case errors.Is(err, store.ErrEnded), errors.Is(err, store.ErrNotFound):
		return replay.ReasonSessionNotFound
	default:
		return replay.ReasonStoreError
	}
}
