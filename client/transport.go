// Package client is a resumable MCP Streamable HTTP transport for the
// go-sdk's mcp.Client (github.com/modelcontextprotocol/go-sdk v1.8.0). It
// speaks the stateful era of the protocol (versions 2025-03-26, 2025-06-18
// and 2025-11-25, "basic/transports") against any compliant server, and
// makes delivery to the SDK exactly-once where the SDK's own transport
// loses, repeats or hangs:
//
//   - Every stream is resumed: a POST response stream and the standalone
//     GET stream that break, or that the server closes before they are
//     finished (SEP-1699), are resumed with GET and Last-Event-ID after the
//     server's `retry` delay, then with exponential backoff, jitter and a
//     cap (Transport.InitialBackoff, MaxBackoff), never sooner than a
//     Retry-After.
//   - Event IDs are opaque. Each stream remembers the IDs it has processed
//     and drops an event whose ID comes again, so the SDK sees each event
//     once (EventDuplicate reports it).
//   - A 404 for the session (token unknown, evicted, deleted) or a 409 on
//     resume (the session's state was re-created, or the cursor compacted:
//     a replay would cross generations; DESIGN.md, "Where the rule
//     comes from") fails every call streaming on that session with a
//     *CallError wrapping ErrSessionLost, and a new session is started with
//     the original initialize parameters. A POST refused with 404 was not
//     executed, so it is sent again on the new session.
//   - A 409 whose body lists the requests the refused stream carried that
//     are lost (error.data.lostRequests, as Tidemark sends it) fails
//     exactly those calls, at once, with ErrSessionLost; the session's
//     other calls run on to their end, their server requests answered on
//     it. New messages go to a new session, as after any 409, and the old
//     one is ended with DELETE when its last call ends.
//   - A request of the server's (elicitation, sampling, roots/list, ping)
//     reaches the SDK under an id of the transport's own, "tidemark-N",
//     never given twice on the connection: a server numbers its requests
//     per session, from 1 again on a new one, so that its ids would let
//     the SDK's answer to a lost session's question answer the next
//     session's. The answer goes to the session that asked, under the
//     server's id. When that session is lost or ended, the SDK gets
//     notifications/cancelled for each of its requests still unanswered,
//     and an answer that still comes is dropped.
//   - An initialize of the SDK's on a connection that has a session opens
//     a new one; the old one is ended with DELETE once its last call ends
//     (at once when it carries none), its calls running on to their end.
//   - No call hangs on a broken stream or a lost session (the bounds
//     below).
//
// Bounds, with R = Transport.ResumeTimeout (30 s by default): after a
// call's stream breaks, the call receives a new event, or fails with
// ErrStreamLost, within R of the break (each resume GET must also get its
// answer's headers within what is left of R). A resume answered 404 or 409
// fails the call at once with ErrSessionLost. A POST that cannot connect,
// or that the server answers 503 with Retry-After or 429 (it did not take
// the request), is retried for at most R in all, and a call that waits for a
// re-initialization waits at most R for it. So, whatever the network and
// the server do, a call never waits longer than 3R without progress (R
// retrying its POST's connection or through 503s, R for a
// re-initialization, R resuming a broken stream before a new event arrives)
// before it fails with a *CallError. With Transport.HeaderTimeout set, a
// POST whose answer has not started fails the call within it; without, it
// waits as long as the call's context allows, as an intact stream does,
// as with any transport.
//
// Resumption exists only in the stateful era, so the transport answers the
// SDK's server/discover probe (protocol 2026-07-28, SEP-2575) itself with
// "method not found", on which mcp.Client falls back to initialize with
// 2025-11-25. Use the SDK's mcp.StreamableClientTransport for the
// sessionless era, wrapped in TaskTransport to run calls as tasks.
//
// State the SDK keeps per session (log level, resource subscriptions) is
// replayed on a new session only as Transport.Restore gives it: without
// Restore it must be set again after EventReinitialized.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// Defaults of Transport's fields.
const (
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultResumeTimeout  = 30 * time.Second
	// DefaultMaxEventSize bounds one SSE event, in bytes.
	DefaultMaxEventSize = 16 << 20
	// DefaultSeenIDs is how many processed event IDs each stream remembers
	// to drop repeated events.
	DefaultSeenIDs = 1 << 16
)

// deleteTimeout bounds the DELETE that ends a session on Close or after a
// 409: it is best-effort and must not hold the caller.
const deleteTimeout = 5 * time.Second

// Transport is an mcp.Transport that connects an mcp.Client to one
// Streamable HTTP endpoint with resumable streams; see the package comment.
// Use each Transport for one Connect.
type Transport struct {
	// Endpoint is the MCP endpoint URL, e.g. "http://127.0.0.1:8080/mcp".
	Endpoint string
	// HTTPClient sends the requests. Nil: http.DefaultClient. Its Timeout
	// must be zero (or longer than any call): streams stay open for the
	// length of a call.
	HTTPClient *http.Client
	// Header is added to every request (for example Authorization). Nil:
	// nothing.
	Header http.Header
	// InitialBackoff is the first reconnection delay when the server sent
	// no SSE `retry` field. Default 500 ms. Delay n (from 0) is
	// base·2ⁿ, capped at MaxBackoff, plus a random jitter of up to half of
	// it; base is the server's `retry` when it sent one (so the client never
	// reconnects sooner than the server asked), and a resume answered with
	// Retry-After (503, 429) is not sent again sooner (RFC 9110, section
	// 10.2.3).
	InitialBackoff time.Duration
	// MaxBackoff caps the exponential growth of reconnection delays (the
	// jitter adds up to half again). Default 30 seconds. A server `retry`
	// larger than MaxBackoff is honoured as is.
	MaxBackoff time.Duration
	// ResumeTimeout bounds how long a call waits on a broken stream: if no
	// new event arrives within it after the break, the call fails with
	// ErrStreamLost (at once when the server's `retry` or Retry-After
	// reaches past it). It also bounds retries of a POST that could not
	// connect and of a re-initialization. Default 30 seconds.
	ResumeTimeout time.Duration
	// MaxEventSize bounds one SSE event, in bytes; a larger event on a
	// call's stream fails the call at once (ErrStreamLost, Cause an
	// *EventTooLargeError), never resumed. Default 16 MiB.
	MaxEventSize int
	// SeenIDs is how many processed event IDs each stream remembers to drop
	// repeats (oldest forgotten first). Default 65536 (events).
	SeenIDs int
	// StartTimeout bounds the retries of the first initialize's POST while
	// no connection to the server can be made: a caller that must report
	// an unreachable server promptly (tidemark connect) sets it short.
	// Zero: ResumeTimeout. Negative: no retry, the first failure fails the
	// initialize.
	StartTimeout time.Duration
	// HeaderTimeout bounds how long a call's POST waits for the headers of
	// its answer once its body is sent: past it the call fails with a
	// *CallError wrapping ErrStreamLost and ErrNoAnswer (the server may
	// have taken it). The first initialize's bound is StartTimeout when
	// that is positive. Zero: no bound (a server that answers JSON only
	// once a long call ends is waited for).
	HeaderTimeout time.Duration
	// Restore, when set, gives the messages that bring a new session to
	// the state the SDK had set on the lost one (MCP 2025-11-25: the log
	// level, server/utilities/logging; resource subscriptions,
	// server/resources), e.g. engine.State.Restore. It is called once per
	// re-initialization, after notifications/initialized and before the
	// new session carries any message of the SDK. Each call among them is
	// sent and its answer awaited and consumed (the SDK never sees it; an
	// error answer is logged and the next message sent); a message that
	// cannot be sent fails the handshake, which is retried as a whole.
	// Their IDs must not be IDs the SDK uses ("tidemark-restore-N" are
	// not).
	Restore func() []*jsonrpc.Request
	// DeferIdleRenewal: a session the transport opened on its own (after a
	// loss, not for a message of the SDK's) that is lost in turn before the
	// SDK sent anything on it is not re-initialized at once: the SDK's next
	// message re-initializes, and waits for it as for any re-initialization
	// (Event.Deferred reports the wait). Two idle clients of a server that
	// evicts an idle session to make room for a new one (Tidemark without
	// hibernation; DESIGN.md, "Hibernation") would otherwise evict each
	// other for ever. A loss of the session the SDK's initialize opened, or
	// of one the SDK sent a message on, is re-initialized at once either
	// way. Default false: every loss is re-initialized at once.
	DeferIdleRenewal bool
	// DisableStandaloneStream: no GET stream for server-initiated messages
	// (MCP 2025-11-25, "Listening for Messages from the Server"). Default
	// false: the stream is opened after initialization and kept open.
	DisableStandaloneStream bool
	// OnEvent, when set, receives every resumption event (resumed,
	// session not found, fenced, re-initialized, stream lost, duplicate).
	// It is called synchronously from the transport's goroutines, possibly
	// concurrently, and must not block.
	OnEvent func(Event)
	// Logger receives one line per resumption event, with the session
	// token prefix, stream, cursor, status and reason. Default
	// slog.Default().
	Logger *slog.Logger
}

// Connect implements mcp.Transport. It sends nothing: the SDK's initialize
// request is the first POST.
func (t *Transport) Connect(ctx context.Context) (mcp.Connection, error) {
	if t.Endpoint == "" {
		return nil, errors.New("client: Transport.Endpoint is empty")
	}
	o := *t
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.ResumeTimeout <= 0 {
		o.ResumeTimeout = DefaultResumeTimeout
	}
	if o.MaxEventSize <= 0 {
		o.MaxEventSize = DefaultMaxEventSize
	}
	if o.SeenIDs <= 0 {
		o.SeenIDs = DefaultSeenIDs
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// The connection outlives Connect's context: streams are cancelled by
	// Close, not by the deadline the caller gave the handshake.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &conn{
		opts:     o,
		logger:   o.Logger,
		ctx:      cctx,
		cancel:   cancel,
		incoming: make(chan jsonrpc.Message, 16),
		done:     make(chan struct{}),
		closing:  make(chan struct{}),
		calls:    make(map[jsonrpc.ID]*call),
		origin:   make(map[jsonrpc.ID]origin),
		asked:    make(map[asked]jsonrpc.ID),
	}, nil
}

// conn is one logical MCP connection; it implements mcp.Connection.
type conn struct {
	opts   Transport
	logger *slog.Logger
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	incoming chan jsonrpc.Message
	done     chan struct{} // closed by Close
	// closing is closed when Close begins: no re-initialization starts
	// from then, and one waiting out a backoff stops.
	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // every goroutine the conn starts

	mu          sync.Mutex
	sess        *session        // the current session; nil before initialize is answered
	initParams  json.RawMessage // params of the SDK's initialize, replayed by renew
	initialized bool            // the SDK sent notifications/initialized
	calls       map[jsonrpc.ID]*call
	// retiring are the retired sessions that still carry calls (see
	// retire); each is ended when its last call ends.
	retiring []*session
	// origin maps the id under which the SDK got a server request to
	// where it came from, until the SDK answers it (origin.go); asked is
	// its inverse.
	origin         map[jsonrpc.ID]origin
	asked          map[asked]jsonrpc.ID
	serverRequests int64         // the server requests the SDK got
	closed         bool          // Close has begun: no goroutine may start
	renewing       chan struct{} // non-nil while a re-initialization runs; closed at its end
	renewErr       error         // outcome of the last re-initialization
	internalID     int64         // numbers the transport's own initialize requests
}

// session is one Mcp-Session-Id and what the transport knows of it.
type session struct {
	id      string // "" when the server does not use sessions
	version string // negotiated protocol version; "" until known

	lost     chan struct{} // closed when the server no longer serves it
	lostOnce sync.Once
	// lostStatus and lostReason say how the server refused the session
	// (404 or 409 and error.data.reason); written before lost is closed,
	// read only after.
	lostStatus int
	lostReason string
	// stopStandalone ends the standalone stream; guarded by conn.mu.
	stopStandalone context.CancelFunc

	// Guarded by conn.mu: retired is set when a 409 listed the lost
	// requests of one of its streams (no new message goes to s); calls
	// counts the pending calls accepted on s; posting counts the calls
	// whose POSTs to s are on their way (no answer's headers yet), which
	// a retired s also waits for before its DELETE; ended is set once s was
	// ended with DELETE after it retired; own is set when the transport
	// opened s on its own, after a loss and not for a message of the
	// SDK's; used once a message of the SDK's was sent on s
	// (Transport.DeferIdleRenewal).
	retired bool
	calls   int
	posting int
	ended   bool
	own     bool
	used    bool
}

func newSession(id string) *session { return &session{id: id, lost: make(chan struct{})} }

func (s *session) isLost() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

// call is a request of the SDK awaiting its response.
type call struct {
	id     jsonrpc.ID
	method string
	cancel context.CancelFunc // ends the call's stream
	// sess is the session whose server accepted the call (set once its
	// POST was answered 2xx); guarded by conn.mu.
	sess *session
}

var _ mcp.Connection = (*conn)(nil)

// SessionID implements mcp.Connection: the current session's token.
func (c *conn) SessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return ""
	}
	return c.sess.id
}

// Read implements mcp.Connection. It returns io.EOF once the connection is
// closed.
func (c *conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-c.incoming:
		return m, nil
	case <-c.done:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write implements mcp.Connection: it POSTs msg (MCP 2025-11-25, "Sending
// Messages to the Server"). For a call it returns once the server accepted
// the POST; the response arrives through Read. An error that concerns msg
// alone (a refusal, a lost stream) matches the SDK's ErrRejected, so the SDK
// fails that call and keeps the connection.
func (c *conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	select {
	case <-c.done:
		return mcp.ErrConnectionClosed
	default:
	}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if !m.IsCall() {
			return c.sendOneWay(ctx, m, m.Method, nil)
		}
		switch m.Method {
		case "server/discover":
			// Stateless era (SEP-2575): not resumable; decline so the SDK
			// initializes a session instead.
			c.push(&jsonrpc.Response{ID: m.ID, Error: &jsonrpc.Error{
				Code:    jsonrpc.CodeMethodNotFound,
				Message: "client: server/discover is not used: this transport speaks the stateful era (2025-03-26 to 2025-11-25)",
			}})
			return nil
		case "initialize":
			c.mu.Lock()
			c.initParams = append(json.RawMessage(nil), m.Params...)
			c.mu.Unlock()
		}
		return c.sendCall(ctx, m)
	case *jsonrpc.Response:
		// The answer goes to the session that asked, which may be
		// retired (fenceStream) and still running calls, under the
		// server's id; never to another session.
		o, ok := c.takeOrigin(m.ID)
		if !ok {
			c.logger.Warn("client: an answer to a request of the server's whose session is gone, or that the server cancelled; dropped", "id", m.ID.Raw())
			return nil
		}
		return c.sendOneWay(ctx, &jsonrpc.Response{ID: o.id, Result: m.Result, Error: m.Error}, "response", o.sess)
	default:
		return rejected{fmt.Errorf("client: cannot send message of type %T", msg)}
	}
}

// Close implements mcp.Connection: it ends the session, and any retired
// session still running calls, with DELETE (MCP 2025-11-25, "Session
// Management"; best-effort, bounded by 5 seconds), stops every stream and
// waits for the transport's goroutines. A session lost meanwhile (its
// server may end it first, answering its streams 404) is not opened
// again; a re-initialization already under way is waited for, since its
// initialize may have reached the server, and the session it opened is
// ended too.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		close(c.closing)
		renewing := c.renewing
		c.mu.Unlock()
		if renewing != nil {
			<-renewing
		}
		c.mu.Lock()
		s := c.sess
		retiring := append([]*session(nil), c.retiring...)
		c.mu.Unlock()
		var wg sync.WaitGroup
		for _, r := range retiring {
			if r != s && r.id != "" && !r.isLost() {
				wg.Go(func() { c.deleteSession(r) })
			}
		}
		if s != nil && s.id != "" && !s.isLost() {
			c.closeErr = c.deleteSession(s)
		}
		wg.Wait()
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		close(c.done)
		c.wg.Wait()
	})
	return c.closeErr
}

// spawn runs f in a goroutine that Close waits for; once Close has begun
// it runs nothing and reports false.
func (c *conn) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spawnLocked(f)
}

// spawnLocked is spawn for a caller that holds c.mu.
func (c *conn) spawnLocked(f func()) bool {
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// deliver hands msg to the SDK, exactly once per call for responses: a
// response whose call is no longer pending (it failed, was cancelled or was
// answered already) is dropped. It reports false when the connection
// closed first.
func (c *conn) deliver(msg jsonrpc.Message) bool {
	if r, ok := msg.(*jsonrpc.Response); ok {
		cl := c.takeCall(r.ID)
		if cl == nil {
			c.logger.Debug("client: response for no pending call dropped", "id", r.ID.Raw())
			return true
		}
		cl.cancel()
		if cl.method == "initialize" && r.Error == nil {
			var res struct {
				ProtocolVersion string `json:"protocolVersion"`
			}
			if json.Unmarshal(r.Result, &res) == nil {
				c.mu.Lock()
				if cl.sess != nil {
					cl.sess.version = res.ProtocolVersion
				}
				c.mu.Unlock()
			}
		}
	}
	return c.push(msg)
}

func (c *conn) push(msg jsonrpc.Message) bool {
	select {
	case c.incoming <- msg:
		return true
	case <-c.done:
		return false
	}
}

// takeCall removes and returns the pending call id; nil if there is none.
// A retired session whose last call this was is ended.
func (c *conn) takeCall(id jsonrpc.ID) *call {
	cl, drained := c.detachCall(id)
	if drained != nil {
		c.endRetired(drained)
	}
	return cl
}

// detachCall removes and returns the pending call id (nil if there is
// none), and the retired session it was the last call of, which the caller
// ends with endRetired.
func (c *conn) detachCall(id jsonrpc.ID) (*call, *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.calls[id]
	if cl == nil {
		return nil, nil
	}
	delete(c.calls, id)
	return cl, c.untrackLocked(cl)
}

// failCall ends a pending call with err, delivered as its response, and
// reports whether cl was still pending.
func (c *conn) failCall(cl *call, err error) bool {
	if cl == nil || c.takeCall(cl.id) == nil {
		return false
	}
	cl.cancel()
	c.push(&jsonrpc.Response{ID: cl.id, Error: err})
	return true
}

// emit reports e to OnEvent and the log.
func (c *conn) emit(e Event) {
	level := slog.LevelInfo
	switch e.Kind {
	case EventResumed, EventDuplicate:
		level = slog.LevelDebug
	case EventSessionNotFound, EventFenced, EventStreamLost:
		level = slog.LevelWarn
	}
	attrs := []any{"session", prefix(e.Session)}
	for _, kv := range [][2]string{{"new_session", prefix(e.NewSession)}, {"stream", e.Stream}, {"cursor", e.Cursor}, {"reason", e.Reason}} {
		if kv[1] != "" {
			attrs = append(attrs, kv[0], kv[1])
		}
	}
	if e.Status != 0 {
		attrs = append(attrs, "status", e.Status)
	}
	if e.Calls != 0 {
		attrs = append(attrs, "calls", e.Calls)
	}
	if e.Err != nil {
		attrs = append(attrs, "error", e.Err)
	}
	if e.Deferred {
		attrs = append(attrs, "deferred", true)
	}
	c.logger.Log(c.ctx, level, "client: "+e.Kind.String(), attrs...)
	if c.opts.OnEvent != nil {
		c.opts.OnEvent(e)
	}
}

// newRequest returns a request to the endpoint with the session's headers
// (none for a nil s).
func (c *conn) newRequest(ctx context.Context, method string, s *session, body []byte) (*http.Request, error) {
	var id, version string
	if s != nil {
		c.mu.Lock()
		id, version = s.id, s.version
		c.mu.Unlock()
	}
	return wire.NewRequest(ctx, method, c.opts.Endpoint, body, c.opts.Header, id, version)
}

// deleteSession ends s on the server, best-effort.
func (c *conn) deleteSession(s *session) error {
	ctx, cancel := context.WithTimeout(c.ctx, deleteTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodDelete, s, nil)
	if err != nil {
		return err
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("client: DELETE session %s: %w", prefix(s.id), err)
	}
	wire.Drain(resp)
	return nil
}

// sleep waits d, and reports false if the connection closed or stop was
// closed first.
func (c *conn) sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	case <-c.ctx.Done():
		return false
	case <-stop:
		return false
	}
}

// notSent reports whether err means the request never reached the server:
// the connection could not be made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
