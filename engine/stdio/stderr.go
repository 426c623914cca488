package stdio

// This file holds the reading of a subprocess's stderr, its own log
// (MCP 2025-11-25, stdio: logging on stderr), into the session's log.

import (
	"bufio"
	"bytes"
	"errors"
)

// stderrLoop logs each line the subprocess writes to stderr, as many as
// the stderr limiter lets through.
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
