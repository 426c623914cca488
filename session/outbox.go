// outbox.go holds the engine's side of a Live: the Outbox that routes each
// outbound message to its stream and appends it to the event log.

package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// outbox is a Live as its engine session sees it: the engine.Outbox that
// Registry.start hands to engine.Start. It is a type of its own so that
// the transport, which holds the *Live, cannot send as the engine does.
type outbox Live

// Send implements engine.Outbox (see Live.send).
func (o *outbox) Send(ctx context.Context, msg jsonrpc.Message, related jsonrpc.ID) error {
	return (*Live)(o).send(ctx, msg, related)
}

// send routes msg to the stream of the request it relates to (the
// standalone stream when none, or when that request is answered as JSON),
// marks the response that completes a stream as its end, records state
// changes, and appends the event. A response's call is counted in flight
// (Live.storing, Registry.CallsInFlight) until the append returns, so a
// shutdown that waits for no call in flight finds the answer in the log,
// and its operation and span end at that point too (Live.answered); the
// session is a candidate for the room again (Registry.unpark) once its
// last call's answer is stored (settle; busyForRoomLocked).
func (l *Live) send(ctx context.Context, msg jsonrpc.Message, related jsonrpc.ID) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("session %s gen %d: encode: %w", store.Prefix(l.token), l.gen, err)
	}
	ev := store.Event{Stream: replay.StandaloneStream, Kind: store.KindMessage, Data: data}
	var stateChange *engine.State
	unpark := false
	var answered call            // the call msg answers, when it is a response to one
	var answer *jsonrpc.Response // msg, when it answers a call
	l.mu.Lock()
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c, known := l.calls[resp.ID]
		if !known {
			l.mu.Unlock()
			l.logger.Warn("dropping a response to no request in flight", "id", resp.ID.Raw())
			return nil
		}
		delete(l.calls, resp.ID)
		l.storing++
		answered, answer = c, resp
		l.ledger.answering(c.stream, resp.ID)
		ev.Stream = c.stream
		if s := l.streams[c.stream]; s != nil {
			s.pending--
			if s.pending == 0 {
				ev.End = true
				delete(l.streams, c.stream)
			}
		}
		unpark = l.releaseMapsLocked()
		if c.method == "initialize" {
			l.initializeAnsweredLocked(resp.Error != nil)
		}
		if c.params != nil {
			req := &jsonrpc.Request{ID: resp.ID, Method: c.method, Params: c.params}
			if st, changed := l.state.Fold(req, resp); changed {
				l.state = st
				stateChange = &st
			}
		}
	} else if related.IsValid() {
		if c, ok := l.calls[related]; ok {
			if s := l.streams[c.stream]; s != nil && !s.json {
				ev.Stream = c.stream
			}
		}
	}
	l.mu.Unlock()
	if unpark {
		l.reg.unpark(l)
	}
	err = l.store(ctx, stateChange, &ev)
	if answer != nil {
		l.answered(answered, answer)
		l.settle(ev.Stream, answer.ID, &ev, err == nil)
	}
	return err
}

// answered records call c answered by resp, once resp is stored (or
// failed to be): its operation duration and the end of its span, with
// resp's error type.
func (l *Live) answered(c call, resp *jsonrpc.Response) {
	errType := metrics.ResponseErrorType(c.method, resp)
	l.reg.opts.Metrics.Operation(c.method, errType, time.Since(c.start))
	c.span.EndRequest(errType)
}

// store stores the state change st, if any, then appends ev; a failure
// because the store is unavailable ends the generation.
func (l *Live) store(ctx context.Context, st *engine.State, ev *store.Event) error {
	if st != nil {
		// Store the state before the response that acknowledges it.
		if err := l.saveState(ctx, *st); err != nil {
			l.abandonIfUnavailable(err)
			return outboxError(err)
		}
	}
	if err := l.append(ctx, ev); err != nil {
		l.abandonIfUnavailable(err)
		return outboxError(err)
	}
	return nil
}

// outboxError wraps err, a store error of Send, with the engine.Outbox
// error it means; its text stays err's.
func outboxError(err error) error {
	var kind error
	switch {
	case errors.Is(err, store.ErrEnded), errors.Is(err, store.ErrNotFound):
		kind = engine.ErrSessionEnded
	case errors.Is(err, store.ErrFenced):
		kind = engine.ErrFenced
	case errors.Is(err, store.ErrUnavailable):
		kind = engine.ErrUnavailable
	default:
		return err
	}
	return sendError{kind: kind, err: err}
}

// sendError is an error of Send: err, from the store, and the
// engine.Outbox error it means.
type sendError struct{ kind, err error }

func (e sendError) Error() string   { return e.err.Error() }
func (e sendError) Unwrap() []error { return []error{e.kind, e.err} }

// settle ends the call id on stream once the append of its response
// returned: it is no longer counted in flight, and the session's idle
// time (eviction, hibernation) starts now, as after a request, and it may
// give its room to another session again (unparkLocked); the ledger
// records where the response went (ev, if it was stored, else nowhere);
// Refused calls that wait for it wake.
func (l *Live) settle(stream uint64, id jsonrpc.ID, ev *store.Event, stored bool) {
	now := l.reg.opts.Now()
	l.mu.Lock()
	l.storing--
	if now.After(l.lastSeen) {
		l.lastSeen = now
	}
	if stored {
		l.ledger.answer(stream, id, ev.Seq, ev.End)
	} else {
		l.ledger.answer(stream, id, 0, false)
	}
	if l.settled != nil {
		l.settled.Broadcast()
	}
	unpark := l.unparkLocked()
	l.mu.Unlock()
	if unpark {
		l.reg.unpark(l)
	}
}

// abandonIfUnavailable ends this generation in this process after an
// outbound message could not be stored because the store was unavailable.
// The message is lost, or (when only the store's reply was lost) stored;
// either way, delivering later messages of the generation could leave a
// gap the client cannot see. Ending the generation turns that into an
// explicit 409 generation_mismatch when the client resumes, and the next
// request re-creates the session at generation+1 once the store is back.
// It is the event a pipelined store's lost batch is (store.ErrLost), and
// has its reason, generation_lost (replay.ReasonGenerationLost): the
// reason names what became of the generation, the error why.
// Cancelled contexts (a cancelled call) do not count.
func (l *Live) abandonIfUnavailable(err error) {
	if errors.Is(err, store.ErrUnavailable) {
		l.reg.drop(l, replay.ReasonGenerationLost, err)
	}
}

// append appends ev and sets its Seq and Generation. An append refused
// because a newer generation owns the session (fenced: this process is a
// zombie, e.g. it was paused past its lease) or because the session ended
// drops this generation: its engine session closes, so its handlers stop
// producing events nobody can store.
func (l *Live) append(ctx context.Context, ev *store.Event) error {
	if err := l.refuseAhead(); err != nil {
		return err
	}
	evs, _ := l.reg.oneEvent.Get().(*[1]store.Event)
	if evs == nil {
		evs = new([1]store.Event)
	}
	evs[0] = *ev
	// Stores do not keep the slice they are given (they copy or encode
	// the events), so the array can serve the next append.
	err := l.reg.log.Append(ctx, l.token, l.gen, evs[:]...)
	if err == nil {
		*ev = evs[0]
	}
	evs[0] = store.Event{} // no reference to the data from the pool
	l.reg.oneEvent.Put(evs)
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrFenced) {
		l.logger.Warn("append fenced: a newer generation owns the session", "reason", replay.ReasonFenced, "error", err)
	}
	if reason := fleet.LostReason(err); reason != "" {
		l.reg.drop(l, reason, err)
	}
	return err
}
