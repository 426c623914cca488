// This file holds one generation of a session, which is one upstream
// session: what it knows of that session, how client messages reach it,
// and how it ends (Close, or the loss of the upstream session).

package upstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/routing"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/internal/via"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
)

// failTimeout bounds how long the end of a generation spends storing the
// error responses of the calls it left unanswered.
const failTimeout = 10 * time.Second

// Methods the gateway reads.
const (
	methodInitialize  = "initialize"
	methodInitialized = "notifications/initialized"
	methodCancelled   = "notifications/cancelled"
	methodPing        = "ping"
)

// conn is one generation of one session: one upstream session.
type conn struct {
	e      *Engine
	token  string
	gen    uint64
	logger *slog.Logger
	out    engine.Outbox
	state  *engine.State // what a re-created session restores; nil: fresh

	ctx    context.Context // of the generation's upstream work; cancelled at its end
	cancel context.CancelFunc
	wg     sync.WaitGroup // the generation's goroutines

	doneOnce  sync.Once
	done      chan struct{} // closed when the generation has ended
	closeOnce sync.Once

	mu        sync.Mutex
	ended     bool        // no client message is taken any more
	lost      bool        // the upstream session answered 404
	session   string      // the upstream's Mcp-Session-Id; "" none (yet, or a stateless upstream)
	version   string      // the negotiated protocol version; "" before initialize
	header    http.Header // the forwarded headers of the latest client message
	calls     map[jsonrpc.ID]*call
	routes    *routing.Router // relates the upstream's messages to the client calls
	restoring *attempt        // the restore under way; nil when none is
	restored  bool            // the upstream session holds the state (always, for a fresh session)
	listening bool            // the standalone GET stream is open or being opened
	pings     uint64          // pings sent
	keep      bool            // Close keeps the upstream session (hibernation: engine.Suspender)

	// kept is the upstream session a hibernated generation kept, which
	// this one reattaches to (suspend.go); zero once the upstream no
	// longer knows it. Only the restore changes it.
	kept suspension
}

// call is a client call in flight upstream.
type call struct {
	id        jsonrpc.ID
	method    string
	header    http.Header        // the forwarded headers of the client request
	stop      context.CancelFunc // ends the upstream request that carries it
	bound     *time.Timer        // fails an initialize left unanswered (initializeUnanswered); nil for other calls
	cancelled bool               // the client sent notifications/cancelled for it
}

// attempt is one restore of a re-created session's state.
type attempt struct {
	done chan struct{}
	err  error // set before done closes
}

var _ engine.Session = (*conn)(nil)

func newConn(e *Engine, info engine.Info, out engine.Outbox) *conn {
	logger := info.Logger
	if logger == nil {
		logger = e.opts.Logger.With("session", redact.Token(info.Token), "generation", info.Generation)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{
		e: e, token: info.Token, gen: info.Generation, logger: logger, out: out, state: info.State,
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
		calls:    make(map[jsonrpc.ID]*call),
		routes:   routing.New(info.Generation),
		restored: info.State == nil,
		kept:     keptOf(info.State),
	}
}

// Done implements engine.Session.
func (c *conn) Done() <-chan struct{} { return c.done }

func (c *conn) closedErr() error {
	return fmt.Errorf("upstream: session %s gen %d: %w", redact.Token(c.token), c.gen, engine.ErrClosed)
}

// target returns what an upstream request for a client message with
// forwarded headers hdr carries.
func (c *conn) target(hdr http.Header) target {
	c.mu.Lock()
	defer c.mu.Unlock()
	return target{session: c.session, version: c.version, header: hdr}
}

// forwarded returns the Options.Forward headers of a client request and
// its Via (which the upstream requests made for it extend, so that a loop
// back to any process it passed is seen; package via), and keeps them as
// the session's latest for the requests the gateway makes on its own.
func (c *conn) forwarded(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	out := make(http.Header, len(c.e.forward)+1)
	if vs := h.Values(via.Header); len(vs) > 0 {
		out[via.Header] = append([]string(nil), vs...)
	}
	for _, name := range c.e.forward {
		if vs := h.Values(name); len(vs) > 0 {
			out[name] = append([]string(nil), vs...)
		}
	}
	c.mu.Lock()
	c.header = out
	c.mu.Unlock()
	return out
}

// latestHeader returns the forwarded headers of the latest client message.
func (c *conn) latestHeader() http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.header
}

// Deliver implements engine.Session: it sends msg to the upstream session.
// A call (a request with an ID) is handed over once its POST is written
// (its answer is read in the background); a notification or a response to
// a request of the upstream once the upstream has accepted it. A
// re-created session is restored first. Errors: one wrapping
// engine.ErrUnreachable when the upstream cannot be reached (or the
// restore could not reach it), one wrapping engine.ErrClosed once the
// generation has ended (the upstream session was lost meanwhile: the next
// request re-creates it), and a restore's failure.
func (c *conn) Deliver(ctx context.Context, msg jsonrpc.Message, req engine.Request) error {
	hdr := c.forwarded(req.Header)
	if err := c.ready(ctx, hdr); err != nil {
		return err
	}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if m.IsCall() {
			return c.deliverCall(m, hdr)
		}
		return c.deliverNotification(ctx, m, hdr)
	case *jsonrpc.Response:
		return c.deliverResponse(ctx, m, hdr)
	}
	return fmt.Errorf("upstream: session %s gen %d: unknown message type %T", redact.Token(c.token), c.gen, msg)
}

// deliverNotification sends a client notification upstream and waits, at
// most Options.Timeout, until the upstream accepts it.
func (c *conn) deliverNotification(ctx context.Context, m *jsonrpc.Request, hdr http.Header) error {
	if m.Method == methodCancelled {
		c.cancelCall(m)
	}
	if err := c.notify(ctx, m, hdr); err != nil {
		return c.deliveryFailed(m.Method, err)
	}
	if m.Method == methodInitialized {
		c.listen()
	}
	return nil
}

// cancelCall marks the call that notifications/cancelled m names as
// cancelled. The upstream may answer it still, or not at all (MCP
// 2025-11-25, utilities/cancellation: a receiver SHOULD NOT answer a
// cancelled request): unanswered after Options.Timeout, its upstream
// request ends and its stream gets an error with reason cancelled, so that
// it holds neither a connection nor a call slot.
func (c *conn) cancelCall(m *jsonrpc.Request) {
	c.mu.Lock()
	c.routes.FromClient(m)
	c.mu.Unlock()
	id, ok := routing.RequestID(m.Params)
	if !ok {
		return
	}
	c.mu.Lock()
	cl := c.calls[id]
	if cl != nil {
		cl.cancelled = true
	}
	c.mu.Unlock()
	if cl == nil {
		return
	}
	time.AfterFunc(c.e.opts.Timeout, func() {
		if c.take(id) == nil {
			return // answered
		}
		cl.stop() // after the take: the ended request must not answer it otherwise
		msg := fmt.Sprintf("the call was cancelled, and the upstream MCP server did not answer it within %v", c.e.opts.Timeout)
		c.logger.Info("call failed", "id", id.Raw(), "method", cl.method, "reason", replay.ReasonCancelled, "detail", msg)
		c.fail([]jsonrpc.ID{id}, replay.ReasonCancelled, msg)
	})
}

// deliverResponse sends the client's answer to a request of the upstream
// back under the upstream's ID; an answer to no such request in flight is
// dropped.
func (c *conn) deliverResponse(ctx context.Context, m *jsonrpc.Response, hdr http.Header) error {
	c.mu.Lock()
	out, ok := c.routes.FromClient(m)
	c.mu.Unlock()
	if !ok {
		c.logger.Warn("dropping a response to no upstream request in flight", "id", m.ID.Raw(),
			"reason", replay.ReasonUnknownResponse)
		return nil
	}
	if err := c.notify(ctx, out, hdr); err != nil {
		return c.deliveryFailed("response", err)
	}
	return nil
}

// deliveryFailed turns the failure to hand a client notification or
// response over into Deliver's error. An upstream that refuses it (an HTTP
// error) is logged and not the client's fault to retry: nil.
func (c *conn) deliveryFailed(what string, err error) error {
	var se *statusError
	switch {
	case errors.Is(err, errSessionLost):
		c.lose(err)
		return fmt.Errorf("%w; the session's next request opens a new upstream session: %w", c.closedErr(), err)
	case errors.As(err, &se):
		c.logger.Warn("the upstream refused a client message", "message", what, "status", se.status,
			"reason", replay.ReasonUpstreamError, "error", err)
		return nil
	}
	return err
}

// take removes call id from the calls in flight and returns it; nil when
// it is not in flight (answered, failed, or never delivered). Whoever
// takes a call answers it.
func (c *conn) take(id jsonrpc.ID) *call {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.calls[id]
	delete(c.calls, id)
	c.routes.Forget(id)
	if cl != nil && cl.bound != nil {
		cl.bound.Stop()
	}
	return cl
}

// clearCallsLocked forgets every call in flight, disarming their bounds,
// and returns their IDs. c.mu must be held.
func (c *conn) clearCallsLocked() []jsonrpc.ID {
	ids := make([]jsonrpc.ID, 0, len(c.calls))
	for id, cl := range c.calls {
		if cl.bound != nil {
			cl.bound.Stop()
		}
		ids = append(ids, id)
	}
	clear(c.calls)
	return ids
}

// send hands msg to the outbox. An outbox that refuses it for good (a
// newer generation owns the session, or the session ended) ends this
// generation quietly: nothing it sends can be stored any more.
func (c *conn) send(ctx context.Context, msg jsonrpc.Message, related jsonrpc.ID) {
	err := c.out.Send(ctx, msg, related)
	switch {
	case err == nil:
	case errors.Is(err, engine.ErrFenced), errors.Is(err, engine.ErrSessionEnded):
		c.logger.Info("the outbox refused a message for good; ending this generation's upstream work",
			"reason", replay.ReasonFenced, "error", err)
		c.end()
	case ctx.Err() == nil:
		c.logger.Warn("an upstream message was not stored", "reason", replay.ReasonStoreError, "error", err)
	}
}

// failCall answers call cl, if no one has yet, with a JSON-RPC internal
// error whose data holds reason and the generation.
func (c *conn) failCall(cl *call, reason replay.Reason, message string) {
	if c.take(cl.id) == nil {
		return
	}
	c.logger.Warn("call failed", "id", cl.id.Raw(), "method", cl.method, "reason", reason, "detail", message)
	c.fail([]jsonrpc.ID{cl.id}, reason, message)
}

// fail answers each call of ids with a JSON-RPC internal error with message
// and error.data {"generation": ..., "reason": reason}, so its stream ends.
func (c *conn) fail(ids []jsonrpc.ID, reason replay.Reason, message string) {
	data, _ := json.Marshal(map[string]any{"reason": reason, "generation": c.gen})
	ctx, cancel := context.WithTimeout(context.Background(), failTimeout)
	defer cancel()
	for _, id := range ids {
		resp := &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{
			Code: jsonrpc.CodeInternalError, Message: message, Data: data,
		}}
		if err := c.out.Send(ctx, resp, id); err != nil {
			c.logger.Warn("could not store the error response of a call", "id", id.Raw(),
				"reason", replay.ReasonStoreError, "error", err)
		}
	}
}

// lose ends the generation because the upstream session is gone (it
// answered 404): the calls in flight fail with upstream_session_lost, and
// the session's next request re-creates it at generation+1 with a new
// upstream session. The generation is over before its failed calls are
// answered, so that a client that resumes as soon as it reads one of those
// errors finds the session re-created (409 for the old streams).
func (c *conn) lose(cause error) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended, c.lost = true, true
	pending := c.clearCallsLocked()
	c.mu.Unlock()
	slices.SortFunc(pending, func(a, b jsonrpc.ID) int {
		return cmp.Compare(fmt.Sprint(a.Raw()), fmt.Sprint(b.Raw()))
	})
	c.cancel()
	c.finish()
	c.logger.Warn("upstream session lost; the session's next request opens a new one at the next generation",
		"reason", replay.ReasonUpstreamSessionLost, "calls_failed", len(pending), "error", cause)
	c.fail(pending, replay.ReasonUpstreamSessionLost, fmt.Sprintf("the upstream MCP server no longer knows this session's "+
		"upstream session (it restarted, or ended it) and did not answer this call; the session's next request "+
		"opens a new upstream session at generation %d: send the call again", c.gen+1))
}

// end ends the generation without answering its calls.
func (c *conn) end() {
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	c.cancel()
	c.finish()
}

// finish closes done, once, and lets the engine forget the generation.
func (c *conn) finish() {
	c.doneOnce.Do(func() {
		close(c.done)
		c.e.release(c)
	})
}

// Close implements engine.Session: it stops the generation's upstream work
// (the calls in flight get no response) and ends the upstream session it
// holds (heldLocked) with DELETE (MCP 2025-11-25, "Session Management"),
// in the background, within Options.Timeout; Engine.Close waits for those
// DELETEs. After Keep (the session hibernated) the upstream session is
// kept: no DELETE. It is idempotent.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.ended = true
		c.clearCallsLocked()
		c.mu.Unlock()
		c.cancel()
		// Read what the generation holds once a restore under way has
		// stopped: a reattach it cut leaves the kept session to end, and
		// a new session it opened and could not restore it has ended
		// itself (runRestore).
		c.wg.Wait()
		c.finish()
		c.mu.Lock()
		t, keep := c.heldLocked(), c.keep
		c.mu.Unlock()
		if t.session != "" && !keep {
			c.e.deleteSession(t, c.logger)
		}
	})
	return nil
}

// heldLocked returns the upstream session the generation holds, for the
// DELETE that ends it: the one it opened or reattached to or, while it has
// not reattached (the first client message has not come yet, or the ping
// failed), the one its predecessor kept, which no other generation takes
// (DESIGN.md, "Hibernation"); none once the upstream has lost it. The
// DELETE carries the forwarded headers of the latest client message.
// c.mu must be held.
func (c *conn) heldLocked() target {
	switch {
	case c.lost:
		return target{}
	case c.session != "":
		return target{session: c.session, version: c.version, header: c.header}
	case !c.restored:
		return target{session: c.kept.Session, version: c.kept.Version, header: c.header}
	}
	return target{}
}

// deleteSession ends an upstream session with DELETE, in the background.
// A 405 (the upstream does not let clients end sessions) is no fault.
func (e *Engine) deleteSession(t target, logger *slog.Logger) {
	e.deleting.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.opts.Timeout)
		defer cancel()
		req, err := e.newRequest(ctx, http.MethodDelete, nil, t)
		if err != nil {
			return
		}
		resp, err := e.do(req, nil)
		if err != nil {
			logger.Debug("could not end the upstream session", "error", err)
			return
		}
		wire.Drain(resp)
		logger.Debug("upstream session ended", "status", resp.StatusCode)
	})
}
