package stdio

// This file holds the delivery of the client's messages to a subprocess:
// each is related by the router, encoded as one line and queued for the
// subprocess's stdin, which one goroutine writes.

import (
	"context"
	"fmt"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
)

// Deliver implements engine.Session: it writes msg to the subprocess's
// stdin, recording a call so its response and progress can be related,
// and mapping the client's response to a server-to-client request back to
// the ID the subprocess gave that request. It returns an error wrapping
// engine.ErrClosed once the subprocess is ending, and ctx's error if ctx
// ends while the subprocess is not reading its input.
func (s *proc) Deliver(ctx context.Context, msg jsonrpc.Message, _ engine.Request) error {
	switch msg.(type) {
	case *jsonrpc.Request, *jsonrpc.Response:
	default:
		return fmt.Errorf("stdio: session %s gen %d: unknown message type %T", redact.Token(s.token), s.gen, msg)
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return s.closedErr()
	}
	fwd, ok := s.routes.FromClient(msg)
	var call jsonrpc.ID
	if r, isReq := msg.(*jsonrpc.Request); isReq && r.IsCall() {
		call = r.ID
		if r.Method == "initialize" {
			s.initializeSentLocked(r.ID)
		}
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
		s.routes.Forget(call)
		s.initializeUnsentLocked(call)
		s.mu.Unlock()
	}
	return err
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
