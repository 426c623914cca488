package stdio

// This file holds the delivery of the client's messages to a subprocess:
// each is related by the router, encoded as one line and queued for the
// subprocess's stdin, which one goroutine writes.

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/routing"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
)

// Deliver implements engine.Session: it writes msg to the subprocess's
// stdin, recording a call so its response and progress can be related,
// and mapping the client's response to a server-to-client request back to
// the ID the subprocess gave that request. It returns an error wrapping
// engine.ErrClosed once the subprocess is ending, and ctx's error if ctx
// ends while the subprocess is not reading its input; but nil for a call
// that the end of the subprocess took among the calls it left in flight
// (it waited for room in the queue of stdin meanwhile), which that end
// answers, so that each call gets exactly one answer (JSON-RPC 2.0).
func (s *proc) Deliver(ctx context.Context, msg jsonrpc.Message, _ engine.Request) error {
	switch msg.(type) {
	case *jsonrpc.Request, *jsonrpc.Response:
	default:
		return fmt.Errorf("stdio: session %s gen %d: unknown message type %T", redact.Token(s.token), s.gen, msg)
	}
	r, _ := msg.(*jsonrpc.Request)
	isInit := r != nil && r.IsCall() && r.Method == "initialize"
	s.mu.Lock()
	if s.ended {
		exited := isInit && s.exitedLocked()
		s.mu.Unlock()
		if exited {
			return s.initializeAfterExit(ctx, r.ID)
		}
		return s.closedErr()
	}
	var cancelled jsonrpc.ID // the call in flight a notifications/cancelled names
	if r != nil && r.Method == "notifications/cancelled" {
		if id, ok := routing.RequestID(r.Params); ok && s.routes.InFlight(id) {
			cancelled = id
		}
	}
	fwd, ok := s.routes.FromClient(msg)
	var call jsonrpc.ID
	if r != nil && r.IsCall() {
		call = r.ID
		fwd = s.aliasLocked(r)
		if isInit {
			s.initializeSentLocked(r.ID)
		}
	}
	if cancelled.IsValid() {
		fwd = s.cancelAliasLocked(r, cancelled)
		s.cancelLocked(cancelled)
	}
	s.mu.Unlock()
	if !ok {
		s.logger.Warn("dropping a response to no server-to-client request in flight", "id", msg.(*jsonrpc.Response).ID.Raw(),
			"reason", replay.ReasonUnknownResponse)
		return nil
	}
	err := s.write(ctx, fwd)
	if err != nil && call.IsValid() {
		s.mu.Lock()
		inFlight := s.routes.InFlight(call)
		s.routes.Forget(call)
		s.forgetAliasLocked(call)
		s.initializeUnsentLocked(call)
		answered := !inFlight && s.endAnswers
		exited := isInit && s.exitedLocked()
		s.mu.Unlock()
		switch {
		case answered:
			// The end of the subprocess took the call among those it
			// left in flight, and answers it (server_exited, or the
			// reason it was stopped for): an error here would make the
			// transport refuse the request too, a second answer.
			return nil
		case exited && errors.Is(err, engine.ErrClosed):
			return s.initializeAfterExit(ctx, call)
		}
	}
	return err
}

// exitedLocked reports whether the subprocess is ending on its own: it
// exited, or its stdout ended, and neither its session closed it nor the
// engine stopped it for a failure of its own.
func (s *proc) exitedLocked() bool {
	return s.ended && s.quietReason == "" && s.failReason == ""
}

// initializeAfterExit answers the client's initialize, id, which reached
// a subprocess that had exited already (a command such as `true`, which
// ends at once): as when it exits with the initialize in flight, with
// reason replay.ReasonServerExited, once its exit status is known. A
// refusal instead would ask the client to retry, and a retry meets the
// same command.
func (s *proc) initializeAfterExit(ctx context.Context, id jsonrpc.ID) error {
	select {
	case <-s.done:
	case <-ctx.Done():
		return fmt.Errorf("stdio: session %s gen %d: subprocess %d ending: %w", redact.Token(s.token), s.gen, s.pid, ctx.Err())
	}
	s.mu.Lock()
	status := s.status
	s.mu.Unlock()
	s.logger.Warn("initialize reached a subprocess that had exited; the session did not begin", "pid", s.pid,
		"status", status, "reason", replay.ReasonServerExited)
	s.fail([]jsonrpc.ID{id}, replay.ReasonServerExited, exitedBeforeInitialize(status))
	return nil
}

// write queues msg for the subprocess's stdin.
func (s *proc) write(ctx context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("stdio: session %s gen %d: encode: %w", redact.Token(s.token), s.gen, err)
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
			redact.Token(s.token), s.gen, s.pid, ctx.Err())
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
						"pid", s.pid, "reason", replay.ReasonStdinClosed, "error", err)
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
