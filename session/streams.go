// streams.go holds a session's streams and the calls in flight on them:
// opening a POST stream for its calls, releasing calls never delivered,
// priming and closing streams.

package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// Errors of OpenStream; test with errors.Is.
var (
	// ErrDuplicateID: a request ID is already in flight on the session
	// (JSON-RPC 2.0 requires unique IDs per sender).
	ErrDuplicateID = errors.New("session: request ID already in flight")
	// ErrTooManyCalls: the session would have more than
	// Options.MaxCallsPerSession requests in flight.
	ErrTooManyCalls = errors.New("session: too many calls in flight")
)

// CallLimitError is OpenStream's error when a request's calls would take a
// session past Options.MaxCallsPerSession; errors.Is(err, ErrTooManyCalls)
// holds for it. Sent > Limit means the request can never be accepted,
// however many answers the client waits for.
type CallLimitError struct {
	InFlight int // calls already in flight on the session
	Sent     int // calls the refused request carries
	Limit    int // Options.MaxCallsPerSession
}

func (e *CallLimitError) Error() string {
	return fmt.Sprintf("%v: %d in flight, %d more sent, at most %d", ErrTooManyCalls, e.InFlight, e.Sent, e.Limit)
}

// Unwrap returns ErrTooManyCalls.
func (e *CallLimitError) Unwrap() error { return ErrTooManyCalls }

// admitCalls returns the error OpenStream fails with for calls sent to a
// session whose state is st, with inFlight its calls in flight, which
// Options.MaxCallsPerSession bounds at limit: a *CallLimitError past the
// limit, then engine.State.Admit's error for what the state would hold
// once the calls that change it (these and those in flight, whose params
// a call keeps) are all answered, then ErrDuplicateID for an id in flight
// already, or twice in calls. It changes nothing.
func admitCalls(limit int, inFlight map[jsonrpc.ID]call, st *engine.State, calls []*jsonrpc.Request) error {
	if len(inFlight)+len(calls) > limit {
		return &CallLimitError{InFlight: len(inFlight), Sent: len(calls), Limit: limit}
	}
	if slices.ContainsFunc(calls, engine.ChangesState) { // the bounds are on what such calls change
		var pending []*jsonrpc.Request
		for _, c := range inFlight {
			if c.params != nil {
				pending = append(pending, &jsonrpc.Request{Method: c.method, Params: c.params})
			}
		}
		if err := st.Admit(pending, calls); err != nil {
			return err
		}
	}
	for i, c := range calls {
		if _, ok := inFlight[c.ID]; ok {
			return fmt.Errorf("%w: %v", ErrDuplicateID, c.ID.Raw())
		}
		for _, d := range calls[:i] {
			if d.ID == c.ID {
				return fmt.Errorf("%w: %v twice in one batch", ErrDuplicateID, c.ID.Raw())
			}
		}
	}
	return nil
}

// AdmitCalls returns the error OpenStream would fail with for calls sent
// to the session of rec, once its live state starts from rec with no call
// in flight (admitCalls: a *CallLimitError, an error wrapping
// engine.ErrBound, ErrDuplicateID), without starting it: what the
// request that carries them is refused for whether the session is awake
// or not (GetChecked). A record whose state does not decode gives nil:
// starting from it fails, and that failure is the request's answer.
func (r *Registry) AdmitCalls(rec store.Record, calls []*jsonrpc.Request) error {
	st, _, err := decodeState(rec.State)
	if err != nil {
		return nil
	}
	if st == nil {
		st = &engine.State{} // the state a session that saved none starts with
	}
	return admitCalls(r.opts.MaxCallsPerSession, nil, st, calls)
}

// call is an inbound request in flight.
type call struct {
	stream uint64
	method string
	params json.RawMessage // kept for the calls that change session state (engine.ChangesState)
	start  time.Time       // when it arrived (mcp.server.operation.duration)
	span   tracing.Span    // its server span, ended with its response
}

// openStream is a POST stream whose requests are not all answered.
type openStream struct {
	pending int  // requests not yet answered
	json    bool // answered as application/json: related messages go to the standalone stream
}

// OpenStream opens a POST stream for the calls (requests with IDs) of one
// HTTP request: it registers them, so their responses and related messages
// are routed to the stream, and appends the stream's opening event — a
// priming event with retry when non-zero — whose sequence becomes the
// stream's number (store.NewStream). It returns that number; the stream's
// reader starts just before it. asJSON marks a stream answered as
// application/json. It fails, registering nothing, with ErrDuplicateID if an
// ID is already in flight, with a *CallLimitError (ErrTooManyCalls) if the
// session would have more than Options.MaxCallsPerSession calls in flight,
// with an error wrapping engine.ErrBound if the calls, once answered, would
// make the session's state hold more than its bounds (admitCalls),
// and with the store's error if the append fails (the calls' spans then
// end with that error's reason, storeReason).
func (l *Live) OpenStream(ctx context.Context, calls []*jsonrpc.Request, asJSON bool, retry time.Duration) (uint64, error) {
	l.mu.Lock()
	if err := admitCalls(l.reg.opts.MaxCallsPerSession, l.calls, &l.state, calls); err != nil {
		l.mu.Unlock()
		return 0, err
	}
	// Reserve the IDs now; the stream number is known after the append.
	// No message can relate to them before Deliver, which follows.
	if l.calls == nil {
		l.calls = make(map[jsonrpc.ID]call, len(calls))
	}
	now := time.Now()
	for _, c := range calls {
		cl := call{method: c.Method, start: now}
		if engine.ChangesState(c) {
			cl.params = c.Params
		}
		if l.reg.opts.Tracer != nil {
			_, cl.span = l.reg.opts.Tracer.StartRequest(ctx, nil, tracing.Message{
				Method: c.Method, ID: fmt.Sprint(c.ID.Raw()), Params: c.Params,
				Session: l.token, ProtocolVersion: l.state.ProtocolVersion,
			})
		}
		l.calls[c.ID] = cl
	}
	l.mu.Unlock()

	// The opening event carries the calls' ids, never sent to a client:
	// they tell a later generation which requests the stream carried. It
	// lingers: the calls' first messages follow it at once, and a
	// pipelined store then stores it in their commit, so the stream's
	// first write waits for one commit, not two in a row.
	ids, data := encodeIDs(calls)
	ev := store.Event{Stream: store.NewStream, Kind: store.KindPriming, Retry: retry, Data: data, Linger: true}
	err := l.append(ctx, &ev)
	l.mu.Lock()
	if err != nil {
		spans := make([]tracing.Span, 0, len(calls))
		for _, c := range calls {
			spans = append(spans, l.calls[c.ID].span)
			delete(l.calls, c.ID)
		}
		defer endReleased(spans, storeReason(err))
		unpark := l.releaseMapsLocked()
		l.mu.Unlock()
		if unpark {
			l.reg.unpark(l)
		}
		return 0, err
	}
	defer l.mu.Unlock()
	for _, c := range calls {
		cl := l.calls[c.ID]
		cl.stream = ev.Stream
		l.calls[c.ID] = cl
	}
	if l.streams == nil {
		l.streams = make(map[uint64]*openStream, 1)
	}
	l.streams[ev.Stream] = &openStream{pending: len(calls), json: asJSON}
	l.ledger.open(ev.Stream, ids)
	return ev.Stream, nil
}

// ReleaseCalls forgets the calls of stream that OpenStream registered but
// that were never delivered to the engine (Deliver failed, or was not
// reached), so their ids can be sent again and the stream's end falls on
// its last delivered call; when every call of the stream is answered or
// released, an id-only event marked End closes it. Calls that are not in
// flight on stream are ignored. The span of each released call ends with
// reason (tracing.Span.EndReleased): why it was not delivered.
func (l *Live) ReleaseCalls(ctx context.Context, stream uint64, calls []*jsonrpc.Request, reason replay.Reason) {
	l.mu.Lock()
	ended := false
	var spans []tracing.Span
	for _, c := range calls {
		cl, ok := l.calls[c.ID]
		if !ok || cl.stream != stream {
			continue
		}
		spans = append(spans, cl.span)
		delete(l.calls, c.ID)
		l.ledger.release(stream, c.ID)
		if s := l.streams[stream]; s != nil {
			s.pending--
			if s.pending <= 0 {
				delete(l.streams, stream)
				ended = true
			}
		}
	}
	unpark := l.releaseMapsLocked()
	l.mu.Unlock()
	endReleased(spans, reason)
	if unpark {
		l.reg.unpark(l)
	}
	if ended {
		// The delivered calls, if any, are answered already, without an
		// end: an id-only event ends the stream for a reader that resumes
		// it (errors are ignored: the append fails only if the session is
		// gone, and then so is the stream).
		ev := store.Event{Stream: stream, Kind: store.KindPriming, End: true}
		if l.append(context.WithoutCancel(ctx), &ev) == nil {
			l.mu.Lock()
			l.ledger.end(stream)
			l.mu.Unlock()
		}
	}
}

// releaseMapsLocked lets go of the tables of calls and streams in flight
// once both are empty. It reports whether l was parked and may give its
// room to another session again (unparkLocked): the caller then calls
// reg.unpark(l), with l.mu released.
func (l *Live) releaseMapsLocked() (unpark bool) {
	if len(l.calls) > 0 {
		return false
	}
	if len(l.streams) == 0 {
		l.calls, l.streams = nil, nil
	}
	return l.unparkLocked()
}

// callsInFlight returns the number of l's calls whose response is not
// yet stored: not answered, or being appended.
func (l *Live) callsInFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls) + l.storing
}

// Prime appends a priming event (an id and empty data, with retry when
// non-zero) to stream, and returns its sequence: a new standalone GET
// stream's reader starts just before it.
func (l *Live) Prime(ctx context.Context, stream uint64, retry time.Duration) (uint64, error) {
	ev := store.Event{Stream: stream, Kind: store.KindPriming, Retry: retry}
	if err := l.append(ctx, &ev); err != nil {
		return 0, err
	}
	return ev.Seq, nil
}

// CloseStream appends a close event to stream: the connection serving it
// sends retry and closes, and the client resumes with Last-Event-ID
// (SEP-1699).
func (l *Live) CloseStream(ctx context.Context, stream uint64, retry time.Duration) error {
	ev := store.Event{Stream: stream, Kind: store.KindClose, Retry: retry}
	return l.append(ctx, &ev)
}
