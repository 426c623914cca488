// resume.go holds the resume request kind: a GET with Last-Event-ID, which
// continues any stream of the session after the cursor, as the replay
// decision allows (DESIGN.md, "The replay decision"; MCP 2025-11-25,
// "Resumability and Redelivery").

package transport

import (
	"errors"
	"net/http"
	"time"

	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// serveResume resumes the stream the cursor in Last-Event-ID names. Its
// checks run in the order of the decision table: the header rules of a
// GET (getRules: 406, 400 session_id_invalid, then row 1, 400
// session_required), then rows 2 to 7 as replay.Decide applies them to
// the session the lookup found (404 session_not_found, 400
// cursor_malformed, 409 generation_mismatch, 409 cursor_compacted, 400
// cursor_ahead, 400 cursor_malformed), with the lookup's own refusals
// (403, 503) in row 2's place; a session found first refuses a header
// naming another version than it negotiated (sessionVersion: 400
// protocol_version), whose resumed stream would not have its shape. The lookup re-creates the session's live
// state at generation+1 when no live process holds it, so the decision
// compares the cursor with the generation that serves now; a session
// another replica owns is decided and served there. A session whose live
// state is not held here is judged on its record before it is woken or
// re-created (resumeCheck: the version, then a cursor that row 3 refuses
// by itself), and a resume refused so wakes nothing.
//
// Every resume answered here is counted by its outcome (Options.Metrics:
// replay, or the refusal's reason) and, past the header rules, traced as
// a "resume" span.
func (h *Handler) serveResume(w http.ResponseWriter, r *http.Request, hdr headers) *refusal {
	if hdr.get != nil {
		h.opts.Metrics.Resumed(hdr.get.reason)
		return hdr.get
	}
	ctx, span := h.opts.Tracer.StartResume(r.Context(), r.Header, hdr.token, hdr.cursors[0])
	r = r.WithContext(ctx)
	live, forwarded, err := h.lookup(w, r, hdr.token, nil, h.resumeCheck(hdr))
	if forwarded {
		span.End(nil) // served by the session's owner, which counts it
		return nil
	}
	s, ref := h.resume(r, hdr, live, err)
	outcome := replay.ReasonReplay
	if ref != nil {
		outcome = ref.reason
	}
	h.opts.Metrics.Resumed(outcome)
	span.EndResume(outcome)
	if ref != nil {
		return ref
	}
	s.live.Logger().Info("stream resumed", "stream", s.stream, "cursor", hdr.cursors[0])
	return h.serve(ctx, w, s)
}

// resume applies the replay decision to the resume hdr asks for, on the
// session the lookup found (live, or the lookup's error err), and returns
// the stream to serve, opening with its priming event under 2025-11-25
// and later, or the refusal.
func (h *Handler) resume(r *http.Request, hdr headers, live *session.Live, err error) (stream, *refusal) {
	version := hdr.version
	if err == nil {
		var ref *refusal
		if version, ref = sessionVersion(live, hdr.version); ref != nil {
			return stream{}, ref
		}
	}
	in, ref := h.replayInput(r, hdr, live, err)
	if ref != nil {
		return stream{}, ref
	}
	d, at, ref := h.decide(r, hdr.token, live, in, len(hdr.cursors) > 1)
	if ref != nil {
		return stream{}, ref
	}
	switch {
	case d.Outcome == replay.CursorAhead:
		// The store lost events it had confirmed, or the cursor was made
		// up: no id above the high-water mark is issued again in this
		// generation.
		live.EndAhead(d.Cursor, in.Session.HWM)
	case d.Outcome == replay.GenerationMismatch && d.Cursor.Generation > in.Session.Generation:
		// The same for a generation the store never issued as it stands:
		// the session continues above the cursor's.
		live.EndAbove(d.Cursor, in.Session.HWM)
	}
	if d.Outcome != replay.Replay {
		return stream{}, resumeRefusal(live, d, in.LastEventID)
	}
	// A cursor naming the last event of a finished stream has nothing after
	// it: the resumed stream is the priming event alone, then the end, and
	// its replay is over at once.
	s := stream{
		live: live, stream: d.Cursor.Stream, after: d.Cursor.Sequence, finished: at.End,
		cursor: d.Cursor, kind: metrics.StreamResumed,
		replay: replayed{to: in.Session.HWM, at: time.Now()},
	}
	if at.End {
		s.replay.to = s.after
	}
	if version >= V20251125 {
		n, err := live.NextResume(r.Context())
		if err != nil {
			return stream{}, deliveryRefusal(live, err)
		}
		s.preamble = h.resumePriming(s.cursor, n)
	}
	return s, nil
}

// replayInput returns what the decision reads: the cursor, the one value
// of the Last-Event-ID header (none when it is repeated), and the session
// as the lookup found it (live, with its generation and bounds) or as the
// registry knows the token when the lookup did not find it (err). It
// returns the refusal instead when the request is refused for another
// reason.
func (h *Handler) replayInput(r *http.Request, hdr headers, live *session.Live, err error) (*replay.Input, *refusal) {
	in := &replay.Input{HasSessionID: true}
	if len(hdr.cursors) == 1 {
		in.LastEventID = hdr.cursors[0]
	}
	if err != nil {
		status, ref := status(err)
		if ref != nil {
			return nil, ref
		}
		in.Session = replay.Session{Status: status}
		return in, nil
	}
	b, err := h.reg.Log().Bounds(r.Context(), hdr.token)
	if err != nil {
		return nil, deliveryRefusal(live, err)
	}
	// Should the session be re-created between the lookup and Bounds, the
	// reader of the replay finds the new generation and closes.
	in.Session = replay.Session{Status: replay.Live, Tag: live.Tag(), Generation: live.Generation(), Floor: b.Floor, HWM: b.HWM}
	return in, nil
}

// status returns what row 2 of the decision reads of a token whose lookup
// failed with err, as the registry decides it (session.StatusOf): unknown,
// evicted or superseded. An error that says nothing of the token (another
// user's session, the store, the fleet's refusals) gets the lookup's
// answer instead.
func status(err error) (replay.Status, *refusal) {
	if st, ok := session.StatusOf(err); ok {
		return st, nil
	}
	return replay.Unknown, lookupRefusal(err)
}

// decide applies the replay decision to in, the input of r, looking up the
// event at the cursor's sequence when the decision asks for it
// (replay.NeedEvent), and returns the decision and that event. A store
// that lost the log (store.ErrLogLost) gives the event as lost
// (replay.EventAt.Lost): 409 cursor_compacted saying so. repeated
// says the Last-Event-ID header was repeated, which the refusal says.
func (h *Handler) decide(r *http.Request, token string, live *session.Live, in *replay.Input, repeated bool) (replay.Decision, store.Event, *refusal) {
	d := repeatedCursor(replay.Decide(*in), repeated)
	var at store.Event
	if d.Outcome == replay.NeedEvent {
		ev, found, err := h.reg.Log().At(r.Context(), token, d.Cursor.Sequence)
		switch {
		case errors.Is(err, store.ErrLogLost):
			// The bounds say the event is retained; the store lost it.
			live.Logger().Warn("event log lost", "reason", replay.ReasonCursorCompacted, "cursor", clip(in.LastEventID), "error", err)
			in.At = &replay.EventAt{Lost: true}
		case err != nil:
			return d, at, deliveryRefusal(live, err)
		default:
			at = ev
			in.At = &replay.EventAt{Found: found, Stream: ev.Stream}
		}
		d = replay.Decide(*in)
	}
	return d, at, nil
}

// repeatedCursor returns d, whose message says that the Last-Event-ID
// header was repeated when repeated and d refuses the cursor as malformed.
func repeatedCursor(d replay.Decision, repeated bool) replay.Decision {
	if repeated && d.Outcome == replay.CursorMalformed {
		d.Detail = "the Last-Event-ID header is repeated: send one cursor"
	}
	return d
}

// resumeRefusal returns the refusal of decision d, whose error.data carries
// the values that explain it (replay.Decision.Data). For a 409 on a session
// found live, error.data also says what became of the requests the refused
// stream carried (session.Refused): lostRequests, those whose calls did not
// finish in a generation that has ended, so that a client fails exactly
// those calls and may send them again; and, when there are any,
// answeredRequests, those whose calls finished with responses after the
// cursor, and runningRequests, those whose calls the live generation still
// runs: the client never receives those responses, and must not send those
// requests again. error.message then says the same (refusedMessage). When
// the session cannot tell which requests the stream carried (it keeps no
// ledger of the stream's generation, or its record kept no copy of the
// stream's ids: session.Live.Refused), error.data has none of the lists,
// never an empty one, which would say that none is lost, and
// error.message says that it cannot tell (unknownRequestsMessage), or,
// for a cursor of a generation never issued, d's own message. A
// session found live logs the refusal with the session's attributes and
// the cursor; write then does not log it again.
func resumeRefusal(live *session.Live, d replay.Decision, cursor string) *refusal {
	ref := refuse(d.Outcome.Reason(), d.Message())
	ref.data = d.Data()
	if live != nil {
		switch r, ok := live.Refused(d.Cursor); {
		case d.Outcome.HTTPStatus() != http.StatusConflict:
		case d.Cursor.Generation > d.Session.Generation:
			// No such generation was issued: d's own message says so, and
			// no list here names that stream's requests (the standalone
			// stream's empty ones included, which would say none is lost).
		case !ok:
			ref.message = unknownRequestsMessage(d)
		default:
			ref.data["lostRequests"] = r.Lost // the requests lost with the refused stream
			if len(r.Answered) > 0 {
				ref.data["answeredRequests"] = r.Answered
			}
			if len(r.Running) > 0 {
				ref.data["runningRequests"] = r.Running
			}
			ref.message = refusedMessage(d, r)
		}
		live.Logger().Info("resume refused", "reason", d.Outcome.Reason(), "cursor", clip(cursor), "status", d.Outcome.HTTPStatus())
		ref.logged = true
	}
	return ref
}

// refusedMessage returns the error.message of the 409 d on a session that
// knows what became of the refused stream's requests (r): why the stream
// cannot be resumed (replay.Decision.Cause), then which requests to send
// again, the lost ones, or that none is lost when r.Lost is empty, then,
// when there are any, the answered and the running ones, not to send
// again. Each list is written as error.data carries it, a JSON array of
// the ids as the client sent them.
func refusedMessage(d replay.Decision, r session.Refused) string {
	m := d.Cause()
	if len(r.Lost) > 0 {
		ids, _ := r.Lost.MarshalJSON() // ids the client sent, which encode
		m += "; the requests " + string(ids) + " of that stream are lost, since their calls did not finish " +
			"before their generation ended: send them again, or initialize a new session"
	} else {
		m += "; no request of that stream is lost: send none of them again"
	}
	if r.Forgotten {
		m += "; its calls all finished, and the session no longer keeps which of their responses come after the cursor " +
			"(it keeps its newest finished streams only): any whose response the client has not read ran, and cannot be sent"
	}
	if len(r.Answered) > 0 {
		ids, _ := r.Answered.MarshalJSON()
		m += "; the requests " + string(ids) + " of that stream finished, but their responses come after the cursor " +
			"and cannot be sent: do not send them again, since they ran"
	}
	if len(r.Running) > 0 {
		ids, _ := r.Running.MarshalJSON()
		m += "; the requests " + string(ids) + " of that stream are still running, and their responses will come after " +
			"the cursor, where no resume reaches them: do not send them again, since they run"
	}
	return m
}

// unknownRequestsMessage returns the error.message of the 409 d on a
// session that cannot tell which requests the refused stream carried, nor
// which of their calls finished: why the stream cannot be resumed
// (replay.Decision.Cause), then that the session no longer knows, and
// what the client does with each call of that stream it has no answer
// to: what it does after any call whose outcome is unknown.
func unknownRequestsMessage(d replay.Decision) string {
	return d.Cause() + "; the session no longer knows which requests that stream carried, nor whether their calls finished " +
		"(error.data lists none): each call of that stream whose response the client has not read may have run, or may still run: " +
		"check its effect before sending it again, or initialize a new session"
}

// resumePriming returns the priming event a stream resumed at cursor c opens
// with (SEP-1699), with the retry field when configured. Its id names c's
// position with resume as its resume part (Live.NextResume: no other
// priming event of the generation carries it; replay.Cursor): the id is new, as every event id of a session must be,
// and a client whose connection breaks before the next event resumes with
// it from the same place.
func (h *Handler) resumePriming(c replay.Cursor, resume uint64) []byte {
	c.Resume = resume
	b := c.AppendText(append(make([]byte, 0, 128), "id: "...))
	b = append(b, '\n')
	if h.opts.Retry > 0 {
		b = appendRetry(b, h.opts.Retry)
	}
	return append(b, "data:\n\n"...)
}
