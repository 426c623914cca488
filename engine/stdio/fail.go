package stdio

// This file holds what the end of a subprocess tells: its log line, and
// the JSON-RPC error that answers each client call it left in flight.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
)

// failTimeout bounds how long the end of a subprocess spends storing the
// error responses of the requests it left unanswered.
const failTimeout = 10 * time.Second

// ending is what supervise knows of a subprocess that ended.
type ending struct {
	quiet       replay.Reason // why no call in flight is failed; "" if they are
	failReason  replay.Reason // error.data.reason of the failed calls; "": replay.ReasonServerExited
	initPending bool          // the client's initialize is unanswered
	pending     []jsonrpc.ID  // the client calls in flight, sorted
	cancelled   []jsonrpc.ID  // the calls cancelled by the client in their grace, sorted
	status      string        // how the process exited
}

// reason is why the subprocess ended, for metrics: the quiet reason
// (closed by its session, fenced, …), else the failed calls' reason
// (initialize_timeout), else server_exited (it exited on its own).
func (end ending) reason() replay.Reason {
	switch {
	case end.quiet != "":
		return end.quiet
	case end.failReason != "":
		return end.failReason
	}
	return replay.ReasonServerExited
}

// report logs the end of a subprocess and fails the calls it left in
// flight, unless its end was quiet (closed, or refused by the outbox).
func (s *proc) report(end ending) {
	if end.quiet == "" && len(end.cancelled) > 0 {
		s.fail(end.cancelled, replay.ReasonCancelled, fmt.Sprintf("the call was cancelled, and the MCP server process of this "+
			"session exited (%s) before answering it", end.status))
	}
	switch {
	case end.quiet != "":
		s.logger.Info("subprocess ended", "pid", s.pid, "status", end.status, "reason", end.quiet)
	case end.failReason == replay.ReasonInitializeTimeout:
		s.logger.Warn("subprocess ended; the calls it left in flight, its initialize among them, fail", "pid", s.pid,
			"status", end.status, "reason", end.failReason, "calls_failed", len(end.pending))
		s.fail(end.pending, end.failReason, fmt.Sprintf("the MCP server process of this session did not answer initialize within %v "+
			"and was stopped; the session did not begin: initialize a new one", s.e.opts.InitializeTimeout))
	case end.failReason == replay.ReasonMessageTooLarge:
		s.logger.Warn("subprocess ended; the calls it left in flight fail", "pid", s.pid,
			"status", end.status, "reason", end.failReason, "calls_failed", len(end.pending))
		next := fmt.Sprintf("the session's next request starts a new one at generation %d", s.gen+1)
		if end.initPending {
			next = "the session did not begin: initialize a new one"
		}
		s.fail(end.pending, end.failReason, fmt.Sprintf("the MCP server process of this session wrote a message over the "+
			"%d-byte limit to stdout and was stopped; %s", s.e.opts.MaxMessageBytes, next))
	case end.initPending:
		// The session never began, and the transport ends it on this
		// failed initialize: no later request re-creates it, so the
		// message promises no next generation.
		s.logger.Warn("subprocess exited before answering initialize; the session did not begin", "pid", s.pid,
			"status", end.status, "reason", replay.ReasonServerExited, "calls_failed", len(end.pending))
		s.fail(end.pending, replay.ReasonServerExited, exitedBeforeInitialize(end.status))
	default:
		s.logger.Warn("subprocess exited; the next request re-creates the session", "pid", s.pid, "status", end.status,
			"reason", replay.ReasonServerExited, "calls_failed", len(end.pending))
		s.fail(end.pending, replay.ReasonServerExited, fmt.Sprintf("the MCP server process of this session exited (%s) before answering; "+
			"the session's next request starts a new one at generation %d", end.status, s.gen+1))
	}
}

// fail answers each call in pending with a JSON-RPC internal error with
// message and error.data {"generation": ..., "reason": reason}, so its
// stream ends.
func (s *proc) fail(pending []jsonrpc.ID, reason replay.Reason, message string) {
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
				"reason", replay.ReasonStoreError, "error", err)
		}
	}
}

// exitedBeforeInitialize is the error message of the client's initialize
// when the subprocess exited (status says how) before answering it. The
// session never began, and the transport ends it on this failed
// initialize: no later request re-creates it, so the message promises no
// next generation.
func exitedBeforeInitialize(status string) string {
	return fmt.Sprintf("the MCP server process of this session exited (%s) before answering "+
		"initialize; the session did not begin: initialize a new one", status)
}
