// answer.go holds the answer to a POST that carries calls: the stream its
// calls are answered on, the delivery of its messages to the session, and
// the answer itself, an SSE stream or one application/json body (MCP
// 2025-11-25, "Sending Messages to the Server").

package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// answer opens the stream of p's calls, delivers p's messages to live's
// session and answers: as an SSE stream, or as one application/json body
// when Options.JSONResponse is set. The SSE stream opens with a priming
// event (SEP-1699) under 2025-11-25 and later only; earlier clients see the
// stream's messages. An initialize it refuses (the stream's opening event
// or the delivery not stored, the answer not read) ends the session it
// created with store.EndInitializeFailed: a refusal names no session
// (refusal.write), so the client never learns the token and the session
// never began (MCP 2025-11-25, lifecycle). When the store cannot end the
// record, End still drops the session's live state and with it the lease
// this process renews, and the record is left to the store's own rules.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, live *session.Live, p post, req engine.Request, version string) *refusal {
	ref := h.answerCalls(w, r, live, p, req, version)
	if ref != nil && p.initialize != nil {
		h.reg.End(context.WithoutCancel(r.Context()), live.Token(), store.EndInitializeFailed)
	}
	return ref
}

// answerCalls is answer but for the end of a refused initialize's
// session; it settles an initialize it answers (settleInitialize).
func (h *Handler) answerCalls(w http.ResponseWriter, r *http.Request, live *session.Live, p post, req engine.Request, version string) (ref *refusal) {
	// The calls' spans (started by OpenStream) are children of the HTTP
	// request's trace context unless their params._meta names another.
	ctx := h.opts.Tracer.Extract(r.Context(), r.Header)
	asJSON := h.opts.JSONResponse
	primed := !asJSON && version >= V20251125
	streamID, ref := h.openStream(ctx, live, p.calls, asJSON, primed)
	if ref != nil {
		return ref
	}
	req.CloseStream = func(retry time.Duration) {
		if retry <= 0 {
			retry = h.opts.Retry
		}
		live.CloseStream(context.WithoutCancel(ctx), streamID, retry)
	}
	if ref := h.deliver(ctx, live, p, streamID, req); ref != nil {
		return ref
	}
	if p.initialize != nil {
		// A client that initializes again reads the result with its old
		// token superseded already (so its answer waits for initialize's);
		// a first initialize's stream opens at once, whenever its answer
		// comes. A session whose initialize failed ends once the answer
		// is written.
		if p.supersedes != "" && h.initializeSucceeded(ctx, live) {
			h.supersede(ctx, p.supersedes, userID(r))
			p.supersedes = ""
		}
		defer func() {
			if ref == nil {
				h.settleInitialize(ctx, live, p.supersedes, userID(r))
			}
		}()
	}
	// The stream's number is the sequence of its opening event; its reader
	// starts just before it.
	after := streamID - 1
	if asJSON {
		return h.answerJSON(ctx, w, live, streamID, after, p.batch, p.calls, p.initialize == nil)
	}
	s := stream{live: live, stream: streamID, after: after, unprimed: !primed, kind: metrics.StreamPost}
	if p.initialize == nil {
		s.calls = callIDs(p.calls)
	}
	if primed {
		s.opening = &store.Event{Seq: streamID, Generation: live.Generation(), Stream: streamID, Kind: store.KindPriming, Retry: max(h.opts.Retry, 0)}
	}
	return h.serve(ctx, w, s)
}

// openStream opens the stream of calls on live's session and returns its
// number. Refusals: 429 too_many_calls when answers must come first, 400
// duplicate_request_id, 400 invalid_params (-32602) for calls that would
// take the session's state over its bounds (engine.State.Admit: a
// resources/subscribe past the session's subscriptions, a logging/setLevel
// of a level MCP does not name), and the delivery's 404 or 503 when the stream's
// opening event cannot be stored. A refusal about one call carries its id.
// A batch of more calls than a session may have in flight at all never
// gets here: decodeMessages refused it (400 batch_too_large).
func (h *Handler) openStream(ctx context.Context, live *session.Live, calls []*jsonrpc.Request, asJSON, primed bool) (uint64, *refusal) {
	retry := time.Duration(0)
	if primed {
		retry = max(h.opts.Retry, 0)
	}
	streamID, err := live.OpenStream(ctx, calls, asJSON, retry)
	if err == nil {
		return streamID, nil
	}
	if ref := callsRefusal(err, calls); ref != nil {
		return 0, ref
	}
	return 0, deliveryRefusal(live, err)
}

// callsRefusal returns the refusal of calls that a session does not admit
// (session.Live.OpenStream, session.Registry.AdmitCalls), nil for a nil
// err or an error of another kind: 429 too_many_calls, 400
// duplicate_request_id, 400 invalid_params (engine.ErrBound). A refusal
// about one call carries its id.
func callsRefusal(err error, calls []*jsonrpc.Request) *refusal {
	var ref *refusal
	switch {
	case err == nil:
		return nil
	case errors.Is(err, session.ErrTooManyCalls):
		ref = refuse(replay.ReasonTooManyCalls, err.Error()+": wait for answers before sending more requests on this session")
	case errors.Is(err, session.ErrDuplicateID):
		ref = refuse(replay.ReasonDuplicateRequestID, err.Error())
	case errors.Is(err, engine.ErrBound):
		ref = refuse(replay.ReasonInvalidParams, err.Error())
	default:
		return nil
	}
	if len(calls) == 1 {
		ref.id = calls[0].ID
	}
	return ref
}

// deliver hands p's messages to live's session. When one fails, the calls
// not handed over will never be answered: their ids are freed, so the
// client can send them again as it is told to (a session whose initialize
// never reached the server is then ended by answer).
func (h *Handler) deliver(ctx context.Context, live *session.Live, p post, streamID uint64, req engine.Request) *refusal {
	for i, m := range p.msgs {
		err := h.deliverMessage(ctx, live, m, req)
		if err == nil {
			continue
		}
		var undelivered []*jsonrpc.Request
		for _, m := range p.msgs[i:] {
			if r, ok := m.(*jsonrpc.Request); ok && r.IsCall() {
				undelivered = append(undelivered, r)
			}
		}
		ref := deliveryRefusal(live, err)
		why := ref.reason
		if ctx.Err() != nil {
			why = replay.ReasonClientGone // the client's connection was cut during the delivery
		}
		live.ReleaseCalls(ctx, streamID, undelivered, why)
		return ref
	}
	return nil
}

// answerJSON waits for the responses of the stream's calls and writes them
// as one application/json body: an object, or an array for a batch. A JSON
// answer cannot be resumed, so when the server shuts down before the calls
// are answered, it is refused with 503 unavailable instead of a connection
// cut without a body; when the client ended the session with DELETE, the
// calls not answered yet get the error that says so (deletedAnswers) in
// the body; when the session's generation ends otherwise, calls the
// engine was handed (ran) get the error of lostAnswers, and an
// initialize, which may be sent again, 503.
func (h *Handler) answerJSON(ctx context.Context, w http.ResponseWriter, live *session.Live, streamID, after uint64, batch bool, calls []*jsonrpc.Request, ran bool) *refusal {
	rd := live.Reader(streamID, after)
	var out []json.RawMessage
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(h.shutdownCtx, cancel)
	defer stop()
	for done := false; !done; {
		evs, err := rd.Next(ctx)
		if err != nil {
			switch {
			case h.shuttingDown():
				return refuse(replay.ReasonUnavailable,
					"the server is shutting down before the call answered; a JSON response cannot be resumed: send the request again")
			case ctx.Err() == nil:
				if answers := h.deletedAnswers(live, streamID, rd.Position(), unanswered(calls, out)); len(answers) > 0 {
					// The client ended the session: the calls not
					// answered yet are answered with that.
					out = append(out, answers...)
					done = true
					continue
				}
				if ran {
					// The calls were handed to the engine: sending them
					// again could run them twice.
					out = append(out, h.lostAnswers(live, unanswered(calls, out), err)...)
					done = true
					continue
				}
				ref := refuse(replay.ReasonUnavailable, "the session ended before answering: send the request again")
				ref.cause = err
				return ref
			}
			return nil // the client went away
		}
		for _, e := range evs {
			if e.Kind == store.KindMessage {
				out = append(out, e.Data)
			}
			if e.End {
				done = true
				break
			}
		}
	}
	var body []byte
	if len(out) == 1 && !batch {
		body = out[0]
	} else {
		body, _ = json.Marshal(out)
	}
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(http.StatusOK)
	w.Write(body)
	return nil
}

// unanswered returns the ids of calls that no response of out answers:
// the calls of a JSON answer still waiting when its session ended.
func unanswered(calls []*jsonrpc.Request, out []json.RawMessage) session.RequestIDs {
	ids := make(session.RequestIDs, 0, len(calls))
	for _, c := range calls {
		ids = append(ids, c.ID)
	}
	for _, m := range out {
		if msg, err := jsonrpc.DecodeMessage(m); err == nil {
			if r, ok := msg.(*jsonrpc.Response); ok {
				ids = slices.DeleteFunc(ids, func(id jsonrpc.ID) bool { return id == r.ID })
			}
		}
	}
	return ids
}
