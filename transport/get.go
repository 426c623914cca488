package transport

import (
	"errors"
	"net/http"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// resumes numbers the priming events of resumed streams: the resume part of
// their ids (replay.Cursor). One counter serves the whole process, and a
// session generation is served by one process (its owner), so no two
// priming events of one generation share a number.
var resumes atomic.Uint64

// serveGET opens the standalone stream, or resumes any stream of the
// session after the cursor in Last-Event-ID, as the replay decision allows
// (DESIGN.md, "The replay decision").
func (h *Handler) serveGET(w http.ResponseWriter, r *http.Request, version string) {
	if !accepts(r, "text/event-stream") {
		refuse(http.StatusNotAcceptable, ReasonNotAcceptable, "GET must accept text/event-stream").write(w, h.logger)
		return
	}
	token, herr := sessionID(r)
	if herr != nil {
		herr.write(w, h.logger)
		return
	}
	cursors, resuming := r.Header["Last-Event-Id"]
	if token == "" {
		// Row 1 of the decision table, and the rule for a plain GET.
		refuse(http.StatusBadRequest, ReasonSessionRequired, "Mcp-Session-Id header is required on GET").write(w, h.logger)
		return
	}
	ctx := r.Context()
	userID := ""
	if ti := auth.TokenInfoFromContext(ctx); ti != nil {
		userID = ti.UserID
	}
	// Get re-creates the live state when no live process holds it, so the
	// decision compares the cursor with the generation that serves now. A
	// session another replica owns is decided and served there.
	live, err := h.resolve(w, r, token, userID, nil)
	status := replay.Live
	switch {
	case errors.Is(err, errServed):
		return
	case err == nil:
	case errors.Is(err, session.ErrForbidden):
		h.registryError(err).write(w, h.logger)
		return
	case errors.Is(err, session.ErrNotFound):
		status = replay.Unknown
	case errors.Is(err, store.ErrEnded):
		status = replay.Evicted
		var ended *store.EndedError
		if errors.As(err, &ended) && ended.Reason == store.EndSuperseded {
			status = replay.Superseded
		}
	default:
		h.registryError(err).write(w, h.logger)
		return
	}
	if version == "" && live != nil {
		version = live.ProtocolVersion()
	}
	primed := version >= V20251125

	if !resuming {
		if live == nil {
			h.registryError(err).write(w, h.logger)
			return
		}
		// The stream's starting point is taken in serve once this connection
		// holds the stream, so that a connection it takes over never sees
		// (and writes) this one's priming event.
		s := stream{live: live, stream: replay.StandaloneStream, fresh: true, unprimed: !primed}
		setSSEHeaders(w.Header())
		h.serve(ctx, w, s)
		return
	}

	in := replay.Input{HasSessionID: true, Session: replay.Session{Status: status}}
	if len(cursors) == 1 {
		in.LastEventID = cursors[0]
	} else {
		in.LastEventID = "" // repeated Last-Event-ID: not one cursor
	}
	if live != nil {
		b, err := h.reg.Log().Bounds(ctx, token)
		if err != nil {
			h.deliverError(live, err).write(w, h.logger)
			return
		}
		// Should the session be re-created between Get and Bounds, the
		// reader of the replay finds the new generation and closes.
		in.Session = replay.Session{Status: replay.Live, Tag: live.Tag(), Generation: live.Generation(), Floor: b.Floor, HWM: b.HWM}
	}
	d := replay.Decide(in)
	if len(cursors) > 1 && d.Outcome == replay.CursorMalformed {
		d.Detail = "the Last-Event-ID header is repeated: send one cursor"
	}
	var at store.Event // the event the cursor names
	if d.Outcome == replay.NeedEvent {
		ev, found, err := h.reg.Log().At(ctx, token, d.Cursor.Sequence)
		if err != nil {
			h.deliverError(live, err).write(w, h.logger)
			return
		}
		at = ev
		in.At = &replay.EventAt{Found: found, Stream: ev.Stream}
		d = replay.Decide(in)
	}
	if d.Outcome != replay.Replay {
		herr := refuse(d.Outcome.HTTPStatus(), string(d.Outcome.Reason()), d.Message())
		herr.data = d.Data()
		if live != nil {
			live.Logger().Info("resume refused", "reason", d.Outcome.Reason(), "cursor", clip(in.LastEventID),
				"status", d.Outcome.HTTPStatus())
			herr.logged = true // one line per refusal (regression: 409s were logged twice)
		}
		herr.write(w, h.logger)
		return
	}

	// A cursor naming the last event of a finished stream has nothing after
	// it: the resumed stream is the priming event alone, then the end.
	s := stream{live: live, stream: d.Cursor.Stream, after: d.Cursor.Sequence, finished: at.End}
	if primed {
		// The priming event of a resumed stream names the client's position
		// with a resume part no other priming event carries (replay.Cursor):
		// its id is new, as every event id of a session must be, and a
		// client whose connection breaks before the next event resumes with
		// it from the same place.
		c := d.Cursor
		c.Resume = resumes.Add(1)
		s.preamble = c.AppendText(append(make([]byte, 0, 128), "id: "...))
		s.preamble = append(s.preamble, '\n')
		if h.opts.Retry > 0 {
			s.preamble = appendRetry(s.preamble, h.opts.Retry)
		}
		s.preamble = append(s.preamble, "data:\n\n"...)
	}
	live.Logger().Info("stream resumed", "stream", d.Cursor.Stream, "cursor", in.LastEventID)
	setSSEHeaders(w.Header())
	h.serve(ctx, w, s)
}

// serveDELETE ends the session (MCP 2025-11-25, "Session Management"); the
// token then answers 404.
func (h *Handler) serveDELETE(w http.ResponseWriter, r *http.Request) {
	token, herr := sessionID(r)
	if herr != nil {
		herr.write(w, h.logger)
		return
	}
	if token == "" {
		refuse(http.StatusBadRequest, ReasonSessionRequired, "Mcp-Session-Id header is required on DELETE").write(w, h.logger)
		return
	}
	ctx := r.Context()
	status, rec, err := h.reg.Status(ctx, token)
	if err != nil {
		h.registryError(err).write(w, h.logger)
		return
	}
	if status != replay.Live {
		h.registryError(session.ErrNotFound).write(w, h.logger)
		return
	}
	userID := ""
	if ti := auth.TokenInfoFromContext(ctx); ti != nil {
		userID = ti.UserID
	}
	if rec.UserID != "" && rec.UserID != userID {
		h.registryError(session.ErrForbidden).write(w, h.logger)
		return
	}
	if err := h.reg.End(ctx, token, store.EndDeleted); err != nil && !errors.Is(err, store.ErrEnded) {
		h.registryError(err).write(w, h.logger)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
