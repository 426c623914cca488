// tasks.go holds TaskTransport: the sessionless era's calls run as tasks
// of the Tasks extension (io.modelcontextprotocol/tasks, SEP-2663; protocol
// 2026-07-28), polled until they settle, across cuts and server restarts
// (DESIGN.md, "Tasks: the executor rule").

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/resume"
	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// ErrTaskCancelled is the sentinel of a call whose task settled
// `cancelled`: a tasks/cancel, not this call's context, stopped it (a call
// whose own context ends returns the context's error). Test with
// errors.Is.
var ErrTaskCancelled = errors.New("client: the task was cancelled")

// ErrTaskUnreachable is the sentinel of a call whose task could not be
// read: no tasks/get (or tasks/update) got an answer within
// TaskTransport.ResumeTimeout of the first that failed. The task may still
// run on the server, and TaskError.TaskID names it. Test with errors.Is.
var ErrTaskUnreachable = errors.New("client: the task's server could not be reached")

// TaskError is the error of a call that ran as a task and did not complete.
// Err is, by how it ended: the task's JSON-RPC error as the server sent it
// (*jsonrpc.Error: code, message and data, e.g. data.reason executor_lost)
// when it settled `failed`; ErrTaskCancelled when it settled `cancelled`;
// the JSON-RPC error of a tasks/get the server refused (e.g. -32602
// task_not_found, for a task the server forgot); a *StatusError for an
// HTTP refusal; ErrTaskUnreachable when no poll got an answer in time; an
// error about the answer when the server broke the extension's rules.
// errors.Is and errors.As see Err and Cause.
type TaskError struct {
	// TaskID is the task's taskId.
	TaskID string
	// Status is the task's last status seen: failed, cancelled, or the
	// working or input_required of a task the client lost sight of.
	Status string
	// Message is the task's last statusMessage; "" if none.
	Message string
	// Err says how the call ended (see above).
	Err error
	// Cause is the network failure behind ErrTaskUnreachable; nil if none.
	Cause error
}

// Error says which task ended how: "client: task 0123ABCD… failed: ...".
func (e *TaskError) Error() string {
	s := "client: task " + prefix(e.TaskID)
	if e.Status != "" {
		s += " (" + e.Status + ")"
	}
	s += ": " + e.Err.Error()
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns Err and Cause.
func (e *TaskError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// cancelTimeout bounds the tasks/cancel sent when the SDK gives a call up:
// it is best-effort, and Close waits for it.
const cancelTimeout = 5 * time.Second

// inputState starts the requestState of the input_required answers a
// TaskTransport gives the SDK; the SDK's retry carrying it goes to
// tasks/update, never to the server as a call.
const inputState = "tidemark-task-input:"

// TaskTransport is an mcp.Transport that runs an mcp.Client's tools/call
// as tasks of the Tasks extension (io.modelcontextprotocol/tasks,
// SEP-2663) when the server offers it, so that a call outlives the
// connection that started it in the sessionless era (protocol
// 2026-07-28), where nothing is resumed.
//
// It wraps Transport and watches the SDK's server/discover: when the
// answer lists the extension under capabilities.extensions, every
// tools/call declares it (params._meta["io.modelcontextprotocol/
// clientCapabilities"].extensions). An answer that is a CreateTaskResult
// (resultType "task") is not handed to the SDK: the transport polls
// tasks/get, with requests of its own sent straight to Endpoint, every
// pollIntervalMs (clamped to [MinPollInterval, MaxPollInterval]), and
// gives the call one answer when the task settles: `completed`, the
// task's result; `failed`, a *TaskError wrapping the task's JSON-RPC
// error as sent; `cancelled`, a *TaskError wrapping ErrTaskCancelled. A
// poll that cannot connect, is cut, or gets 408, 429 or a 5xx is sent
// again after the resume backoff (InitialBackoff, MaxBackoff, never
// sooner than a Retry-After) within ResumeTimeout of the first failure
// since the last answer; after it the call fails with
// ErrTaskUnreachable. A call whose context ends gets tasks/cancel
// (best-effort, within 5 seconds).
//
// An input_required task reaches the SDK as an input-required result
// (SEP-2322), which mcp.Client answers through its own elicitation,
// sampling and roots handlers and sends again; the transport sends those
// answers with tasks/update and polls on, and the call's final answer
// goes to the SDK's last request.
//
// The tools/call that creates a task goes through Transport. When
// Transport is an *mcp.StreamableClientTransport, the application/json
// answer of every tools/call is read whole before the SDK sees it, on a
// copy of the transport whose HTTPClient does so: an answer cut in its
// body fails that call with a *CallError wrapping ErrStreamLost (NotSent
// false; the call may run, as a task whose ID the client never read), and
// the connection goes on, where the SDK reading the body itself would end
// the whole ClientSession.
//
// At Connect the SDK sends server/discover, and falls back to initialize
// (the stateful era, where no call runs as a task) on any failure of it. A
// discover has no side effects, so one whose answer is cut (sent, and its
// connection broke before the answer was read) is sent again after the
// resume backoff, within ResumeTimeout of the first failure; when none is
// answered by then, the SDK falls back and the transport logs one WARN
// line. A discover that cannot connect is not sent again.
//
// Without the extension in server/discover (a server that does not offer
// it, or the stateful era, where the SDK sends initialize instead), every
// message passes through unchanged. Use each TaskTransport for one
// Connect.
type TaskTransport struct {
	// Transport carries the SDK's messages. Nil: an
	// mcp.StreamableClientTransport of Endpoint and HTTPClient.
	Transport mcp.Transport
	// Endpoint is the MCP endpoint the polls go to. Empty: Transport's own
	// Endpoint when Transport is an *mcp.StreamableClientTransport.
	Endpoint string
	// HTTPClient sends the polls. Nil: Transport's own HTTPClient when it
	// is an *mcp.StreamableClientTransport, else http.DefaultClient. Its
	// Timeout must be zero or longer than ResumeTimeout.
	HTTPClient *http.Client
	// Header is added to every poll (e.g. Authorization); the SDK's
	// transport sets its own. Nil: nothing.
	Header http.Header
	// InitialBackoff and MaxBackoff are the resume backoff of a failed
	// poll: InitialBackoff·2ⁿ capped at MaxBackoff, plus up to half again
	// of jitter. Default 500 ms and 30 s (DefaultInitialBackoff,
	// DefaultMaxBackoff).
	InitialBackoff, MaxBackoff time.Duration
	// ResumeTimeout bounds how long polls fail in a row before the call
	// fails with ErrTaskUnreachable; each poll's answer must also come
	// within it. Default 30 s (DefaultResumeTimeout).
	ResumeTimeout time.Duration
	// Logger receives one line per task created, settled, or lost from
	// sight, with its taskId prefix. Default slog.Default().
	Logger *slog.Logger
	// CancelOnClose makes Close send tasks/cancel for every task of a
	// call still pending (working, or awaiting the SDK's input answers),
	// all at once, best-effort, each within 5 seconds, and wait for them:
	// a client that goes away leaves no task of its own running (a bridge
	// whose host closed its end). A call whose CreateTaskResult has not
	// come names no task yet and is not cancelled. mcp.ClientSession.Close
	// waits for the calls in flight, so end their contexts first: the
	// SDK's own notifications/cancelled of a call given up goes out from
	// a goroutine of its own, which may come after Close began and then
	// carries nothing. Default false: Close
	// stops the polls and the tasks run on, on the server, where another
	// client may read them.
	CancelOnClose bool
}

// Connect implements mcp.Transport: it connects Transport and watches
// what passes.
func (t *TaskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	o := *t
	if st, ok := o.Transport.(*mcp.StreamableClientTransport); ok && st != nil {
		if o.Endpoint == "" {
			o.Endpoint = st.Endpoint
		}
		if o.HTTPClient == nil {
			o.HTTPClient = st.HTTPClient
		}
	}
	if o.Endpoint == "" {
		return nil, errors.New("client: TaskTransport.Endpoint is empty: the polls of tasks/get need the MCP endpoint URL")
	}
	if o.Transport == nil {
		o.Transport = &mcp.StreamableClientTransport{Endpoint: o.Endpoint, HTTPClient: o.HTTPClient}
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if st, ok := o.Transport.(*mcp.StreamableClientTransport); ok && st != nil {
		o.Transport = withWholeAnswers(st)
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
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	inner, err := o.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &taskConn{
		inner:  inner,
		opts:   o,
		ctx:    cctx,
		cancel: cancel,
		pumped: make(chan jsonrpc.Message),
		out:    make(chan jsonrpc.Message),
		ended:  make(chan struct{}),
		done:   make(chan struct{}),
		probes: make(map[jsonrpc.ID]*probe),
		calls:  make(map[jsonrpc.ID]*taskCall),
		parked: make(map[string]*taskCall),
	}
	c.wg.Go(c.pump)
	return c, nil
}

// taskConn is the connection of a TaskTransport.
type taskConn struct {
	inner  mcp.Connection
	opts   TaskTransport
	ctx    context.Context // cancelled by Close: ends the pump and the polls
	cancel context.CancelFunc

	pumped  chan jsonrpc.Message // what inner reads, one at a time
	out     chan jsonrpc.Message // the answers of calls that ran as tasks
	ended   chan struct{}        // closed when inner's Read failed (readErr)
	readErr error
	done    chan struct{} // closed by Close
	once    sync.Once
	wg      sync.WaitGroup // the pump, the polls and the cancels
	seq     atomic.Int64   // numbers the transport's own requests

	mu      sync.Mutex
	offered bool                     // server/discover listed the extension
	probes  map[jsonrpc.ID]*probe    // server/discover requests awaiting their answer
	calls   map[jsonrpc.ID]*taskCall // tools/call awaiting their answer, by the SDK's ID
	parked  map[string]*taskCall     // tasks awaiting the SDK's input answers, by requestState
	closed  bool
	lost    bool // a server/discover got no answer within ResumeTimeout
}

// taskCall is a tools/call of the SDK, and its task once it has one.
type taskCall struct {
	id      jsonrpc.ID      // the SDK's request the answer goes to
	meta    json.RawMessage // the _meta of the transport's tasks/* requests
	version string          // MCP-Protocol-Version of those requests
	task    string          // taskId; "" until the CreateTaskResult
	status  string          // the last status seen
	message string          // the last statusMessage seen
	wait    time.Duration   // the poll interval
	stop    context.CancelFunc
	gone    bool // the SDK gave the call up before its task was created
}

var _ mcp.Connection = (*taskConn)(nil)

// SessionID implements mcp.Connection: the wrapped connection's.
func (c *taskConn) SessionID() string { return c.inner.SessionID() }

// pump reads the wrapped connection for Read.
func (c *taskConn) pump() {
	for {
		m, err := c.inner.Read(c.ctx)
		if err != nil {
			c.readErr = err
			close(c.ended)
			return
		}
		select {
		case c.pumped <- m:
		case <-c.done:
			return
		}
	}
}

// Read implements mcp.Connection: the wrapped connection's messages,
// except the CreateTaskResults it keeps, and the answers of calls that ran
// as tasks.
func (c *taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		select {
		case m := <-c.out:
			return m, nil
		case m := <-c.pumped:
			if m = c.inbound(m); m != nil {
				return m, nil
			}
		case <-c.ended:
			return nil, c.readErr
		case <-c.done:
			return nil, io.EOF
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// inbound returns m as the SDK gets it: nil for a CreateTaskResult, which
// starts the polls instead.
func (c *taskConn) inbound(m jsonrpc.Message) jsonrpc.Message {
	r, ok := m.(*jsonrpc.Response)
	if !ok {
		return m
	}
	c.mu.Lock()
	if pr := c.probes[r.ID]; pr != nil {
		c.mu.Unlock()
		if r = c.discoverAnswer(pr, r); r == nil {
			return nil
		}
		return r
	}
	tc := c.calls[r.ID]
	if tc == nil {
		c.mu.Unlock()
		return m
	}
	var s taskStep
	var err error
	if r.Error == nil && isTask(r.Result) {
		s, err = readTask(r.Result, 0)
	}
	if s.id == "" {
		// Not a task: the answer goes to the SDK as it is.
		delete(c.calls, r.ID)
		c.mu.Unlock()
		return m
	}
	tc.task, tc.status, tc.message, tc.wait = s.id, s.status, s.message, s.wait
	gone := tc.gone
	if gone {
		delete(c.calls, r.ID)
	}
	c.mu.Unlock()
	c.opts.Logger.Debug("client: task created", "task", tasks.Prefix(tc.task), "poll", tc.wait)
	// A CreateTaskResult carries no result nor error: the polls fetch
	// them, the first at once when the task is no longer working.
	first := s.wait
	if _, known := tasks.ParseStatus(s.status); known {
		err = nil
		if s.status != tasks.Working.String() {
			first = 0
		}
	}
	switch {
	case gone:
		c.cancelTask(tc)
	case err != nil:
		c.finish(tc, c.taskError(tc, err, nil))
	default:
		c.follow(tc, first, s.wait, nil)
	}
	return nil
}

// Write implements mcp.Connection. A tools/call declares the extension
// when the server offered it; the SDK's retry of an input_required task
// goes to tasks/update; the SDK's notifications/cancelled of a call that
// runs as a task becomes tasks/cancel.
func (c *taskConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok {
		switch {
		case req.IsCall() && req.Method == "server/discover":
			return c.writeDiscover(ctx, req)
		case req.IsCall() && req.Method == "initialize":
			c.warnFallback()
		case req.IsCall() && req.Method == "tools/call":
			return c.writeCall(ctx, req)
		case !req.IsCall() && req.Method == "notifications/cancelled":
			if c.cancelled(req) {
				return nil
			}
		}
	}
	return c.inner.Write(ctx, msg)
}

// writeCall sends a tools/call of the SDK, or answers an input_required
// task with it.
func (c *taskConn) writeCall(ctx context.Context, req *jsonrpc.Request) error {
	params := wire.DecodeObject(req.Params)
	if state := params.Str("requestState"); len(state) > len(inputState) && state[:len(inputState)] == inputState {
		c.mu.Lock()
		tc := c.parked[state]
		delete(c.parked, state)
		if tc != nil {
			tc.id = req.ID
			c.calls[req.ID] = tc
		}
		c.mu.Unlock()
		if tc == nil {
			return rejected{fmt.Errorf("client: tools/call carries requestState %q, which no task of this connection awaits", state)}
		}
		answers := params["inputResponses"]
		if len(answers) == 0 {
			answers = json.RawMessage(`{}`)
		}
		c.follow(tc, 0, tc.wait, answers)
		return nil
	}
	c.mu.Lock()
	offered := c.offered
	c.mu.Unlock()
	out := req
	if offered {
		params = withDeclaration(params)
		out = &jsonrpc.Request{ID: req.ID, Method: req.Method, Params: mustJSON(params)}
	}
	meta := wire.DecodeObject(params["_meta"])
	tc := &taskCall{id: req.ID, meta: taskMeta(meta), version: meta.Str(wire.MetaProtocolVersion)}
	c.mu.Lock()
	c.calls[req.ID] = tc
	c.mu.Unlock()
	if err := c.inner.Write(markWholeAnswer(ctx), out); err != nil {
		c.mu.Lock()
		if c.calls[req.ID] == tc {
			delete(c.calls, req.ID)
		}
		c.mu.Unlock()
		var cut *answerCutError
		if ctx.Err() == nil && errors.As(err, &cut) {
			// The SDK's Write marks the error as concerning this call
			// only; so does rejected.
			return rejected{&CallError{Method: req.Method, ID: req.ID, Session: c.SessionID(), Err: ErrStreamLost, Cause: cut}}
		}
		return err
	}
	return nil
}

// cancelled handles the SDK's notifications/cancelled, and reports whether
// it is done with it: for a call that runs as a task, the transport stops
// polling and sends tasks/cancel, and the notification, whose request the
// server has answered, goes no further.
func (c *taskConn) cancelled(req *jsonrpc.Request) bool {
	var p mcp.CancelledParams
	if json.Unmarshal(req.Params, &p) != nil {
		return false
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return false
	}
	c.mu.Lock()
	tc := c.calls[id]
	if tc == nil {
		c.mu.Unlock()
		return false
	}
	if tc.task == "" {
		// The server has not answered yet: the notification may stop the
		// call there; a task it creates still is cancelled.
		tc.gone = true
		c.mu.Unlock()
		return false
	}
	delete(c.calls, id)
	stop := tc.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	c.cancelTask(tc)
	return true
}

// Close implements mcp.Connection: it stops the polls (the tasks run on,
// on the server, unless CancelOnClose), waits for the tasks/cancel under
// way, and closes the wrapped connection.
func (c *taskConn) Close() error {
	var err error
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		var open []*taskCall
		if c.opts.CancelOnClose {
			seen := make(map[string]bool)
			for _, tc := range c.calls {
				if tc.task != "" && !seen[tc.task] {
					seen[tc.task] = true
					open = append(open, tc)
				}
			}
			for _, tc := range c.parked {
				if !seen[tc.task] {
					seen[tc.task] = true
					open = append(open, tc)
				}
			}
		}
		clear(c.parked)
		c.mu.Unlock()
		c.cancelOpen(open)
		close(c.done)
		err = c.inner.Close()
		c.cancel()
		c.wg.Wait()
	})
	return err
}

// cancelOpen sends tasks/cancel for each task of open, the tasks of calls
// still pending when Close began (CancelOnClose), at once, each within
// cancelTimeout, and returns when all are answered or given up. Each
// outcome is logged: a task whose tasks/cancel failed may still run.
func (c *taskConn) cancelOpen(open []*taskCall) {
	if len(open) == 0 {
		return
	}
	c.opts.Logger.Info("client: closing: tasks/cancel for the tasks still working", "tasks", len(open))
	var wg sync.WaitGroup
	for _, tc := range open {
		c.mu.Lock()
		stop := tc.stop
		c.mu.Unlock()
		if stop != nil {
			stop() // no more polls
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), cancelTimeout)
			defer cancel()
			r, err := c.request(ctx, tc, "tasks/cancel", map[string]any{"taskId": tc.task}, cancelTimeout)
			if err == nil && r.Error != nil {
				err = r.Error
			}
			if err != nil {
				c.opts.Logger.Warn("client: closing: tasks/cancel failed; the task may still run on the server", "task", tasks.Prefix(tc.task), "error", err)
				return
			}
			c.opts.Logger.Info("client: closing: task cancelled", "task", tasks.Prefix(tc.task))
		})
	}
	wg.Wait()
}

// spawn runs f in a goroutine Close waits for; once Close has begun it
// runs nothing and reports false.
func (c *taskConn) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Go(f)
	return true
}

// follow polls tc's task, after sending answers (nil: none) with
// tasks/update, first after first then every wait (or the interval the
// server sets), until the task settles, asks for input, or the call is
// given up.
func (c *taskConn) follow(tc *taskCall, first, wait time.Duration, answers json.RawMessage) {
	ctx, stop := context.WithCancel(c.ctx)
	c.mu.Lock()
	tc.stop = stop
	c.mu.Unlock()
	if !c.spawn(func() {
		defer stop()
		c.poll(ctx, tc, first, wait, answers)
	}) {
		stop()
	}
}

// poll is follow's goroutine.
func (c *taskConn) poll(ctx context.Context, tc *taskCall, first, wait time.Duration, answers json.RawMessage) {
	if answers != nil {
		r, err := c.request(ctx, tc, "tasks/update", map[string]any{"taskId": tc.task, "inputResponses": answers}, c.opts.ResumeTimeout)
		if ctx.Err() != nil {
			return
		}
		if err == nil && r.Error != nil {
			err = c.taskError(tc, r.Error, nil)
		}
		if err != nil {
			c.finish(tc, err)
			return
		}
	}
	s := taskStep{do: doPoll, wait: wait}
	for {
		switch s.do {
		case doComplete:
			c.settled(tc, s)
			c.deliver(tc, &jsonrpc.Response{ID: tc.id, Result: s.result})
			return
		case doFail:
			c.settled(tc, s)
			c.finish(tc, &TaskError{TaskID: tc.task, Status: s.status, Message: s.message, Err: s.err})
			return
		case doCancelled:
			c.settled(tc, s)
			c.finish(tc, &TaskError{TaskID: tc.task, Status: s.status, Message: s.message, Err: ErrTaskCancelled})
			return
		case doAsk:
			c.ask(tc, s)
			return
		}
		if !c.pending(tc) || !resume.Sleep(ctx, first) {
			return
		}
		r, err := c.request(ctx, tc, "tasks/get", map[string]any{"taskId": tc.task}, c.opts.ResumeTimeout)
		if ctx.Err() != nil {
			return
		}
		if err == nil && r.Error != nil {
			err = c.taskError(tc, r.Error, nil)
		}
		if err == nil {
			var rerr error
			if s, rerr = readTask(r.Result, s.wait); rerr != nil {
				err = c.taskError(tc, rerr, nil)
			} else if s.id != tc.task {
				err = c.taskError(tc, fmt.Errorf("%w: tasks/get of %s answered task %s", errTaskAnswer, tasks.Prefix(tc.task), tasks.Prefix(s.id)), nil)
			}
		}
		if err != nil {
			c.opts.Logger.Warn("client: task call failed", "task", tasks.Prefix(tc.task), "error", err)
			c.finish(tc, err)
			return
		}
		first = s.wait
		c.mu.Lock()
		tc.status, tc.message, tc.wait = s.status, s.message, s.wait
		c.mu.Unlock()
	}
}

// pending reports whether the SDK still awaits tc's answer.
func (c *taskConn) pending(tc *taskCall) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[tc.id] == tc
}

// settled logs a task that settled.
func (c *taskConn) settled(tc *taskCall, s taskStep) {
	c.opts.Logger.Debug("client: task settled", "task", tasks.Prefix(tc.task), "status", s.status)
}

// ask hands the SDK an input-required result (SEP-2322) carrying the
// task's inputRequests and a requestState of the transport's, by which it
// knows the SDK's retry.
func (c *taskConn) ask(tc *taskCall, s taskStep) {
	state := inputState + tc.task + ":" + strconv.FormatInt(c.seq.Add(1), 10)
	c.mu.Lock()
	if c.calls[tc.id] != tc || c.closed {
		c.mu.Unlock()
		return
	}
	delete(c.calls, tc.id)
	tc.status, tc.message, tc.wait = s.status, s.message, s.wait
	c.parked[state] = tc
	c.mu.Unlock()
	result := map[string]any{"content": []any{}, "resultType": "input_required", "inputRequests": s.inputs, "requestState": state}
	c.push(&jsonrpc.Response{ID: tc.id, Result: mustJSON(result)})
}

// deliver gives the SDK r, the answer of tc, once: not when the call was
// given up or answered already.
func (c *taskConn) deliver(tc *taskCall, r *jsonrpc.Response) {
	c.mu.Lock()
	mine := c.calls[tc.id] == tc
	if mine {
		delete(c.calls, tc.id)
	}
	c.mu.Unlock()
	if mine {
		c.push(r)
	}
}

// finish fails tc with err.
func (c *taskConn) finish(tc *taskCall, err error) {
	c.deliver(tc, &jsonrpc.Response{ID: tc.id, Error: err})
}

func (c *taskConn) push(m jsonrpc.Message) {
	select {
	case c.out <- m:
	case <-c.done:
	}
}

// taskError is the *TaskError of tc ending with err and cause.
func (c *taskConn) taskError(tc *taskCall, err, cause error) *TaskError {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &TaskError{TaskID: tc.task, Status: tc.status, Message: tc.message, Err: err, Cause: cause}
}

// cancelTask sends tasks/cancel for tc's task, best-effort, within
// cancelTimeout.
func (c *taskConn) cancelTask(tc *taskCall) {
	c.spawn(func() {
		ctx, stop := context.WithTimeout(context.WithoutCancel(c.ctx), cancelTimeout)
		defer stop()
		r, err := c.request(ctx, tc, "tasks/cancel", map[string]any{"taskId": tc.task}, cancelTimeout)
		if err == nil && r.Error != nil {
			err = r.Error
		}
		if err != nil {
			c.opts.Logger.Warn("client: tasks/cancel not sent", "task", tasks.Prefix(tc.task), "error", err)
			return
		}
		c.opts.Logger.Debug("client: task cancelled", "task", tasks.Prefix(tc.task))
	})
}

// request sends method about tc's task and returns the server's JSON-RPC
// response (a result or an error). A request that gets no answer (it
// cannot connect, is cut, or its answer does not come in time) or a
// transient refusal (408, 429, 5xx) is sent again as resume.Next decides,
// within bound of the first failure; then the error is a *TaskError
// wrapping ErrTaskUnreachable. Any other refusal is a *TaskError wrapping
// its *StatusError. tasks/get, tasks/update and tasks/cancel may be sent
// twice: the server ignores answers that are not outstanding, and
// cancelling is idempotent (SEP-2663).
func (c *taskConn) request(ctx context.Context, tc *taskCall, method string, params map[string]any, bound time.Duration) (*jsonrpc.Response, error) {
	params["_meta"] = tc.meta
	p := resume.Policy{Base: c.opts.InitialBackoff, Cap: c.opts.MaxBackoff, Timeout: bound}
	var since time.Time
	for attempt := 0; ; attempt++ {
		start := time.Now()
		deadline := start.Add(bound)
		if !since.IsZero() {
			deadline = since.Add(bound)
		}
		r, o := c.send(ctx, tc, method, params, deadline)
		if r != nil {
			return r, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if since.IsZero() {
			// The bound runs from the start of the first request that
			// failed: one whose answer never came counts whole.
			since = start
		}
		a := resume.Next(p, resume.State{Attempt: attempt, Elapsed: time.Since(since)}, o, rand.Float64())
		switch a.Do {
		case resume.Retry:
			if !resume.Sleep(ctx, a.Wait) {
				return nil, ctx.Err()
			}
			continue
		case resume.Expire:
			if !resume.Sleep(ctx, a.Wait) {
				return nil, ctx.Err()
			}
			cause := o.Err
			if o.Status != 0 {
				cause = statusError(method, o.Refusal)
			}
			c.opts.Logger.Warn("client: task out of sight", "task", tasks.Prefix(tc.task), "method", method, "error", cause)
			return nil, c.taskError(tc, ErrTaskUnreachable, cause)
		}
		return nil, c.taskError(tc, statusError(method, o.Refusal), nil)
	}
}

// send POSTs one request of method about tc's task, whose answer must
// come before deadline, and returns its JSON-RPC response; nil and the
// classified outcome (resume.Classify) when there is none.
func (c *taskConn) send(ctx context.Context, tc *taskCall, method string, params map[string]any, deadline time.Time) (*jsonrpc.Response, resume.Outcome) {
	id, _ := jsonrpc.MakeID("tidemark-task-" + strconv.FormatInt(c.seq.Add(1), 10))
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: method, Params: mustJSON(params)})
	if err != nil {
		return nil, resume.Outcome{Kind: resume.Refused, Err: err}
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	req, err := wire.NewRequest(rctx, http.MethodPost, c.opts.Endpoint, body, c.opts.Header, "", tc.version)
	if err != nil {
		return nil, resume.Outcome{Kind: resume.Refused, Err: err}
	}
	req.Header.Set(wire.HeaderMethod, method)
	req.Header.Set(wire.HeaderName, tc.task)
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, resume.Classify(resume.Answer{Err: err}, time.Now())
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, wire.MaxRefusalBody))
		return nil, resume.Classify(resume.Answer{Status: resp.StatusCode, MediaType: wire.MediaType(resp),
			RetryAfter: resp.Header.Get("Retry-After"), Body: data}, time.Now())
	}
	var r *jsonrpc.Response
	switch wire.MediaType(resp) {
	case wire.MediaSSE:
		r, err = sseResponse(resp.Body, id)
	default:
		r, err = jsonResponse(resp.Body, id)
	}
	if err != nil {
		// A cut or garbled answer: the next poll asks again.
		return nil, resume.Outcome{Kind: resume.RetryLater, Err: err}
	}
	return r, resume.Outcome{}
}

// jsonResponse reads the response to id from an application/json answer.
func jsonResponse(body io.Reader, id jsonrpc.ID) (*jsonrpc.Response, error) {
	data, err := io.ReadAll(io.LimitReader(body, DefaultMaxEventSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > DefaultMaxEventSize {
		return nil, fmt.Errorf("answer larger than %d bytes", DefaultMaxEventSize)
	}
	msgs, err := wire.DecodeAnswer(data)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if r, ok := m.(*jsonrpc.Response); ok && r.ID == id {
			return r, nil
		}
	}
	return nil, errors.New("answer without the response")
}

// sseResponse reads the response to id from an SSE answer.
func sseResponse(body io.Reader, id jsonrpc.ID) (*jsonrpc.Response, error) {
	rd := sse.NewReader(body, DefaultMaxEventSize)
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("answer stream ended without the response")
			}
			return nil, err
		}
		m, err := jsonrpc.DecodeMessage(ev.Data)
		if r, ok := m.(*jsonrpc.Response); err == nil && ok && r.ID == id {
			return r, nil
		}
	}
}

// mustJSON returns the encoding of v, which cannot fail for the values
// this file builds (maps, strings, numbers, raw JSON that was decoded).
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("client: encoding " + fmt.Sprintf("%T", v) + ": " + err.Error())
	}
	return b
}

// offersTasks reports whether a server/discover result lists the Tasks
// extension under capabilities.extensions (SEP-2663, "Capability
// Negotiation").
func offersTasks(result json.RawMessage) bool {
	ext := wire.DecodeObject(wire.DecodeObject(wire.DecodeObject(result)["capabilities"])["extensions"])
	v, ok := ext[tasks.ExtensionID]
	return ok && string(v) != "null"
}

// isTask reports whether a tools/call result is a CreateTaskResult
// (resultType "task"; SEP-2663, "Creating Tasks").
func isTask(result json.RawMessage) bool {
	return wire.DecodeObject(result).Str("resultType") == "task"
}

// withDeclaration returns params with the Tasks extension declared in its
// _meta's client capabilities, the other members kept (SEP-2663,
// "Capability Negotiation").
func withDeclaration(params wire.Object) wire.Object {
	meta := wire.DecodeObject(params["_meta"])
	caps := wire.DecodeObject(meta[wire.MetaClientCapabilities])
	ext := wire.DecodeObject(caps["extensions"])
	if v, ok := ext[tasks.ExtensionID]; ok && string(v) != "null" {
		return params
	}
	ext = ext.With(tasks.ExtensionID, json.RawMessage(`{}`))
	caps = caps.With("extensions", mustJSON(ext))
	meta = meta.With(wire.MetaClientCapabilities, mustJSON(caps))
	return params.With("_meta", mustJSON(meta))
}

// taskMeta returns the _meta of the transport's tasks/* requests about a
// call whose _meta is meta: its protocol version, client info and client
// capabilities, the extension declared (tasks/* require it; SEP-2663).
func taskMeta(meta wire.Object) json.RawMessage {
	out := wire.Object{}
	for _, k := range []string{wire.MetaProtocolVersion, wire.MetaClientInfo, wire.MetaClientCapabilities} {
		if v, ok := meta[k]; ok {
			out[k] = v
		}
	}
	return withDeclaration(wire.Object{"_meta": mustJSON(out)})["_meta"]
}
