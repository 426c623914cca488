// Package connect is the bridge `tidemark connect` runs beside a desktop
// host (DESIGN.md, "The connect bridge"): MCP over stdio toward the host,
// Streamable HTTP toward a remote server, Tidemark or any other, through the
// resumable transport of package client. It speaks the stateful era
// (2025-03-26 to 2025-11-25) through package client, or the sessionless
// era (2026-07-28) through client.TaskTransport (Options.Protocol).
//
// The host is the client of record. The bridge passes its messages to the
// server and the server's to it, and absorbs what the server's faults would
// otherwise make the host see:
//
//   - A cut stream is resumed with Last-Event-ID, each event reaching the
//     host once (package client).
//   - A lost session (404) or generation (409): the calls it carried fail
//     at once toward the host, those a 409 lists in
//     error.data.lostRequests or, when the server does not list them, every
//     call of the refused stream (JSON-RPC error -32603, error.data.reason
//     request_lost); a new session is initialized with the host's own
//     initialize parameters (the host never sees a second initialize
//     answer), the log level and resource subscriptions the host set are
//     set again on it (the session-state rule, engine.State), and the host
//     gets notifications/tools/list_changed (and prompts, resources, where
//     the server has them) so that it reads its lists again, once every
//     call in flight at the loss has ended, so that a lost call's error
//     comes first even when the server reports it only on the call's own
//     stream, after the new session opened. A session the bridge opened
//     so on its own, lost in turn before the host sent anything on it, is
//     opened again only at the host's next message
//     (client.Transport.DeferIdleRenewal).
//   - 503 with Retry-After, and 429: the POST is sent again no sooner than
//     asked, within Options.ResumeTimeout, then the call fails
//     (server_refused).
//   - A burst of the host's: at most Options.MaxCalls calls are in flight
//     toward the server, the others wait in the bridge (at most
//     Options.MaxQueued; beyond, a call is answered too_many_calls and
//     never sent), so that the burst does not meet the server's
//     per-session bound (admit.go).
//   - A host that sends initialize again gets a new session; the old one
//     is ended with DELETE once its last call ends (client.Transport), at
//     once when it carries none.
//   - A host whose initialize failed (refused, lost, or answered with an
//     error) has no session: until its next initialize the bridge answers
//     its calls and drops its notifications, as before its first.
//   - An unreachable server: the call fails (server_unreachable) once no
//     connection could be made within Options.ResumeTimeout; at start, the
//     host's first initialize fails within Options.StartTimeout and Run
//     returns an error that wraps ErrUnreachable.
//
// Server-to-client requests (elicitation, sampling, roots/list, ping) go
// to the host under ids of the transport's own ("tidemark-N", unique for
// the run; client.Transport) and its answers back to the session that
// asked; one whose session is lost or ended gets notifications/cancelled
// toward the host, and a late answer to it is dropped.
// notifications/cancelled and progress pass both ways, and a call the host
// cancelled gets no answer.
package connect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/client"
	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
)

// Defaults of Options' fields.
const (
	// DefaultResumeTimeout is the default of Options.ResumeTimeout.
	DefaultResumeTimeout = client.DefaultResumeTimeout
	// DefaultStartTimeout is the default of Options.StartTimeout.
	DefaultStartTimeout = 3 * time.Second
	// DefaultInitialBackoff is the default of Options.InitialBackoff.
	DefaultInitialBackoff = 250 * time.Millisecond
	// DefaultMaxBackoff is the default of Options.MaxBackoff: one user's
	// bridge comes back within about a second of a server's restart (the
	// server's SSE retry field, when larger, is honoured as is).
	DefaultMaxBackoff = time.Second
)

// oneWayQueue bounds the host's messages waiting to be sent, in order, to
// the server (messages); a full queue holds back the reading of the host's
// next message.
const oneWayQueue = 64

// ErrUnreachable is wrapped by Run's error when the host's first
// initialize could make no connection to the server within
// Options.StartTimeout.
var ErrUnreachable = errors.New("cannot reach the MCP server")

// Options configures Run.
type Options struct {
	// URL is the server's MCP endpoint, e.g. "https://mcp.example.com/mcp".
	URL string
	// Header is added to every request to the server (Authorization).
	Header http.Header
	// HTTPClient sends the requests. Nil: a client without a timeout
	// (streams stay open for the length of a call).
	HTTPClient *http.Client
	// ResumeTimeout bounds how long a call waits on a broken stream, on an
	// unreachable server, on 503s and on a re-initialization before it
	// fails (client.Transport.ResumeTimeout). Zero: DefaultResumeTimeout.
	ResumeTimeout time.Duration
	// StartTimeout bounds how long the host's first initialize retries a
	// server it cannot connect to. Zero: DefaultStartTimeout; negative: no
	// retry.
	StartTimeout time.Duration
	// InitialBackoff and MaxBackoff are the first wait and the cap of the
	// waits between resumes (client.Transport). Zero: DefaultInitialBackoff,
	// DefaultMaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// MaxCalls bounds the host's calls in flight toward the server (from
	// their sending to their answer reaching the host, or the host's
	// cancellation); MaxQueued bounds those waiting beyond it, in the
	// order they came. A call past both is answered at once with -32603,
	// error.data.reason too_many_calls, and never sent. Zero:
	// DefaultMaxCalls, DefaultMaxQueued.
	MaxCalls, MaxQueued int
	// MaxEventSize bounds one SSE event of the server's, in bytes
	// (client.Transport.MaxEventSize): a call whose answer holds a larger
	// one fails. Zero: client.DefaultMaxEventSize.
	MaxEventSize int
	// Logger receives the bridge's and the transport's log lines. Nil:
	// slog.Default().
	Logger *slog.Logger
	// Protocol is the era spoken to the server: ProtocolAuto (or ""),
	// ProtocolStateful or ProtocolSessionless (the rule: PickEra).
	Protocol string
	// ProbeHTTPClient sends ProtocolAuto's server/discover probe. Nil:
	// HTTPClient. tidemark connect gives one without OAuth, so that the
	// probe never starts an authorization: a server that answers it 401
	// is taken to serve the stateful era.
	ProbeHTTPClient *http.Client
}

// bridge is one run of Run.
type bridge struct {
	o      Options
	host   mcp.Connection
	server mcp.Connection
	logger *slog.Logger
	ctx    context.Context // ends when Run returns
	wg     sync.WaitGroup  // the goroutines of calls and of notices to the host
	gate   *gate           // the host's calls in flight and queued

	mu sync.Mutex
	// state is what the host set on the session (engine.State.Fold of its
	// messages and the server's answers): replayed on a new session.
	state engine.State
	// pending are the host's state-changing calls awaiting their answers.
	pending map[jsonrpc.ID]*jsonrpc.Request
	// lists are the list_changed notifications the host gets after a new
	// session: those of the lists the server's first initialize result
	// offers.
	lists []string
	// started reports that the host's first initialize was sent.
	started bool
	// settled holds, by the token of a session lost or retired (404,
	// 409), the channel closed once every call in flight at its loss has
	// ended (gate.watch): the host is told of the new session after that.
	settled map[string]<-chan struct{}
	// sending are the host's calls from their reading to the return of
	// their POST, each true once the host cancelled it meanwhile: such a
	// call's failed POST gets no answer toward the host.
	sending map[jsonrpc.ID]bool
}

// Run bridges host (the host's stdio connection, from HostTransport) and
// the server at o.URL until the host closes its end (nil), ctx ends
// (nil), host's Read fails otherwise (an error), or the host's first initialize cannot reach the server
// (an error wrapping ErrUnreachable, after the host got that initialize's
// error answer). The server's session is ended with DELETE on the way out.
func Run(ctx context.Context, host mcp.Connection, o Options) error {
	if o.ResumeTimeout <= 0 {
		o.ResumeTimeout = DefaultResumeTimeout
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxCalls <= 0 {
		o.MaxCalls = DefaultMaxCalls
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = DefaultMaxQueued
	}
	switch o.Protocol {
	case ProtocolSessionless:
		return runSessionless(ctx, host, o)
	case ProtocolStateful:
	case "", ProtocolAuto:
		if e := probeEra(ctx, o); e.Pick == ProtocolSessionless {
			o.Logger.Info("connect: the server serves only the sessionless era: protocol "+ProtocolSessionless, "supported", e.Supported, "tasks", e.Tasks)
			return runSessionless(ctx, host, o)
		} else {
			o.Logger.Debug("connect: stateful era", "supported", e.Supported, "discover_error", e.Err)
		}
	default:
		return fmt.Errorf("connect: Options.Protocol %q: want %q, %q or %q", o.Protocol, ProtocolAuto, ProtocolStateful, ProtocolSessionless)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &bridge{o: o, host: host, logger: o.Logger, ctx: ctx, gate: newGate(o.MaxCalls, o.MaxQueued),
		pending: make(map[jsonrpc.ID]*jsonrpc.Request), sending: make(map[jsonrpc.ID]bool),
		settled: make(map[string]<-chan struct{})}
	t := &client.Transport{
		Endpoint:       o.URL,
		HTTPClient:     o.HTTPClient,
		Header:         o.Header,
		InitialBackoff: o.InitialBackoff,
		MaxBackoff:     o.MaxBackoff,
		ResumeTimeout:  o.ResumeTimeout,
		MaxEventSize:   o.MaxEventSize,
		StartTimeout:   o.StartTimeout,
		HeaderTimeout:  o.ResumeTimeout,
		OnEvent:        b.onEvent,
		Restore:        b.restore,
		Logger:         o.Logger,
		// A session the bridge opened on its own and the host has not
		// used yet waits, once lost, for the host's next message: two
		// idle bridges of a server that ends idle sessions to make room
		// would otherwise take the one room from each other for ever.
		DeferIdleRenewal: true,
	}
	server, err := t.Connect(ctx)
	if err != nil {
		return err
	}
	b.server = server
	fromServer := make(chan struct{})
	go func() {
		defer close(fromServer)
		b.fromServer()
	}()
	oneWay := make(chan jsonrpc.Message, oneWayQueue)
	toServer := make(chan struct{})
	go func() {
		defer close(toServer)
		for m := range oneWay {
			req, ok := m.(*jsonrpc.Request)
			if ok && req.IsCall() {
				b.admit(req)
				continue
			}
			if ok && b.unqueued(req) {
				continue
			}
			b.sendOneWay(m)
			if !ok {
				continue
			}
			if id, cancelled := cancelledID(req); cancelled {
				// The host expects no answer to a call it cancelled
				// (MCP 2025-11-25, "Cancellation").
				b.gate.done(id)
			}
		}
	}()
	err = b.fromHost(oneWay)
	close(oneWay)
	<-toServer
	cancel()
	server.Close() // ends the session; fromServer's Read then ends
	<-fromServer
	b.wg.Wait()
	return err
}

// fromHost reads the host's messages and sends them on, in order,
// through oneWay: a call starts once the server took the host's earlier
// notifications and answers (notifications/initialized comes before the
// first call, MCP 2025-11-25, "Lifecycle"), in a goroutine of its own (a
// call's POST may be retried for a while). The host's first initialize is
// sent before anything else is read, so that an unreachable server ends
// the bridge.
func (b *bridge) fromHost(oneWay chan<- jsonrpc.Message) error {
	for {
		msg, err := b.host.Read(b.ctx)
		if err != nil {
			if errors.Is(err, io.EOF) || b.ctx.Err() != nil {
				return nil
			}
			// Nothing more can be read from the host.
			return fmt.Errorf("reading the host's messages: %w", err)
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok || !req.IsCall() {
			b.mu.Lock()
			started := b.started
			b.mu.Unlock()
			if !started {
				b.dropEarly(msg)
				continue
			}
			if ok {
				b.fold(req)
				b.cancelling(req)
			}
			select {
			case oneWay <- msg:
			case <-b.ctx.Done():
				return nil
			}
			continue
		}
		b.mu.Lock()
		early := !b.started && req.Method != "initialize"
		b.mu.Unlock()
		if early {
			b.beforeInitialize(req)
			continue
		}
		b.track(req)
		b.mu.Lock()
		b.sending[req.ID] = false
		first := req.Method == "initialize" && !b.started
		if first {
			b.started = true
		}
		b.mu.Unlock()
		if first {
			sent, err := b.call(req)
			if err != nil {
				return err
			}
			if !sent {
				b.unstart()
			}
			continue
		}
		select {
		case oneWay <- req:
		case <-b.ctx.Done():
			return nil
		}
	}
}

// admit starts the host's call req, queues it, or answers it with
// busyError (gate, Admit). The sending of the host's messages goes on
// meanwhile: a queued call waits for an answer, which may need the host's
// answer to a request of the server's.
func (b *bridge) admit(req *jsonrpc.Request) {
	a, inFlight, queued := b.gate.admit(req.ID, func() {
		b.wg.Go(func() {
			if b.ctx.Err() == nil {
				b.call(req)
			}
		})
	})
	switch a {
	case AdmitQueue:
		if queued == 0 {
			b.logger.Info("connect: calls queued: the host has the most calls in flight --max-calls allows", "in_flight", inFlight, "max_calls", b.o.MaxCalls)
		}
	case AdmitRefuse:
		b.untrack(req.ID)
		b.mu.Lock()
		delete(b.sending, req.ID)
		b.mu.Unlock()
		b.logger.Warn("connect: call refused: the bridge's queue is full; not sent", "method", req.Method, callID(b.host, req.ID), "in_flight", inFlight, "queued", queued, "reason", replay.ReasonTooManyCalls)
		b.toHost(&jsonrpc.Response{ID: req.ID, Error: busyError(b.o.MaxCalls, b.o.MaxQueued)})
	}
}

// unqueued reports whether the host's notification req cancels a call
// still queued (gate.drop): that call is never sent, and neither is the
// notification, which names a call the server never got.
func (b *bridge) unqueued(req *jsonrpc.Request) bool {
	id, ok := cancelledID(req)
	if !ok || !b.gate.drop(id) {
		return false
	}
	b.untrack(id)
	b.mu.Lock()
	delete(b.sending, id)
	b.mu.Unlock()
	return true
}

// cancelledID returns the id of the call the host's notifications/
// cancelled req names.
func cancelledID(req *jsonrpc.Request) (jsonrpc.ID, bool) {
	if req.Method != "notifications/cancelled" {
		return jsonrpc.ID{}, false
	}
	var p mcp.CancelledParams
	if json.Unmarshal(req.Params, &p) != nil {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	return id, err == nil
}

// call sends the host's call req to the server and reports whether the
// server took it. When the transport refuses it, the host gets the error
// answer (the transport will not answer it), unless the host cancelled
// the call meanwhile: the transport then stops the call's POST, and a
// cancelled request gets no answer (MCP 2025-11-25, "Cancellation"). An
// initialize that could not connect is also returned, wrapped in
// ErrUnreachable.
func (b *bridge) call(req *jsonrpc.Request) (sent bool, _ error) {
	err := b.server.Write(b.ctx, req)
	b.mu.Lock()
	cancelled := b.sending[req.ID]
	delete(b.sending, req.ID)
	b.mu.Unlock()
	if err == nil {
		return true, nil
	}
	if b.ctx.Err() != nil {
		return false, nil
	}
	defer b.gate.done(req.ID)
	b.untrack(req.ID)
	if cancelled {
		b.logger.Debug("connect: call cancelled by the host before the server took it; no answer", "method", req.Method, callID(b.host, req.ID), "error", err)
		return false, nil
	}
	werr := b.hostError(err)
	id := callID(b.host, req.ID) // before the answer frees the host's id
	b.toHost(&jsonrpc.Response{ID: req.ID, Error: werr})
	if req.Method == "initialize" && reasonOf(werr) == replay.ReasonServerUnreachable.String() {
		// Run's error is the one line that says it.
		cause := err
		if op := dialError(err); op != nil {
			cause = op
		}
		return false, fmt.Errorf("%w at %s: %v", ErrUnreachable, redact.URL(b.o.URL), cause)
	}
	b.logger.Warn(failedLine(err), "method", req.Method, id, "reason", reasonOf(werr), "error", err)
	return false, nil
}

// failedLine is the log message of a call the transport gave up with err:
// whether it never reached the server, the server refused it, or it was
// sent and may have run, or ran (client.CallError's NotSent and Ran).
func failedLine(err error) string {
	var ce *client.CallError
	var se *client.StatusError
	switch {
	case errors.As(err, &ce) && ce.NotSent:
		return "connect: call failed before it reached the server"
	case errors.As(err, &ce) && ce.Ran:
		return "connect: call failed after the server ran it"
	case errors.As(err, &ce):
		return "connect: call failed after it was sent; it may have run"
	case errors.As(err, &se):
		return "connect: call refused by the server"
	}
	return "connect: call failed before the server took it"
}

// unstart records that the host's first initialize failed: the host has
// no session, so until its next initialize its calls are answered by the
// bridge (beforeInitialize) and its notifications dropped (dropEarly), as
// before any initialize; sent, each would be refused 400
// session_required. Its next initialize is its first again.
func (b *bridge) unstart() {
	b.mu.Lock()
	b.started = false
	b.mu.Unlock()
	b.logger.Info("connect: the host's initialize failed; tidemark connect answers its calls until its next initialize")
}

// beforeInitialize answers the host's call req, which came before its
// initialize: such a call has no session to go to, and only ping may
// precede initialize (MCP 2025-11-25, "Lifecycle"). A ping is answered
// with an empty result: either side may ping at any time (MCP 2025-11-25,
// "Ping"), and with no session yet the bridge is the counterpart that
// answers; sent, it would be refused 400 session_required.
func (b *bridge) beforeInitialize(req *jsonrpc.Request) {
	if req.Method == "ping" {
		b.logger.Debug("connect: ping before the host's initialize; answered by tidemark connect", callID(b.host, req.ID))
		b.toHost(&jsonrpc.Response{ID: req.ID, Result: json.RawMessage("{}")})
		return
	}
	b.logger.Warn("connect: call before the host's initialize; answered with an error", "method", req.Method, callID(b.host, req.ID), "reason", replay.ReasonSessionRequired)
	data, _ := json.Marshal(map[string]string{"reason": replay.ReasonSessionRequired.String()}) // a string always encodes
	b.toHost(&jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
		Message: "send initialize first: tidemark connect sends no call to the MCP server before the host's initialize, and answers ping itself (MCP 2025-11-25, \"Lifecycle\")", Data: data}})
}

// dropEarly drops the host's notification or answer msg, which came
// before its initialize: there is no session to send it on (the server
// would refuse it, 400 session_required), and it belongs to none that
// comes later, so it is not held for one; a notification expects no
// answer (JSON-RPC 2.0, section 4.1). Before initialize a client sends
// nothing but ping (MCP 2025-11-25, "Lifecycle").
func (b *bridge) dropEarly(msg jsonrpc.Message) {
	if r, ok := msg.(*jsonrpc.Request); ok {
		b.logger.Warn("connect: notification before the host's initialize; dropped: send initialize first", "method", r.Method)
		return
	}
	b.logger.Warn("connect: answer before the host's initialize, to no request of the server's; dropped")
}

// cancelling marks the call that the host's notifications/cancelled req
// names, if its POST is still being sent.
func (b *bridge) cancelling(req *jsonrpc.Request) {
	id, ok := cancelledID(req)
	if !ok {
		return
	}
	b.mu.Lock()
	if _, ok := b.sending[id]; ok {
		b.sending[id] = true
	}
	b.mu.Unlock()
}

// sendOneWay sends a notification or an answer of the host's; a failure
// is logged (nothing awaits it).
func (b *bridge) sendOneWay(m jsonrpc.Message) {
	if err := b.server.Write(b.ctx, m); err != nil && b.ctx.Err() == nil {
		what := "response"
		if r, ok := m.(*jsonrpc.Request); ok {
			what = r.Method
		}
		b.logger.Warn("connect: message not delivered to the server", "method", what, "error", err)
	}
}

// fromServer reads what the transport delivers and passes it to the host:
// an error answer the transport made (a lost call) becomes a JSON-RPC
// error with a catalogue reason.
func (b *bridge) fromServer() {
	for {
		msg, err := b.server.Read(b.ctx)
		if err != nil {
			return
		}
		if r, ok := msg.(*jsonrpc.Response); ok {
			b.answered(r)
			if r.Error != nil {
				if _, wire := r.Error.(*jsonrpc.Error); !wire {
					werr := b.hostError(r.Error)
					b.logger.Warn("connect: call failed", callID(b.host, r.ID), "reason", reasonOf(werr), "error", r.Error)
					msg = &jsonrpc.Response{ID: r.ID, Error: werr}
				}
			}
		}
		b.toHost(msg)
		if r, ok := msg.(*jsonrpc.Response); ok {
			b.gate.done(r.ID) // the host has the answer
		}
	}
}

// toHost writes msg to the host; a failure (the host went away) is logged.
func (b *bridge) toHost(msg jsonrpc.Message) {
	if err := b.host.Write(context.WithoutCancel(b.ctx), msg); err != nil {
		b.logger.Debug("connect: message not delivered to the host", "error", err)
	}
}

// track records the host's state-changing call req until its answer.
func (b *bridge) track(req *jsonrpc.Request) {
	if !engine.ChangesState(req) {
		return
	}
	b.mu.Lock()
	b.pending[req.ID] = req
	b.mu.Unlock()
}

// untrack forgets the call id, which will get no answer from the server.
func (b *bridge) untrack(id jsonrpc.ID) {
	b.mu.Lock()
	delete(b.pending, id)
	b.mu.Unlock()
}

// fold records the host's notification req (notifications/initialized)
// in the state.
func (b *bridge) fold(req *jsonrpc.Request) {
	if !engine.ChangesState(req) {
		return
	}
	b.mu.Lock()
	b.state, _ = b.state.Fold(req, nil)
	b.mu.Unlock()
}

// answered folds the answer r of a state-changing call into the state;
// the first initialize's result says which lists the server has.
func (b *bridge) answered(r *jsonrpc.Response) {
	b.mu.Lock()
	defer b.mu.Unlock()
	req := b.pending[r.ID]
	if req == nil {
		return
	}
	delete(b.pending, r.ID)
	first := len(b.state.InitializeParams) == 0
	b.state, _ = b.state.Fold(req, r)
	if req.Method == "initialize" && first && r.Error == nil {
		b.lists = listsOf(r.Result)
	}
	if req.Method == "initialize" && first && r.Error != nil {
		// The server took the host's first initialize and answered it
		// with an error: the host has no session either (unstart).
		b.started = false
		b.logger.Info("connect: the host's initialize failed; tidemark connect answers its calls until its next initialize")
	}
}

// listsOf returns the list_changed notifications of the lists an
// initialize result's capabilities offer (MCP 2025-11-25, "Lifecycle",
// capability negotiation): tools, prompts, resources.
func listsOf(result json.RawMessage) []string {
	var res struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
	}
	if json.Unmarshal(result, &res) != nil {
		return nil
	}
	var lists []string
	for _, l := range []string{"tools", "prompts", "resources"} {
		if _, ok := res.Capabilities[l]; ok {
			lists = append(lists, "notifications/"+l+"/list_changed")
		}
	}
	return lists
}

// restore is the transport's Restore: the calls that set again, on a new
// session, the log level and the subscriptions the host set (the
// session-state rule, engine.State.Restore; the transport has already
// sent initialize and notifications/initialized).
func (b *bridge) restore() []*jsonrpc.Request {
	b.mu.Lock()
	st := b.state
	b.mu.Unlock()
	return st.Restore(engine.State{ProtocolVersion: st.ProtocolVersion, InitializeParams: st.InitializeParams, Initialized: st.Initialized})
}

// onEvent is the transport's OnEvent. After a re-initialization the host
// is told that the lists it read may have changed, so that it reads them
// again, once every call in flight when the old session was lost or
// retired has ended: the calls the loss fails get their errors first, as
// docs/connect.md tells, even when the server reports the loss of a call
// only on its own stream, after another stream's 409 (the standalone
// stream's lists no call) has opened the new session. It must not block,
// so the notices go from a goroutine.
func (b *bridge) onEvent(e client.Event) {
	if e.Kind == client.EventFenced || e.Kind == client.EventSessionNotFound {
		b.mu.Lock()
		if _, ok := b.settled[e.Session]; !ok {
			b.settled[e.Session] = b.gate.watch()
		}
		b.mu.Unlock()
	}
	var large *client.EventTooLargeError
	if e.Kind == client.EventStreamLost && errors.As(e.Err, &large) && large.Standalone {
		b.oversized(e, large)
		return
	}
	if e.Deferred {
		b.logger.Info("connect: session lost before the host used it; a new one opens at the host's next message", "session", prefix(e.Session), "status", e.Status, "reason", e.Reason)
		return
	}
	if e.Kind != client.EventReinitialized {
		return
	}
	b.mu.Lock()
	lists := b.lists
	settled := b.settled[e.Session]
	delete(b.settled, e.Session)
	b.mu.Unlock()
	b.logger.Info("connect: new session; the host is told to read its lists again", "session", prefix(e.Session), "new_session", prefix(e.NewSession), "notifications", len(lists))
	b.wg.Go(func() {
		if settled != nil {
			select {
			case <-settled:
			case <-b.ctx.Done():
				return
			}
		}
		for _, m := range lists {
			b.toHost(&jsonrpc.Request{Method: m, Params: json.RawMessage("{}")})
		}
	})
}

// oversized tells of an SSE event over Options.MaxEventSize on the server's
// standalone stream (event e, the transport's EventStreamLost): the
// message in it, a notification or a request of the server's that belongs
// to no call, is lost, and the transport has opened a new standalone
// stream past it, or none when the new one began with such an event too.
// A WARN line says so, and the host gets it as a notifications/message of
// level warning when it set a log level that shows warnings (MCP
// 2025-11-25, "Logging"); the host's calls go on.
func (b *bridge) oversized(e client.Event, large *client.EventTooLargeError) {
	msg := "the MCP server sent, on its standalone stream, an SSE event of more than " + strconv.Itoa(large.Max) +
		" bytes, more than tidemark connect reads in one event; the notification or request in it is lost: read your lists again if one may have changed"
	if large.Closed {
		msg += "; the server sent such an event again at once, so tidemark connect gets no more notifications from the server for this session (calls go on)"
	} else {
		msg += "; tidemark connect has opened a new standalone stream past it"
	}
	b.logger.Warn("connect: "+msg, "session", prefix(e.Session), "stream", e.Stream, "cursor", e.Cursor, "reason", replay.ReasonStreamLost)
	b.mu.Lock()
	level := b.state.LogLevel
	b.mu.Unlock()
	if !showsWarnings(level) {
		return
	}
	params, _ := json.Marshal(map[string]any{"level": "warning", "logger": "tidemark connect", "data": msg}) // strings always encode
	b.wg.Go(func() { b.toHost(&jsonrpc.Request{Method: "notifications/message", Params: params}) })
}

// showsWarnings reports whether a log level the host set with
// logging/setLevel shows messages of level warning (MCP 2025-11-25,
// "Logging": the levels of RFC 5424, debug the lowest).
func showsWarnings(level string) bool {
	switch level {
	case "debug", "info", "notice", "warning":
		return true
	}
	return false
}

// hostError returns the JSON-RPC error the host gets for err, a call's
// failure in the transport: the server's own JSON-RPC error as it is,
// otherwise code -32603 with error.data.reason a catalogue word
// (replay.ReasonRequestLost, ReasonStreamLost, ReasonServerUnreachable,
// ReasonServerRefused), error.data.status the HTTP status and
// error.data.serverReason the server's reason when known.
func (b *bridge) hostError(err error) *jsonrpc.Error {
	var we *jsonrpc.Error
	if errors.As(err, &we) && we.Code != -32005 { // -32005: the SDK's "rejected by transport" marker
		return we
	}
	var (
		reason  = replay.ReasonStreamLost
		status  int
		sreason string
		msg     string
	)
	var ce *client.CallError
	var se *client.StatusError
	var large *client.EventTooLargeError
	sent := errors.As(err, &ce) && !ce.NotSent
	switch {
	case dialError(err) != nil && !sent:
		reason = replay.ReasonServerUnreachable
		msg = "tidemark connect could not connect to the MCP server, so the call was not sent: check that the server runs at " + redact.URL(b.o.URL) + ", then send the call again"
	case errors.As(err, &ce) && ce.Method == "initialize" && ce.Session == "" && errors.Is(ce, client.ErrNoAnswer):
		// The first initialize: the server takes connections but does
		// not answer, which the host cannot tell from an unreachable one;
		// an initialize sent twice runs nothing.
		reason = replay.ReasonServerUnreachable
		msg = "the MCP server at " + redact.URL(b.o.URL) + " accepted the connection but did not answer initialize within --start-timeout: check that it runs and is not stopped, then start again"
	case errors.As(err, &ce) && errors.Is(ce, client.ErrSessionLost):
		reason, status, sreason = replay.ReasonRequestLost, ce.Status, ce.Reason
		msg = "the MCP server lost this call with its session (HTTP " + strconv.Itoa(ce.Status) + ") before answering it; it may or may not have run. tidemark connect has opened a new session: send the call again if running it twice is safe"
	case errors.As(err, &large):
		msg = "the MCP server's answer to this call holds an SSE event of more than " + strconv.Itoa(large.Max) + " bytes, more than tidemark connect reads in one event; the call was sent and may have run, but its answer cannot be read: ask the server for less (a narrower request, a smaller page)"
	case errors.As(err, &ce):
		status, sreason = ce.Status, ce.Reason
		msg = "the call's answer stream from the MCP server broke and could not be resumed; it may or may not have run: send it again if running it twice is safe"
	case errors.As(err, &se):
		reason, status, sreason = replay.ReasonServerRefused, se.Status, se.Reason
		msg = "the MCP server refused the call with HTTP " + strconv.Itoa(se.Status)
		if se.Message != "" {
			msg += ": " + se.Message
		}
	default:
		msg = "tidemark connect could not send the call to the MCP server: " + err.Error()
	}
	data := map[string]any{"reason": reason}
	if status != 0 {
		data["status"] = status
	}
	if sreason != "" {
		data["serverReason"] = sreason
	}
	raw, _ := json.Marshal(data) // strings and an int always encode
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg, Data: raw}
}

// reasonOf returns error.data.reason of e, for logs.
func reasonOf(e *jsonrpc.Error) string {
	var d struct {
		Reason string `json:"reason"`
	}
	json.Unmarshal(e.Data, &d)
	return d.Reason
}

// dialError returns the failure to connect inside err, or nil.
func dialError(err error) *net.OpError {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return op
	}
	return nil
}

// prefix shortens a session token for logs, as store.Prefix does on the
// server: tokens are credentials.
func prefix(token string) string {
	if len(token) <= 8 {
		return token
	}
	return token[:8] + "…"
}
