package stdio

// This file holds the bound on how long a subprocess may take to answer
// the client's initialize (Options.InitializeTimeout).

import (
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
)

// initializeSentLocked arms the initialize timeout for the client's
// initialize call id, just delivered.
func (s *proc) initializeSentLocked(id jsonrpc.ID) {
	s.initialize = id
	s.stopInitTimerLocked()
	if d := s.e.opts.InitializeTimeout; d > 0 {
		s.initTimer = time.AfterFunc(d, func() { s.initializeTimedOut(id, d) })
	}
}

// initializeAnsweredLocked disarms the initialize timeout when the
// subprocess answers the client's initialize, id.
func (s *proc) initializeAnsweredLocked(id jsonrpc.ID) {
	if id != s.initialize || !id.IsValid() {
		return
	}
	s.initialize = jsonrpc.ID{}
	s.stopInitTimerLocked()
	s.logger.Info("subprocess initialized", "pid", s.pid,
		"latency_ms", float64(time.Since(s.started).Microseconds())/1000)
}

// initializeTimedOut ends the subprocess when the client's initialize, id,
// is still unanswered after d (Options.InitializeTimeout): it kills the
// process group, as a failed write to stdin does, and supervise then fails
// the calls in flight with replay.ReasonInitializeTimeout.
func (s *proc) initializeTimedOut(id jsonrpc.ID, d time.Duration) {
	s.mu.Lock()
	if s.ended || s.initialize != id {
		s.mu.Unlock()
		return // answered, or ending anyway
	}
	s.ended = true
	s.failReason = replay.ReasonInitializeTimeout
	s.initialize = jsonrpc.ID{}
	s.initTimer = nil
	s.mu.Unlock()
	s.logger.Error("subprocess did not answer initialize in time; killing its process group and failing the initialize. "+
		"Check that the command is an MCP server speaking stdio (one JSON-RPC message per line on stdout, logs on stderr: "+
		"see its stderr lines above), or, if it only starts slowly, raise the initialize timeout "+
		"(tidemark serve --stdio-init-timeout, Options.InitializeTimeout)",
		"pid", s.pid, "reason", replay.ReasonInitializeTimeout, "timeout", d, "invalid_lines_dropped", s.invalid.seen())
	signalGroup(s.pid, syscall.SIGKILL)
}

// stopInitTimerLocked disarms the initialize timeout, if armed.
func (s *proc) stopInitTimerLocked() {
	if s.initTimer != nil {
		s.initTimer.Stop()
		s.initTimer = nil
	}
}

// initializeUnsentLocked disarms the initialize timeout when the client's
// initialize, id, could not be written to the subprocess.
func (s *proc) initializeUnsentLocked(id jsonrpc.ID) {
	if id == s.initialize {
		s.initialize = jsonrpc.ID{}
		s.stopInitTimerLocked()
	}
}
