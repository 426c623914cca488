package stdio

// This file holds how a subprocess ends: closed by its session (stdin
// closed, then SIGTERM, then SIGKILL to its process group), or on its own
// (it exits, crashes, or its stdout ends), and the reaping that follows
// either.

import (
	"syscall"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
)

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
			s.quietReason = replay.ReasonClosed
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
			"pid", s.pid, "reason", replay.ReasonStopTimeout, "grace", s.e.opts.StopGrace)
		signalGroup(s.pid, syscall.SIGTERM)
		t.Reset(s.e.opts.StopGrace)
		select {
		case <-s.done:
		case <-t.C:
			s.logger.Warn("subprocess still running after SIGTERM; sending SIGKILL to its process group",
				"pid", s.pid, "reason", replay.ReasonStopTimeout)
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
	end := ending{
		quiet:       s.quietReason,
		failReason:  s.failReason,
		initPending: s.initialize.IsValid(),
		pending:     s.routes.EndAll(),
		cancelled:   s.endCancelledLocked(),
		status:      "exit status 0",
	}
	s.endAnswers = end.quiet == ""
	if waitErr != nil {
		end.status = waitErr.Error()
	}
	s.status = end.status
	s.mu.Unlock()
	s.e.opts.Metrics.ProcessExited(end.reason())
	// The generation is over before its failed calls are answered: a client
	// that resumes as soon as it reads one of those errors must find the
	// session re-created (409 for the old streams), never this generation.
	close(s.done)
	s.report(end)
}
