package stdio

// This file holds the reading of a subprocess's stdout: one JSON-RPC
// message per line (MCP 2025-11-25, basic/transports, "stdio"), each
// related to its client call by the router and sent to the outbox.

import (
	"bufio"
	"bytes"
	"errors"
	"os"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/replay"
)

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
					"reason", replay.ReasonInvalidMessage, "error", err, "line", clip(line, invalidClip), "dropped_total", total)
			}
			continue
		}
		if !s.route(msg) {
			return
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		s.mu.Lock()
		if s.failReason == "" {
			s.failReason = replay.ReasonMessageTooLarge
		}
		s.mu.Unlock()
		s.logger.Error("subprocess wrote a message longer than the limit; ending it",
			"reason", replay.ReasonMessageTooLarge, "limit_bytes", s.e.opts.MaxMessageBytes)
	case err != nil && !errors.Is(err, os.ErrClosed):
		s.logger.Warn("reading subprocess stdout failed", "reason", replay.ReasonReadError, "error", err)
	}
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// route relates an outbound message to the client call it belongs to and
// sends it to the outbox; a response to one of the engine's own calls goes
// to that call instead. It reports false when the session must stop
// reading: the outbox refused the message for good (fenced or ended).
func (s *proc) route(msg jsonrpc.Message) bool {
	s.mu.Lock()
	if s.failReason != "" {
		// The subprocess is being stopped for a failure; the calls it left
		// in flight get that failure, not a late answer.
		s.mu.Unlock()
		return true
	}
	if m, ok := msg.(*jsonrpc.Response); ok {
		if ch, ok := s.internal[m.ID]; ok {
			delete(s.internal, m.ID)
			s.mu.Unlock()
			ch <- m
			return true
		}
		id, ok := s.answeredLocked(m.ID)
		if !ok {
			s.mu.Unlock()
			s.logger.Debug("dropping the subprocess's answer to a call answered as cancelled already",
				"id", m.ID.Raw(), "reason", replay.ReasonCancelled)
			return true
		}
		if id != m.ID {
			msg = &jsonrpc.Response{ID: id, Result: m.Result, Error: m.Error}
		}
		s.initializeAnsweredLocked(id)
	}
	msg, related := s.routes.FromServer(msg, jsonrpc.ID{})
	s.mu.Unlock()
	if err := s.out.Send(s.ctx, msg, related); err != nil {
		return s.sendFailed(err)
	}
	return true
}

// sendFailed logs why the outbox did not store a message and reports
// whether the subprocess's output is still worth reading. A session that
// ended (engine.ErrSessionEnded) or a generation that a newer owner fenced
// (engine.ErrFenced) takes no more messages: the subprocess ends, and
// the calls it leaves in flight are not failed into the refusing outbox.
// A session that ended is no fault (a DELETE racing a slow answer ends
// that way); a fenced generation is, in a process that thought it owned
// the session.
func (s *proc) sendFailed(err error) bool {
	var reason replay.Reason
	switch {
	case errors.Is(err, engine.ErrSessionEnded):
		reason = replay.ReasonSessionNotFound
		s.logger.Info("the session ended: dropping the subprocess's message and ending the subprocess",
			"reason", reason, "error", err)
	case errors.Is(err, engine.ErrFenced):
		reason = replay.ReasonFenced
		s.logger.Warn("a newer generation owns the session: dropping the subprocess's message and ending the subprocess",
			"reason", reason, "error", err)
	default:
		if s.ctx.Err() == nil {
			s.logger.Warn("an outbound message was not stored", "reason", replay.ReasonStoreError, "error", err)
		}
		return true
	}
	s.mu.Lock()
	if s.quietReason == "" {
		s.quietReason = reason
	}
	s.mu.Unlock()
	return false
}
