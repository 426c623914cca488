// sessionless.go holds the bridge toward a server of the sessionless era
// (protocol 2026-07-28): the host keeps its own revision and session, the
// bridge answers its initialize from server/discover, and each host request
// goes to the server as a sessionless request of an mcp.Client, whose tool
// calls run as tasks when the server offers the Tasks extension (DESIGN.md,
// "The connect bridge").

package connect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/client"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/internal/resume"
	"github.com/tidemark-mcp/tidemark/replay"
)

// hostVersions are the revisions the bridge speaks toward the host in the
// sessionless mode, newest first: the stateful era's (MCP 2025-11-25,
// "Lifecycle", version negotiation).
var hostVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// sessionless is one run of Run toward a sessionless server.
type sessionless struct {
	o      Options
	host   mcp.Connection
	logger *slog.Logger
	ctx    context.Context
	wg     sync.WaitGroup // the host's calls in flight
	gate   *gate          // the host's calls in flight and queued
	seq    atomic.Int64   // numbers the bridge's requests to the host

	mu sync.Mutex
	cs *mcp.ClientSession
	// calls are the host's calls in flight, by ID: cancelled by the
	// host's notifications/cancelled.
	calls map[jsonrpc.ID]*hostCall
	// asks are the bridge's requests to the host (elicitation, sampling)
	// awaiting the host's answer.
	asks map[jsonrpc.ID]chan *jsonrpc.Response
}

type hostCall struct {
	cancel    context.CancelFunc
	cancelled bool // by the host: the call gets no answer
}

// runSessionless is Run toward a sessionless server.
func runSessionless(ctx context.Context, host mcp.Connection, o Options) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &sessionless{o: o, host: host, logger: o.Logger, ctx: ctx, gate: newGate(o.MaxCalls, o.MaxQueued),
		calls: make(map[jsonrpc.ID]*hostCall), asks: make(map[jsonrpc.ID]chan *jsonrpc.Response)}
	err := s.fromHost()
	cancel()
	s.wg.Wait()
	s.mu.Lock()
	cs := s.cs
	s.mu.Unlock()
	if cs != nil {
		cs.Close() // stops the polls and cancels the tasks still working (CancelOnClose)
	}
	return err
}

// fromHost reads the host's messages until it closes its end.
func (s *sessionless) fromHost() error {
	for {
		msg, err := s.host.Read(s.ctx)
		if err != nil {
			if errors.Is(err, io.EOF) || s.ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reading the host's messages: %w", err)
		}
		switch m := msg.(type) {
		case *jsonrpc.Response:
			s.mu.Lock()
			ch := s.asks[m.ID]
			delete(s.asks, m.ID)
			s.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case *jsonrpc.Request:
			if !m.IsCall() {
				s.notification(m)
				continue
			}
			s.mu.Lock()
			started := s.cs != nil
			s.mu.Unlock()
			switch {
			case m.Method == "initialize":
				if err := s.initialize(m); err != nil {
					return err
				}
			case m.Method == "server/discover":
				// The host speaks its own revision: it falls back to
				// initialize (MCP 2026-07-28, basic/lifecycle).
				s.toHost(&jsonrpc.Response{ID: m.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "tidemark connect speaks the host's stateful revision: send initialize"}})
			case !started && m.Method == "ping":
				// Either side may ping at any time (MCP 2025-11-25,
				// "Ping"); the era has no ping to send on (send).
				s.toHost(&jsonrpc.Response{ID: m.ID, Result: json.RawMessage("{}")})
			case !started:
				s.toHost(&jsonrpc.Response{ID: m.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "send initialize first (MCP 2025-11-25, \"Lifecycle\")"}})
			default:
				s.admit(m)
			}
		}
	}
}

// notification handles the host's notification req: notifications/
// cancelled ends the call's context (the SDK closes the call's stream, or
// cancels its task); the others have no counterpart in the sessionless
// era.
func (s *sessionless) notification(req *jsonrpc.Request) {
	if req.Method != "notifications/cancelled" {
		s.logger.Debug("connect: host notification not sent: the sessionless era has no session for it", "method", req.Method)
		return
	}
	var p mcp.CancelledParams
	if json.Unmarshal(req.Params, &p) != nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	if s.gate.drop(id) {
		return // queued: never sent, and no answer
	}
	s.mu.Lock()
	hc := s.calls[id]
	if hc != nil {
		hc.cancelled = true
	}
	s.mu.Unlock()
	if hc != nil {
		hc.cancel()
	}
}

// initialize answers the host's initialize from the server's
// server/discover answer, which the first one fetches: the host's
// requested revision when the bridge speaks it (else the newest), the
// server's info, instructions and capabilities without its extensions,
// which belong to the sessionless era. A first initialize that cannot
// connect within StartTimeout returns an error wrapping ErrUnreachable; a
// server that does not serve the era, one wrapping errNotSessionless.
func (s *sessionless) initialize(req *jsonrpc.Request) error {
	var p mcp.InitializeParams
	if err := json.Unmarshal(req.Params, &p); err != nil {
		s.toHost(&jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "initialize params: " + err.Error()}})
		return nil
	}
	s.mu.Lock()
	cs := s.cs
	s.mu.Unlock()
	if cs == nil {
		var err error
		if cs, err = s.connect(&p); err != nil {
			werr := s.hostError(err)
			s.toHost(&jsonrpc.Response{ID: req.ID, Error: werr})
			if op := dialError(err); op != nil {
				return fmt.Errorf("%w at %s: %v", ErrUnreachable, redact.URL(s.o.URL), op)
			}
			if errors.Is(err, errNotSessionless) {
				return err
			}
			s.logger.Warn("connect: server/discover failed", "reason", reasonOf(werr), "error", err)
			return nil
		}
		s.mu.Lock()
		s.cs = cs
		s.mu.Unlock()
	}
	res := cs.InitializeResult()
	version := hostVersions[0]
	if slices.Contains(hostVersions, p.ProtocolVersion) {
		version = p.ProtocolVersion
	}
	var caps map[string]json.RawMessage
	if raw, err := json.Marshal(res.Capabilities); err == nil {
		json.Unmarshal(raw, &caps)
	}
	delete(caps, "extensions")
	if caps == nil {
		caps = map[string]json.RawMessage{}
	}
	answer := map[string]any{"protocolVersion": version, "capabilities": caps, "serverInfo": res.ServerInfo}
	if res.ServerInfo == nil {
		answer["serverInfo"] = map[string]string{"name": "unknown", "version": "unknown"}
	}
	if res.Instructions != "" {
		answer["instructions"] = res.Instructions
	}
	raw, err := json.Marshal(answer)
	if err != nil {
		s.toHost(&jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}})
		return nil
	}
	s.logger.Info("connect: sessionless era: the host's initialize answered from server/discover", "host_version", version, "server_version", res.ProtocolVersion)
	s.toHost(&jsonrpc.Response{ID: req.ID, Result: raw})
	return nil
}

// errNotSessionless is wrapped by Run's error when --protocol 2026-07-28
// meets a server that does not serve that revision.
var errNotSessionless = errors.New("the MCP server does not serve protocol " + ProtocolSessionless)

// connect makes the mcp.Client that speaks for the host, with the host's
// client info, and the elicitation and sampling capabilities the host
// declared (their requests go to the host), over a client.TaskTransport
// on the SDK's streamable transport, one connection per request
// (perRequest) and no resume (the era has none); it retries a server it
// cannot connect to within StartTimeout.
func (s *sessionless) connect(p *mcp.InitializeParams) (*mcp.ClientSession, error) {
	impl := p.ClientInfo
	if impl == nil || impl.Name == "" {
		impl = &mcp.Implementation{Name: "tidemark connect", Version: "unknown"}
	}
	opts := &mcp.ClientOptions{
		Logger:       s.logger,
		Capabilities: &mcp.ClientCapabilities{}, // roots: the host's are not asked
		ProgressNotificationHandler: func(ctx context.Context, r *mcp.ProgressNotificationClientRequest) {
			s.notify("notifications/progress", r.Params)
		},
		LoggingMessageHandler: func(ctx context.Context, r *mcp.LoggingMessageRequest) { s.notify("notifications/message", r.Params) },
		ResourceUpdatedHandler: func(ctx context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			s.notify("notifications/resources/updated", r.Params)
		},
	}
	if p.Capabilities != nil && p.Capabilities.Elicitation != nil {
		opts.Capabilities.Elicitation = p.Capabilities.Elicitation
		opts.ElicitationHandler = func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			res := new(mcp.ElicitResult)
			return res, s.ask(ctx, "elicitation/create", r.Params, res)
		}
	}
	if p.Capabilities != nil && p.Capabilities.Sampling != nil {
		opts.Capabilities.Sampling = p.Capabilities.Sampling
		opts.CreateMessageHandler = func(ctx context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			res := new(mcp.CreateMessageResult)
			return res, s.ask(ctx, "sampling/createMessage", r.Params, res)
		}
	}
	hc := s.o.HTTPClient
	if len(s.o.Header) > 0 {
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		hc = &http.Client{Transport: withHeader{base: base, header: s.o.Header}, Jar: hc.Jar, CheckRedirect: hc.CheckRedirect}
	}
	tt := &client.TaskTransport{
		Transport: perRequest{t: &mcp.StreamableClientTransport{Endpoint: s.o.URL, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true},
			RetryFor: s.o.ResumeTimeout, Policy: resume.Policy{Base: s.o.InitialBackoff, Cap: s.o.MaxBackoff}},
		Endpoint:       s.o.URL,
		HTTPClient:     s.o.HTTPClient,
		Header:         s.o.Header,
		InitialBackoff: s.o.InitialBackoff,
		MaxBackoff:     s.o.MaxBackoff,
		ResumeTimeout:  s.o.ResumeTimeout,
		Logger:         s.logger,
		// The host that closed its end will never read a task's result:
		// its tasks are cancelled, as the stateful era ends its session.
		CancelOnClose: true,
	}
	c := mcp.NewClient(impl, opts)
	start := time.Now()
	for {
		cs, err := c.Connect(s.ctx, tt, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolSessionless})
		if err == nil {
			if v := cs.InitializeResult().ProtocolVersion; v < ProtocolSessionless {
				// The SDK fell back to initialize: server/discover failed.
				cs.Close()
				return nil, fmt.Errorf("%w at %s: it answered initialize with %s; drop --protocol %s (auto picks the revision the server serves)", errNotSessionless, redact.URL(s.o.URL), v, ProtocolSessionless)
			}
			return cs, nil
		}
		if dialError(err) == nil || s.o.StartTimeout < 0 || time.Since(start) >= s.o.StartTimeout || s.ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-time.After(s.o.InitialBackoff):
		case <-s.ctx.Done():
			return nil, err
		}
	}
}

// withHeader adds header to every request (--header), where the SDK's
// streamable transport has no field for it.
type withHeader struct {
	base   http.RoundTripper
	header http.Header
}

func (w withHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range w.header {
		r.Header[k] = slices.Clone(vs)
	}
	return w.base.RoundTrip(r)
}

// admit starts the host's call req, queues it, or answers it with
// busyError (gate, Admit).
func (s *sessionless) admit(req *jsonrpc.Request) {
	a, inFlight, queued := s.gate.admit(req.ID, func() { s.start(req) })
	switch a {
	case AdmitQueue:
		if queued == 0 {
			s.logger.Info("connect: calls queued: the host has the most calls in flight --max-calls allows", "in_flight", inFlight, "max_calls", s.o.MaxCalls)
		}
	case AdmitRefuse:
		s.logger.Warn("connect: call refused: the bridge's queue is full; not sent", "method", req.Method, callID(s.host, req.ID), "in_flight", inFlight, "queued", queued, "reason", replay.ReasonTooManyCalls)
		s.toHost(&jsonrpc.Response{ID: req.ID, Error: busyError(s.o.MaxCalls, s.o.MaxQueued)})
	}
}

// start runs the host's call req in a goroutine of its own, which frees
// its slot of the gate when it ends.
func (s *sessionless) start(req *jsonrpc.Request) {
	ctx, cancel := context.WithCancel(s.ctx)
	hc := &hostCall{cancel: cancel}
	s.mu.Lock()
	s.calls[req.ID] = hc
	cs := s.cs
	s.mu.Unlock()
	s.wg.Go(func() {
		defer s.gate.done(req.ID)
		defer cancel()
		result, err := s.send(ctx, cs, req)
		s.mu.Lock()
		delete(s.calls, req.ID)
		cancelled := hc.cancelled
		s.mu.Unlock()
		if cancelled {
			// The host cancelled it: no answer (MCP 2025-11-25,
			// "Cancellation").
			return
		}
		if s.ctx.Err() != nil {
			return
		}
		if err != nil {
			werr := s.hostError(err)
			if _, wire := err.(*jsonrpc.Error); !wire {
				s.logger.Warn("connect: call failed", "method", req.Method, callID(s.host, req.ID), "reason", reasonOf(werr), "error", err)
			}
			s.toHost(&jsonrpc.Response{ID: req.ID, Error: werr})
			return
		}
		raw, err := json.Marshal(result)
		if err != nil {
			s.toHost(&jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding the server's answer: " + err.Error()}})
			return
		}
		// The host speaks a revision before 2026-07-28: it gets the
		// result in that revision's shape.
		s.toHost(&jsonrpc.Response{ID: req.ID, Result: ResultForHost(req.Method, raw)})
	})
}

// send sends the host's call req through cs, whose methods frame it as a
// sessionless request (params._meta: protocol version, client info,
// capabilities). ping and logging/setLevel are answered here, with an
// empty result: the era removed both (MCP 2026-07-28, changelog, "Major
// changes", item 5), so a server of it has neither, and the host's ping
// asks whether its own counterpart, the bridge, answers (MCP 2025-11-25,
// "Ping"). Sent on, a ping would carry no _meta (the SDK's
// ClientSession.Ping adds none), and the server would take it for a
// request of an earlier revision, which needs a session: Tidemark answers
// that 400 session_required.
func (s *sessionless) send(ctx context.Context, cs *mcp.ClientSession, req *jsonrpc.Request) (any, error) {
	switch req.Method {
	case "ping", "logging/setLevel":
		return struct{}{}, nil
	case "tools/list":
		return call(ctx, req, cs.ListTools)
	case "tools/call":
		return call(ctx, req, cs.CallTool)
	case "prompts/list":
		return call(ctx, req, cs.ListPrompts)
	case "prompts/get":
		return call(ctx, req, cs.GetPrompt)
	case "resources/list":
		return call(ctx, req, cs.ListResources)
	case "resources/templates/list":
		return call(ctx, req, cs.ListResourceTemplates)
	case "resources/read":
		return call(ctx, req, cs.ReadResource)
	case "completion/complete":
		return call(ctx, req, cs.Complete)
	case "resources/subscribe":
		return call(ctx, req, func(ctx context.Context, p *mcp.SubscribeParams) (struct{}, error) {
			return struct{}{}, cs.Subscribe(ctx, p)
		})
	case "resources/unsubscribe":
		return call(ctx, req, func(ctx context.Context, p *mcp.UnsubscribeParams) (struct{}, error) {
			return struct{}{}, cs.Unsubscribe(ctx, p)
		})
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method " + strconv.Quote(req.Method) + " is not bridged to a server of protocol " + ProtocolSessionless}
}

// call decodes req's params as P and calls f with them.
func call[P, R any](ctx context.Context, req *jsonrpc.Request, f func(context.Context, *P) (R, error)) (any, error) {
	p := new(P)
	if len(req.Params) > 0 {
		if err := json.Unmarshal(req.Params, p); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: req.Method + " params: " + err.Error()}
		}
	}
	return f(ctx, p)
}

// ask sends the host a request of method with params, on behalf of the
// server's input request, and decodes the host's result into res.
func (s *sessionless) ask(ctx context.Context, method string, params any, res any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	id, _ := jsonrpc.MakeID("tidemark-connect-" + strconv.FormatInt(s.seq.Add(1), 10))
	ch := make(chan *jsonrpc.Response, 1)
	s.mu.Lock()
	s.asks[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.asks, id)
		s.mu.Unlock()
	}()
	s.toHost(&jsonrpc.Request{ID: id, Method: method, Params: raw})
	select {
	case r := <-ch:
		if r.Error != nil {
			return r.Error
		}
		return json.Unmarshal(r.Result, res)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notify sends the host a notification of method with params, in the
// shape of the host's revision (NotificationForHost).
func (s *sessionless) notify(method string, params any) {
	raw, err := json.Marshal(params)
	if err != nil {
		return
	}
	s.toHost(&jsonrpc.Request{Method: method, Params: NotificationForHost(raw)})
}

func (s *sessionless) toHost(msg jsonrpc.Message) {
	if err := s.host.Write(context.WithoutCancel(s.ctx), msg); err != nil {
		s.logger.Debug("connect: message not delivered to the host", "error", err)
	}
}

// hostError returns the JSON-RPC error the host gets for err, a call's
// failure toward a sessionless server: the server's own JSON-RPC error as
// it is, and so a task's error as the server settled it (e.g.
// error.data.reason executor_lost); otherwise code -32603 with
// error.data.reason a catalogue word: server_unreachable (no connection,
// or a task no poll could read within --resume-timeout), server_refused
// (an HTTP refusal of a poll), cancelled (a task cancelled by another
// client), stream_lost (the answer stream of a call that is not a task
// broke: the era resumes nothing, so it fails at once and is never sent
// again).
func (s *sessionless) hostError(err error) *jsonrpc.Error {
	var we *jsonrpc.Error
	if errors.As(err, &we) && we.Code != -32005 { // -32005: the SDK's "rejected by transport" marker
		return we
	}
	var te *client.TaskError
	var se *client.StatusError
	task := ""
	if errors.As(err, &te) {
		task = "task " + te.TaskID + ": "
	}
	reason, status, msg := replay.ReasonStreamLost, 0, ""
	switch {
	case errors.Is(err, client.ErrTaskUnreachable):
		reason = replay.ReasonServerUnreachable
		msg = task + "tidemark connect could not read the task's state from the MCP server within --resume-timeout; the task may still run there"
	case errors.Is(err, client.ErrTaskCancelled):
		reason = replay.ReasonCancelled
		msg = task + "the task was cancelled on the MCP server before it completed"
	case errors.As(err, &se):
		reason, status = replay.ReasonServerRefused, se.Status
		msg = task + "the MCP server refused to report the task, with HTTP " + strconv.Itoa(se.Status)
	case dialError(err) != nil:
		reason = replay.ReasonServerUnreachable
		msg = "tidemark connect could not connect to the MCP server, so the call was not sent: check that the server runs at " + redact.URL(s.o.URL) + ", then send the call again"
	default:
		msg = "the call's answer stream from the MCP server broke (protocol " + ProtocolSessionless + " resumes nothing, and the call did not run as a task); it may or may not have run: send it again if running it twice is safe (" + err.Error() + ")"
	}
	data := map[string]any{"reason": reason}
	if status != 0 {
		data["status"] = status
	}
	raw, _ := json.Marshal(data) // a string and an int always encode
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg, Data: raw}
}
