// gone.go holds what a live session does when its store answers that the
// session does not exist (Live.Gone).

package session

import (
	"errors"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// Gone ends l's generation in this process when err, the store's answer
// to a read or a write of l's session, says that the store no longer
// holds the session: unknown (store.ErrNotFound: a Redis restarted
// without persistence, flushed, or that evicted or expired the record)
// or ended (a *store.EndedError). The live state is dropped as after an
// append the store refuses that way (reason session_not_found, logged once
// at WARN; Registry.drop), so the session's next request finds the token
// unknown and is answered 404 session_not_found before anything is handed
// to the engine, as row 2 of the decision table says (DESIGN.md, "The
// replay decision"). A process
// that kept it would hand that call to the engine, and only the pipelined
// append of the stream's opening event would then fail, after the call
// ran. Gone reports whether err says so; any other error, and nil, change
// nothing. It makes no store call: it acts on an answer the caller has.
func (l *Live) Gone(err error) bool {
	if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrEnded) {
		return false
	}
	l.reg.drop(l, replay.ReasonSessionNotFound, err)
	return true
}
