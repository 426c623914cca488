package stdio

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// ReasonServerExited is error.data.reason of the JSON-RPC error that
// answers a request whose subprocess exited before answering it; the same
// string is the reason of the log line.
const ReasonServerExited = "server_exited"

// ReasonInitializeTimeout is error.data.reason of the JSON-RPC error that
// answers the client's initialize (and any other call in flight) when the
// subprocess did not answer initialize within Options.InitializeTimeout and
// was stopped; the same string is the reason of the log lines.
const ReasonInitializeTimeout = "initialize_timeout"

// failTimeout bounds how long the end of a subprocess spends storing the
// error responses of the requests it left unanswered.
const failTimeout = 10 * time.Second

// proc is one subprocess: one generation of one session.
type proc struct {
	e      *Engine
	token  string
	gen    uint64
	logger *slog.Logger
	out    engine.Outbox

	cmd     *exec.Cmd
	pid     int // also the process group ID (Setpgid)
	started time.Time
	stdin   *os.File
	stdout  *os.File
	stderr  *os.File
	lines   chan []byte  // newline-terminated messages for stdin
	invalid *lineLimiter // logging of stdout lines that are not JSON-RPC, dropped
	stderrs *lineLimiter // logging of stderr lines

	ctx      context.Context // of the reader's Sends; cancelled by Close
	cancel   context.CancelFunc
	stopOnce sync.Once
	stopping chan struct{} // closed by Close
	done     chan struct{} // closed once the subprocess is reaped and its calls failed

	mu          sync.Mutex
	ended       bool                                  // deliveries refused: the subprocess is ending
	quietReason string                                // why the end fails no call in flight; "" if it must
	failReason  string                                // error.data.reason of the calls the end fails; "": ReasonServerExited
	calls       map[jsonrpc.ID]jsonrpc.ID             // client call in flight → its progressToken (or zero)
	progress    map[jsonrpc.ID]jsonrpc.ID             // progressToken → the client call that carries it
	outCalls    map[jsonrpc.ID]serverCall             // session-unique ID → server-to-client request in flight
	outIDs      map[jsonrpc.ID]jsonrpc.ID             // the subprocess's ID → session-unique ID
	nextOut     uint64                                // last number used in a session-unique ID
	internal    map[jsonrpc.ID]chan *jsonrpc.Response // the engine's own calls (restore)
	initialize  jsonrpc.ID                            // the client's initialize call while unanswered
	initTimer   *time.Timer                           // ends the subprocess if initialize stays unanswered
}

// serverCall is a server-to-client request in flight.
type serverCall struct {
	orig    jsonrpc.ID // the ID the subprocess gave it
	related jsonrpc.ID // the client call it was related to, or zero
}

var _ engine.Session = (*proc)(nil)

// spawn starts the subprocess of one session generation and its reader,
// writer and supervisor goroutines.
func (e *Engine) spawn(info engine.Info, out engine.Outbox) (*proc, error) {
	logger := info.Logger
	if logger == nil {
		logger = e.opts.Logger.With("session", store.Prefix(info.Token), "generation", info.Generation)
	}
	var files []*os.File // every pipe end, closed on failure
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	fail := func(err error) (*proc, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return fail(err)
	}
	outR, outW, err := pipe()
	if err != nil {
		return fail(err)
	}
	errR, errW, err := pipe()
	if err != nil {
		return fail(err)
	}
	cmd := &exec.Cmd{
		Path:   e.path,
		Args:   append([]string{e.opts.Command}, e.opts.Args...),
		Env:    e.env,
		Dir:    e.opts.Dir,
		Stdin:  inR,
		Stdout: outW,
		Stderr: errW,
		// Its own process group, so that ending the session ends every
		// process the server started too.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("start %s: %w", e.opts.Command, err))
	}
	// The child holds its ends now.
	inR.Close()
	outW.Close()
	errW.Close()

	ctx, cancel := context.WithCancel(context.Background())
	s := &proc{
		e: e, token: info.Token, gen: info.Generation, logger: logger, out: out,
		cmd: cmd, pid: cmd.Process.Pid, started: started,
		stdin: inW, stdout: outR, stderr: errR,
		lines:    make(chan []byte, 64),
		invalid:  newInvalidLimiter(logger, e.summaryEvery),
		stderrs:  newStderrLimiter(logger),
		ctx:      ctx,
		cancel:   cancel,
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
		calls:    make(map[jsonrpc.ID]jsonrpc.ID),
		progress: make(map[jsonrpc.ID]jsonrpc.ID),
		outCalls: make(map[jsonrpc.ID]serverCall),
		outIDs:   make(map[jsonrpc.ID]jsonrpc.ID),
		internal: make(map[jsonrpc.ID]chan *jsonrpc.Response),
	}
	e.mu.Lock()
	e.sessions[s] = struct{}{}
	closed := e.closed
	e.mu.Unlock()
	logger.Info("subprocess started", "pid", s.pid, "command", e.opts.Command)

	readDone, errDone := make(chan struct{}), make(chan struct{})
	go s.readLoop(readDone)
	go s.stderrLoop(errDone)
	go s.writeLoop()
	go s.supervise(readDone, errDone)
	if closed {
		// Engine.Close ran while this subprocess started and did not see it.
		s.Close()
		return nil, ErrClosed
	}
	return s, nil
}

// Done implements engine.Session.
func (s *proc) Done() <-chan struct{} { return s.done }

// Close implements engine.Session: it closes the subprocess's stdin (MCP
// 2025-11-25, stdio shutdown), waits StopGrace for it to exit, then sends
// SIGTERM to its process group, waits StopGrace again, then SIGKILL. It
// returns once the subprocess has been reaped; every other process of its
// group has been sent SIGKILL by then (they die as soon as the kernel
// schedules them; they are not Tidemark's children to wait for). Requests
// in flight get no response.
func (s *proc) Close() error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.ended = true
		if s.quietReason == "" {
			s.quietReason = "closed"
		}
		s.mu.Unlock()
		close(s.stopping)
		s.cancel()
		s.stdin.Close()
		t := time.NewTimer(s.e.opts.StopGrace)
		defer t.Stop()
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.logger.Warn("subprocess still running after its stdin was closed; sending SIGTERM to its process group",
			"pid", s.pid, "reason", "stop_timeout", "grace", s.e.opts.StopGrace)
		signalGroup(s.pid, syscall.SIGTERM)
		t.Reset(s.e.opts.StopGrace)
		select {
		case <-s.done:
		case <-t.C:
			s.logger.Warn("subprocess still running after SIGTERM; sending SIGKILL to its process group",
				"pid", s.pid, "reason", "stop_timeout")
			signalGroup(s.pid, syscall.SIGKILL)
		}
	})
	<-s.done
	return nil
}

// supervise ends the session when the subprocess exits or its stdout ends:
// it kills what is left of the process group, lets the readers drain the
// pipes, reaps the subprocess, frees its capacity, fails the calls left in
// flight (unless Close ended it) and closes done.
func (s *proc) supervise(readDone, errDone <-chan struct{}) {
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitExit(s.pid)
	}()
	select {
	case <-exited:
	case <-readDone:
	}
	s.mu.Lock()
	s.ended = true
	s.stopInitTimerLocked()
	s.mu.Unlock()
	// The leader is a zombie or about to die: the group ID still names
	// exactly this session's processes.
	signalGroup(s.pid, syscall.SIGKILL)
	<-exited
	drain(readDone, s.stdout)
	drain(errDone, s.stderr)
	s.invalid.stop()
	s.stderrs.stop()
	waitErr := s.cmd.Wait()
	s.stdin.Close()
	s.cancel()
	s.e.release(s)

	s.mu.Lock()
	quiet, failReason := s.quietReason, s.failReason
	initPending := s.initialize.IsValid() // the client's initialize is unanswered
	var pending []jsonrpc.ID
	for id := range s.calls {
		pending = append(pending, id)
	}
	clear(s.calls)
	clear(s.progress)
	s.mu.Unlock()

	status := "exit status 0"
	if waitErr != nil {
		status = waitErr.Error()
	}
	// The generation is over before its failed calls are answered: a client
	// that resumes as soon as it reads one of those errors must find the
	// session re-created (409 for the old streams), never this generation.
	close(s.done)
	switch {
	case quiet != "":
		s.logger.Info("subprocess ended", "pid", s.pid, "status", status, "reason", quiet)
	case failReason == ReasonInitializeTimeout:
		s.logger.Warn("subprocess ended; the calls it left in flight, its initialize among them, fail", "pid", s.pid,
			"status", status, "reason", failReason, "calls_failed", len(pending))
		s.fail(pending, failReason, fmt.Sprintf("the MCP server process of this session did not answer initialize within %v "+
			"and was stopped; the session did not begin: initialize a new one", s.e.opts.InitializeTimeout))
	case initPending:
		// The session never began, and the transport ends it on this
		// failed initialize: no later request re-creates it (regression:
		// the message promised a generation 2 that answered 404,
		// TestExitBeforeInitializeAnswered).
		s.logger.Warn("subprocess exited before answering initialize; the session did not begin", "pid", s.pid, "status", status,
			"reason", ReasonServerExited, "calls_failed", len(pending))
		s.fail(pending, ReasonServerExited, fmt.Sprintf("the MCP server process of this session exited (%s) before answering "+
			"initialize; the session did not begin: initialize a new one", status))
	default:
		s.logger.Warn("subprocess exited; the next request re-creates the session", "pid", s.pid, "status", status,
			"reason", ReasonServerExited, "calls_failed", len(pending))
		s.fail(pending, ReasonServerExited, fmt.Sprintf("the MCP server process of this session exited (%s) before answering; "+
			"the session's next request starts a new one at generation %d", status, s.gen+1))
	}
}

// fail answers each call in pending with a JSON-RPC internal error with
// message and error.data {"generation": ..., "reason": reason}, so its
// stream ends.
func (s *proc) fail(pending []jsonrpc.ID, reason, message string) {
	slices.SortFunc(pending, func(a, b jsonrpc.ID) int {
		return cmp.Compare(fmt.Sprint(a.Raw()), fmt.Sprint(b.Raw()))
	})
	data, _ := json.Marshal(map[string]any{"reason": reason, "generation": s.gen})
	ctx, cancel := context.WithTimeout(context.Background(), failTimeout)
	defer cancel()
	for _, id := range pending {
		resp := &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{
			Code:    jsonrpc.CodeInternalError,
			Message: message,
			Data:    data,
		}}
		if err := s.out.Send(ctx, resp, id); err != nil {
			s.logger.Warn("could not store the error response of a call left in flight", "id", id.Raw(),
				"reason", "store_error", "error", err)
		}
	}
}

// writeLoop writes queued messages to the subprocess's stdin.
func (s *proc) writeLoop() {
	for {
		select {
		case line := <-s.lines:
			if _, err := s.stdin.Write(line); err != nil {
				select {
				case <-s.stopping:
				default:
					// A server that stops reading its input cannot serve the
					// session: end it, the next request re-creates it.
					s.logger.Warn("writing to subprocess stdin failed; killing its process group",
						"pid", s.pid, "reason", "stdin_closed", "error", err)
					signalGroup(s.pid, syscall.SIGKILL)
				}
				return
			}
		case <-s.stopping:
			return
		case <-s.done:
			return
		}
	}
}

// readLoop reads the subprocess's stdout, one JSON-RPC message per line,
// and routes each message.
func (s *proc) readLoop(done chan<- struct{}) {
	defer close(done)
	sc := bufio.NewScanner(s.stdout)
	sc.Buffer(make([]byte, 0, 64<<10), s.e.opts.MaxMessageBytes)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			// MCP 2025-11-25, stdio: the server MUST NOT write anything to
			// stdout that is not a valid MCP message. Skip it.
			if full, total := s.invalid.next(); full {
				s.logger.Warn("subprocess wrote a line to stdout that is not a JSON-RPC message; dropped",
					"reason", reasonInvalidMessage, "error", err, "line", clip(line, invalidClip), "dropped_total", total)
			}
			continue
		}
		if !s.route(msg) {
			return
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		s.logger.Error("subprocess wrote a message longer than the limit; ending it",
			"reason", "message_too_large", "limit_bytes", s.e.opts.MaxMessageBytes)
	case err != nil && !errors.Is(err, os.ErrClosed):
		s.logger.Warn("reading subprocess stdout failed", "reason", "read_error", "error", err)
	}
}

// stderrLoop logs each line the subprocess writes to stderr.
func (s *proc) stderrLoop(done chan<- struct{}) {
	defer close(done)
	r := bufio.NewReaderSize(s.stderr, 4096)
	for {
		line, err := r.ReadSlice('\n')
		if text := bytes.TrimRight(line, "\r\n"); len(text) > 0 {
			if full, _ := s.stderrs.next(); full {
				s.logger.Info("subprocess stderr", "pid", s.pid, "line", string(text))
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// route relates an outbound message to the client call it belongs to and
// sends it to the outbox. It reports false when the session must stop
// reading: the outbox refused the message for good (fenced or ended).
func (s *proc) route(msg jsonrpc.Message) bool {
	var related jsonrpc.ID
	s.mu.Lock()
	if s.failReason != "" {
		// The subprocess is being stopped for a failure; the calls it left
		// in flight get that failure, not a late answer.
		s.mu.Unlock()
		return true
	}
	switch m := msg.(type) {
	case *jsonrpc.Response:
		if ch, ok := s.internal[m.ID]; ok {
			delete(s.internal, m.ID)
			s.mu.Unlock()
			ch <- m
			return true
		}
		if tok, ok := s.calls[m.ID]; ok {
			delete(s.calls, m.ID)
			if tok.IsValid() && s.progress[tok] == m.ID {
				delete(s.progress, tok)
			}
		}
		if m.ID == s.initialize && m.ID.IsValid() {
			s.initialize = jsonrpc.ID{}
			s.stopInitTimerLocked()
			s.logger.Info("subprocess initialized", "pid", s.pid,
				"latency_ms", float64(time.Since(s.started).Microseconds())/1000)
		}
		related = m.ID
	case *jsonrpc.Request:
		switch {
		case m.IsCall():
			// A server-to-client request (sampling, elicitation, roots,
			// ping): give it an ID no other generation of this session
			// uses, because a new subprocess numbers from the start again.
			related = s.soleCallLocked()
			s.nextOut++
			id := stringID(fmt.Sprintf("tidemark-%d-%d", s.gen, s.nextOut))
			if prev, ok := s.outIDs[m.ID]; ok {
				// The subprocess reused an ID still in flight: the newer
				// request owns it now.
				delete(s.outCalls, prev)
			}
			s.outCalls[id] = serverCall{orig: m.ID, related: related}
			s.outIDs[m.ID] = id
			msg = &jsonrpc.Request{ID: id, Method: m.Method, Params: m.Params}
		case m.Method == "notifications/progress":
			if tok := progressToken(m.Params, false); tok.IsValid() {
				related = s.progress[tok]
			}
		case m.Method == "notifications/message":
			related = s.soleCallLocked()
		case m.Method == "notifications/cancelled":
			// It cancels a server-to-client request: name that request by
			// the ID the client knows.
			if orig, ok := requestID(m.Params); ok {
				if id, ok := s.outIDs[orig]; ok {
					related = s.outCalls[id].related
					delete(s.outCalls, id)
					delete(s.outIDs, orig)
					if p, err := withRequestID(m.Params, id); err == nil {
						msg = &jsonrpc.Request{Method: m.Method, Params: p}
					}
				}
			}
		}
	}
	s.mu.Unlock()
	if err := s.out.Send(s.ctx, msg, related); err != nil {
		return s.sendFailed(err)
	}
	return true
}

// sendFailed logs why the outbox did not store a message and reports
// whether the subprocess's output is still worth reading. A session that
// ended (DELETE, eviction, a tombstone that expired) or a generation that
// a newer owner fenced takes no more messages: the subprocess ends, and
// the calls it leaves in flight are not failed into the refusing outbox.
// A session that ended is no fault (a DELETE racing a slow answer ends
// that way); a fenced generation is, in a process that thought it owned
// the session.
func (s *proc) sendFailed(err error) bool {
	var reason replay.Reason
	switch {
	case errors.Is(err, store.ErrEnded), errors.Is(err, store.ErrNotFound):
		reason = replay.ReasonSessionNotFound
		s.logger.Info("the session ended: dropping the subprocess's message and ending the subprocess",
			"reason", reason, "error", err)
	case errors.Is(err, store.ErrFenced):
		reason = replay.ReasonFenced
		s.logger.Warn("a newer generation owns the session: dropping the subprocess's message and ending the subprocess",
			"reason", reason, "error", err)
	default:
		if s.ctx.Err() == nil {
			s.logger.Warn("an outbound message was not stored", "reason", "store_error", "error", err)
		}
		return true
	}
	s.mu.Lock()
	if s.quietReason == "" {
		s.quietReason = string(reason)
	}
	s.mu.Unlock()
	return false
}

// soleCallLocked returns the ID of the client call in flight when exactly
// one is, else the zero ID (the standalone stream).
func (s *proc) soleCallLocked() jsonrpc.ID {
	if len(s.calls) != 1 {
		return jsonrpc.ID{}
	}
	for id := range s.calls {
		return id
	}
	return jsonrpc.ID{}
}

// Deliver implements engine.Session: it writes msg to the subprocess's
// stdin, recording a call so its response and progress can be related,
// and mapping the client's response to a server-to-client request back to
// the ID the subprocess gave that request. It returns an error wrapping
// engine.ErrClosed once the subprocess is ending, and ctx's error if ctx
// ends while the subprocess is not reading its input.
func (s *proc) Deliver(ctx context.Context, msg jsonrpc.Message, _ engine.Request) error {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return s.closedErr()
	}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		switch {
		case m.IsCall():
			tok := progressToken(m.Params, true)
			s.calls[m.ID] = tok
			if tok.IsValid() {
				s.progress[tok] = m.ID
			}
			if m.Method == "initialize" {
				s.initialize = m.ID
				s.stopInitTimerLocked()
				if d := s.e.opts.InitializeTimeout; d > 0 {
					id := m.ID
					s.initTimer = time.AfterFunc(d, func() { s.initializeTimedOut(id, d) })
				}
			}
			s.mu.Unlock()
			if err := s.write(ctx, m); err != nil {
				s.mu.Lock()
				s.forgetCallLocked(m.ID)
				if m.ID == s.initialize {
					s.initialize = jsonrpc.ID{}
					s.stopInitTimerLocked()
				}
				s.mu.Unlock()
				return err
			}
			return nil
		case m.Method == "notifications/cancelled":
			// The cancelled call no longer counts as in flight, so that
			// logging relates to the calls that still are; its response,
			// should one come, is still related by its ID.
			if id, ok := requestID(m.Params); ok {
				s.forgetCallLocked(id)
			}
		}
		s.mu.Unlock()
		return s.write(ctx, m)
	case *jsonrpc.Response:
		sc, ok := s.outCalls[m.ID]
		if ok {
			delete(s.outCalls, m.ID)
			if s.outIDs[sc.orig] == m.ID {
				delete(s.outIDs, sc.orig)
			}
		}
		s.mu.Unlock()
		if !ok {
			s.logger.Warn("dropping a response to no server-to-client request in flight", "id", m.ID.Raw(),
				"reason", "unknown_response")
			return nil
		}
		return s.write(ctx, &jsonrpc.Response{ID: sc.orig, Result: m.Result, Error: m.Error})
	}
	s.mu.Unlock()
	return fmt.Errorf("stdio: session %s gen %d: unknown message type %T", store.Prefix(s.token), s.gen, msg)
}

// initializeTimedOut ends the subprocess when the client's initialize, id,
// is still unanswered after d (Options.InitializeTimeout): it kills the
// process group, as a failed write to stdin does, and supervise then fails
// the calls in flight with ReasonInitializeTimeout.
func (s *proc) initializeTimedOut(id jsonrpc.ID, d time.Duration) {
	s.mu.Lock()
	if s.ended || s.initialize != id {
		s.mu.Unlock()
		return // answered, or ending anyway
	}
	s.ended = true
	s.failReason = ReasonInitializeTimeout
	s.initialize = jsonrpc.ID{}
	s.initTimer = nil
	s.mu.Unlock()
	s.logger.Error("subprocess did not answer initialize in time; killing its process group and failing the initialize. "+
		"Check that the command is an MCP server speaking stdio (one JSON-RPC message per line on stdout, logs on stderr: "+
		"see its stderr lines above), or, if it only starts slowly, raise the initialize timeout "+
		"(tidemark serve --stdio-init-timeout, Options.InitializeTimeout)",
		"pid", s.pid, "reason", ReasonInitializeTimeout, "timeout", d, "invalid_lines_dropped", s.invalid.seen())
	signalGroup(s.pid, syscall.SIGKILL)
}

// stopInitTimerLocked disarms the initialize timeout, if armed.
func (s *proc) stopInitTimerLocked() {
	if s.initTimer != nil {
		s.initTimer.Stop()
		s.initTimer = nil
	}
}

func (s *proc) closedErr() error {
	return fmt.Errorf("stdio: session %s gen %d: subprocess %d ending: %w", store.Prefix(s.token), s.gen, s.pid, engine.ErrClosed)
}

func (s *proc) forgetCallLocked(id jsonrpc.ID) {
	if tok, ok := s.calls[id]; ok {
		delete(s.calls, id)
		if tok.IsValid() && s.progress[tok] == id {
			delete(s.progress, tok)
		}
	}
}

// write queues msg for the subprocess's stdin.
func (s *proc) write(ctx context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("stdio: session %s gen %d: encode: %w", store.Prefix(s.token), s.gen, err)
	}
	// The stdio transport delimits messages by newlines, which JSON
	// encoding never leaves inside a message.
	line := append(data, '\n')
	select {
	case s.lines <- line:
		return nil
	case <-s.stopping:
		return s.closedErr()
	case <-s.done:
		return s.closedErr()
	case <-ctx.Done():
		return fmt.Errorf("stdio: session %s gen %d: subprocess %d not reading its input: %w",
			store.Prefix(s.token), s.gen, s.pid, ctx.Err())
	}
}

// progressToken returns params._meta.progressToken (inbound: where a
// request carries it) or params.progressToken (outbound:
// notifications/progress), or the zero ID when absent. Tokens are strings
// or integers (MCP 2025-11-25, utilities/progress), as request IDs are.
func progressToken(params json.RawMessage, inMeta bool) jsonrpc.ID {
	if len(params) == 0 {
		return jsonrpc.ID{}
	}
	var raw any
	if inMeta {
		var p struct {
			Meta struct {
				ProgressToken any `json:"progressToken"`
			} `json:"_meta"`
		}
		if json.Unmarshal(params, &p) != nil {
			return jsonrpc.ID{}
		}
		raw = p.Meta.ProgressToken
	} else {
		var p struct {
			ProgressToken any `json:"progressToken"`
		}
		if json.Unmarshal(params, &p) != nil {
			return jsonrpc.ID{}
		}
		raw = p.ProgressToken
	}
	id, err := jsonrpc.MakeID(raw)
	if err != nil {
		return jsonrpc.ID{}
	}
	return id
}

// requestID returns params.requestId of notifications/cancelled.
func requestID(params json.RawMessage) (jsonrpc.ID, bool) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	return id, err == nil && id.IsValid()
}

// withRequestID returns params with requestId replaced by id.
func withRequestID(params json.RawMessage, id jsonrpc.ID) (json.RawMessage, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	v, err := json.Marshal(id.Raw())
	if err != nil {
		return nil, err
	}
	p["requestId"] = v
	return json.Marshal(p)
}

// stringID returns the string request ID v.
func stringID(v string) jsonrpc.ID {
	id, _ := jsonrpc.MakeID(v) // a string is always a valid ID
	return id
}
