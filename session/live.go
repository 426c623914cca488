package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
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

// Live is one generation of a session whose live state this process holds.
// It routes the engine's outbound messages to streams and appends them to
// the event log (it is the engine's Outbox), and it records the session
// state a later generation needs.
type Live struct {
	reg    *Registry
	token  string
	gen    uint64
	tag    string
	userID string
	logger *slog.Logger
	eng    engine.Session

	lh lazyHandler // l.logger's handler

	mu sync.Mutex
	// calls and streams are nil while the session has no call in flight:
	// an idle session does not keep their emptied tables (about 700 bytes).
	calls      map[jsonrpc.ID]call
	streams    map[uint64]*openStream
	ledger     ledger     // the requests of this generation's recent streams (lost.go)
	settled    *sync.Cond // on mu, made by the first LostRequests that waits: a response's place is recorded
	state      engine.State
	lastSeen   time.Time
	storedSeen time.Time // last LastSeen written to the store
	attached   int       // connections serving this session's streams
	leaseUntil time.Time // when this process's lease lapses (zero: never)
	initFailed bool      // initialize was answered with an error
	// initAnswered is set once initialize has been answered; initWait,
	// made only when someone waits before that, is closed then.
	initAnswered bool
	initWait     chan struct{}
	// parked: the registry took l out of its eviction order because a
	// call was in flight (recency.victim); the end of its last call hands
	// it back (Registry.unpark).
	parked bool

	// Guarded by reg.mu.
	dropped  bool   // drop has run (see Registry.drop)
	lruKey   uint64 // the stamp l is placed by in reg.lru
	lruIndex int    // l's index in reg.lru; -1 when it is not in it

	// used is the registry's recency stamp of the latest use
	// (Registry.clock); the least recently used session has the lowest.
	used atomic.Uint64

	// prior are the ledgers of earlier generations, from the record
	// (lost.go); set at the start, then only read.
	prior []ledger
}

// markUsed raises l's recency stamp to t.
func (l *Live) markUsed(t uint64) {
	for {
		old := l.used.Load()
		if old >= t || l.used.CompareAndSwap(old, t) {
			return
		}
	}
}

// dead reports whether l's engine session has ended (on its own, or closed).
func (l *Live) dead() bool { return closed(l.eng.Done()) }

// call is an inbound request in flight.
type call struct {
	stream uint64
	method string
	params json.RawMessage // kept for the calls that change session state (engine.ChangesState)
}

// openStream is a POST stream whose requests are not all answered.
type openStream struct {
	pending int  // requests not yet answered
	json    bool // answered as application/json: related messages go to the standalone stream
}

func newLive(r *Registry, rec store.Record, st *engine.State, prior []ledger) *Live {
	l := &Live{
		reg: r, token: rec.Token, gen: rec.Generation, tag: replay.Tag(rec.Token), userID: rec.UserID,
		lastSeen:   r.opts.Now(),
		storedSeen: rec.LastSeen,
		leaseUntil: rec.LeaseUntil,
		lruIndex:   -1,
		ledger:     ledger{Generation: rec.Generation},
		prior:      prior,
	}
	if st != nil {
		l.state = *st
	}
	l.lh.parent, l.lh.live = r.logger.Handler(), l
	l.logger = slog.New(&l.lh)
	return l
}

// lazyHandler is a Live's log handler: its parent's handler with the
// session's attributes (session token prefix, generation), built when the
// session first logs a line at an enabled level. Most sessions never do,
// and the standard handlers' WithAttrs pre-formats the attributes into a
// handler of their own, a few hundred bytes per session.
type lazyHandler struct {
	parent slog.Handler
	live   *Live
	once   sync.Once
	h      slog.Handler
}

func (lh *lazyHandler) handler() slog.Handler {
	lh.once.Do(func() {
		lh.h = lh.parent.WithAttrs([]slog.Attr{
			slog.String("session", store.Prefix(lh.live.token)),
			slog.Uint64("generation", lh.live.gen),
		})
	})
	return lh.h
}

func (lh *lazyHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return lh.parent.Enabled(ctx, level)
}

func (lh *lazyHandler) Handle(ctx context.Context, r slog.Record) error {
	return lh.handler().Handle(ctx, r)
}

func (lh *lazyHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return lh.handler().WithAttrs(attrs)
}

func (lh *lazyHandler) WithGroup(name string) slog.Handler {
	return lh.handler().WithGroup(name)
}

// Token returns the session token.
func (l *Live) Token() string { return l.token }

// Generation returns the generation this Live serves.
func (l *Live) Generation() uint64 { return l.gen }

// Tag returns the cursor tag of the session (replay.Tag).
func (l *Live) Tag() string { return l.tag }

// Logger returns the session's logger (with session and generation).
func (l *Live) Logger() *slog.Logger { return l.logger }

// State returns a copy of the recorded session state.
func (l *Live) State() engine.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state
	st.Subscriptions = slices.Clone(st.Subscriptions)
	return st
}

// Reader returns a reader of stream in this generation, positioned after
// sequence after.
func (l *Live) Reader(stream, after uint64) *eventlog.Reader {
	return l.reg.log.NewReader(l.token, l.gen, stream, after)
}

// Done is closed when the live state of this generation has ended.
func (l *Live) Done() <-chan struct{} { return l.eng.Done() }

// lease returns when this process's lease on the generation lapses, by the
// last successful renewal (zero: no lease).
func (l *Live) lease() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leaseUntil
}

func (l *Live) setLease(until time.Time) {
	l.mu.Lock()
	if until.After(l.leaseUntil) {
		l.leaseUntil = until
	}
	l.mu.Unlock()
}

// Touch records activity now. The store learns of it at most every quarter
// of the idle TTL, so that a later process sees recent activity.
func (l *Live) Touch() {
	now := l.reg.opts.Now()
	l.mu.Lock()
	l.lastSeen = now
	write := l.reg.opts.IdleTTL > 0 && now.Sub(l.storedSeen) > l.reg.opts.IdleTTL/4
	if write {
		l.storedSeen = now
	}
	l.mu.Unlock()
	if write {
		l.reg.st.Touch(context.Background(), l.token, now)
	}
}

// Attach records that a connection serves one of the session's streams; a
// session with an attached connection is not idle. Call the returned
// function when the connection ends.
func (l *Live) Attach() (detach func()) {
	l.mu.Lock()
	l.attached++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.attached--
			l.lastSeen = l.reg.opts.Now()
			l.mu.Unlock()
		})
	}
}

// park reports whether a call is in flight on l: such a session is not
// evicted to make room for another. If so it marks l parked: when its last
// call ends, it becomes a candidate for eviction again (see recency). An
// open stream alone does not make a session busy: clients keep their
// standalone GET stream open for the session's whole life, and counting
// it would lock new sessions out for good once MaxSessions clients hold
// one.
func (l *Live) park() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) == 0 {
		return false
	}
	l.parked = true
	return true
}

func (l *Live) callsInFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

func (l *Live) idleSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attached > 0 {
		return l.reg.opts.Now()
	}
	return l.lastSeen
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
// and with the store's error if the append fails.
func (l *Live) OpenStream(ctx context.Context, calls []*jsonrpc.Request, asJSON bool, retry time.Duration) (uint64, error) {
	l.mu.Lock()
	if limit := l.reg.opts.MaxCallsPerSession; len(l.calls)+len(calls) > limit {
		inFlight := len(l.calls)
		l.mu.Unlock()
		return 0, &CallLimitError{InFlight: inFlight, Sent: len(calls), Limit: limit}
	}
	for i, c := range calls {
		if _, ok := l.calls[c.ID]; ok {
			l.mu.Unlock()
			return 0, fmt.Errorf("%w: %v", ErrDuplicateID, c.ID.Raw())
		}
		for _, d := range calls[:i] {
			if d.ID == c.ID {
				l.mu.Unlock()
				return 0, fmt.Errorf("%w: %v twice in one batch", ErrDuplicateID, c.ID.Raw())
			}
		}
	}
	// Reserve the IDs now; the stream number is known after the append.
	// No message can relate to them before Deliver, which follows.
	if l.calls == nil {
		l.calls = make(map[jsonrpc.ID]call, len(calls))
	}
	for _, c := range calls {
		cl := call{method: c.Method}
		if engine.ChangesState(c) {
			cl.params = c.Params
		}
		l.calls[c.ID] = cl
	}
	l.mu.Unlock()

	// The opening event carries the calls' ids, never sent to a client:
	// they tell a later generation which requests the stream carried.
	ids, data := encodeIDs(calls)
	ev := store.Event{Stream: store.NewStream, Kind: store.KindPriming, Retry: retry, Data: data}
	err := l.append(ctx, &ev)
	l.mu.Lock()
	if err != nil {
		for _, c := range calls {
			delete(l.calls, c.ID)
		}
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
// flight on stream are ignored.
func (l *Live) ReleaseCalls(ctx context.Context, stream uint64, calls []*jsonrpc.Request) {
	l.mu.Lock()
	ended := false
	for _, c := range calls {
		if cl, ok := l.calls[c.ID]; !ok || cl.stream != stream {
			continue
		}
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
// once both are empty. It reports whether l was parked and has no call in
// flight any more: the caller then calls reg.unpark(l), with l.mu
// released.
func (l *Live) releaseMapsLocked() (unpark bool) {
	if len(l.calls) > 0 {
		return false
	}
	if len(l.streams) == 0 {
		l.calls, l.streams = nil, nil
	}
	unpark, l.parked = l.parked, false
	return unpark
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

// Deliver hands an inbound message to the engine, recording the state
// change a notification makes (engine.State.Fold; a call's is recorded when
// it is answered, in Send). A state change that cannot be stored fails the
// delivery, so the client is not told 202 for a notification a later
// generation would not know of.
func (l *Live) Deliver(ctx context.Context, msg jsonrpc.Message, req engine.Request) error {
	if r, ok := msg.(*jsonrpc.Request); ok && !r.IsCall() && engine.ChangesState(r) {
		if err := l.recordNotification(ctx, r); err != nil {
			return err
		}
	}
	if err := l.eng.Deliver(ctx, msg, req); err != nil {
		return fmt.Errorf("session %s gen %d: deliver: %w", store.Prefix(l.token), l.gen, err)
	}
	return nil
}

// recordNotification folds the inbound notification r into the session
// state and stores the result. When it cannot be stored, the state in
// memory goes back to what it was, unless another change has been folded
// on top meanwhile (that change's save carried r's effect).
func (l *Live) recordNotification(ctx context.Context, r *jsonrpc.Request) error {
	l.mu.Lock()
	prev := l.state
	next, changed := prev.Fold(r, nil)
	l.state = next
	l.mu.Unlock()
	if !changed {
		return nil
	}
	if err := l.saveState(ctx, next); err != nil {
		l.mu.Lock()
		if l.state.Equal(next) {
			l.state = prev
		}
		l.mu.Unlock()
		return err
	}
	return nil
}

// Send implements engine.Outbox: it routes msg to the stream of the request
// it relates to (the standalone stream when none, or when that request is
// answered as JSON), marks the response that completes a stream as its end,
// records state changes, and appends the event.
func (l *Live) Send(ctx context.Context, msg jsonrpc.Message, related jsonrpc.ID) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("session %s gen %d: encode: %w", store.Prefix(l.token), l.gen, err)
	}
	ev := store.Event{Stream: replay.StandaloneStream, Kind: store.KindMessage, Data: data}
	var stateChange *engine.State
	unpark := false
	var answered jsonrpc.ID // the call msg answers, when it is a response to one
	l.mu.Lock()
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c, known := l.calls[resp.ID]
		if !known {
			l.mu.Unlock()
			l.logger.Warn("dropping a response to no request in flight", "id", resp.ID.Raw())
			return nil
		}
		delete(l.calls, resp.ID)
		answered = resp.ID
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
			l.initFailed = resp.Error != nil
			l.initAnswered = true
			if l.initWait != nil {
				close(l.initWait)
				l.initWait = nil
			}
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
	if answered.IsValid() {
		l.settle(ev.Stream, answered, &ev, err == nil)
	}
	return err
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

// settle records in the ledger where the response to id on stream went:
// ev, if it was stored, else nowhere; and wakes LostRequests calls that
// wait for it.
func (l *Live) settle(stream uint64, id jsonrpc.ID, ev *store.Event, stored bool) {
	l.mu.Lock()
	if stored {
		l.ledger.answer(stream, id, ev.Seq, ev.End)
	} else {
		l.ledger.answer(stream, id, 0, false)
	}
	if l.settled != nil {
		l.settled.Broadcast()
	}
	l.mu.Unlock()
}

// abandonIfUnavailable ends this generation in this process after an
// outbound message could not be stored because the store was unavailable.
// The message is lost, or (when only the store's reply was lost) stored;
// either way, delivering later messages of the generation could leave a
// gap the client cannot see. Ending the generation turns that into an
// explicit 409 generation_mismatch when the client resumes, and the next
// request re-creates the session at generation+1 once the store is back.
// Cancelled contexts (a cancelled call) do not count.
func (l *Live) abandonIfUnavailable(err error) {
	if errors.Is(err, store.ErrUnavailable) {
		l.reg.drop(l, "unavailable", err)
	}
}

// append appends ev and sets its Seq and Generation. An append refused
// because a newer generation owns the session (fenced: this process is a
// zombie, e.g. it was paused past its lease) or because the session ended
// drops this generation: its engine session closes, so its handlers stop
// producing events nobody can store.
func (l *Live) append(ctx context.Context, ev *store.Event) error {
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
		l.logger.Warn("append fenced: a newer generation owns the session", "reason", "fenced", "error", err)
	}
	if reason := lostReason(err); reason != "" {
		l.reg.drop(l, reason, err)
	}
	return err
}

// saveState stores st as the session's state, with the ledgers of earlier
// generations, fenced by this generation.
func (l *Live) saveState(ctx context.Context, st engine.State) error {
	b, err := encodeState(&st, l.prior)
	if err != nil {
		return err
	}
	if err := l.reg.st.SaveState(context.WithoutCancel(ctx), l.token, l.gen, b); err != nil {
		if lostReason(err) == "" {
			// A session that ended, or a generation fenced, is reported
			// by whoever acts on it; the store did not fail.
			l.logger.Warn("saving session state failed", "reason", replay.ReasonStoreError, "error", err)
		}
		return fmt.Errorf("session %s gen %d: save state: %w", store.Prefix(l.token), l.gen, err)
	}
	return nil
}

// InitializeFailed reports whether the session's initialize was answered
// with an error: the transport ends such a session (store.EndInitializeFailed)
// once the answer is written, so it holds no room and its token answers 404.
func (l *Live) InitializeFailed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.initFailed
}

// InitializeAnswered returns a channel that is closed once the session's
// initialize has been answered, with a result or an error (see
// InitializeFailed); it is closed already if it has been. A transport whose
// client left before the answer waits on it, with Done, to end a session
// whose initialize then fails.
func (l *Live) InitializeAnswered() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.initAnswered {
		c := make(chan struct{}) // asked once per initialize: not worth keeping
		close(c)
		return c
	}
	if l.initWait == nil {
		l.initWait = make(chan struct{})
	}
	return l.initWait
}

// ProtocolVersion returns the protocol version the session negotiated at
// initialize ("" before it), without copying the rest of the state.
func (l *Live) ProtocolVersion() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state.ProtocolVersion
}

// Initialized reports whether initialize succeeded on this session.
func (l *Live) Initialized() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.state.InitializeParams) > 0
}
