// What the transport does with a 409 whose body lists the requests the
// refused stream carried that are lost (error.data.lostRequests): it fails
// exactly those calls, retires the session, and lets the session's other
// calls run to their end before it ends the session.

package client

import (
	"cmp"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// fenceStream handles a resume of st answered 409 with ref, whose body
// lists the lost requests (ref.LostKnown), or which refuses a compacted
// cursor (none of the session's other calls is lost then). The calls pending on st's
// session whose ids are listed fail at once with ErrSessionLost and the
// 409's status and reason; st's own call, if still pending and not listed,
// fails with ErrStreamLost, since this stream was its only way to an
// answer, and with CallError.Ran when the 409 lists it as answered or
// running. The other calls go on. The session is retired: the rule has the
// client initialize again after a 409 (DESIGN.md, "Where the rule comes
// from"), so new
// messages go to a new session, and the old one is ended with DELETE once
// its last call ends.
func (c *conn) fenceStream(st *stream, ref wire.Refusal) {
	s := st.sess
	// Retired before any call fails: a caller that sends its next
	// message as soon as its call fails must find s retired, so that the
	// message goes to the new session, never to s, which is ended once its
	// calls are. The rest of the retirement (finish) waits until the
	// fence is reported.
	finish := c.retire(s)
	defer finish()
	lost := make(map[jsonrpc.ID]bool, len(ref.LostRequests))
	for _, id := range ref.LostRequests {
		lost[id] = true
	}
	var victims []*call
	c.mu.Lock()
	for id, cl := range c.calls {
		if lost[id] && cl.sess == s {
			victims = append(victims, cl)
		}
	}
	c.mu.Unlock()
	failed := 0
	for _, cl := range victims {
		if c.failCall(cl, &CallError{Method: cl.method, ID: cl.id, Session: s.id, Cursor: st.lastID,
			Status: ref.Status, Reason: ref.Reason, Err: ErrSessionLost}) {
			failed++
		}
	}
	c.emit(Event{Kind: EventFenced, Session: s.id, Stream: st.label, Cursor: st.lastID, Status: ref.Status, Reason: ref.Reason, Calls: failed})
	if st.call != nil && c.failCall(st.call, &CallError{Method: st.call.method, ID: st.call.id, Session: s.id, Cursor: st.lastID,
		Status: ref.Status, Reason: ref.Reason, Err: ErrStreamLost, Ran: slices.Contains(ref.RanRequests, st.call.id),
		Cause: statusError("GET", ref)}) {
		c.emit(Event{Kind: EventStreamLost, Session: s.id, Stream: st.label, Cursor: st.lastID, Status: ref.Status, Reason: ref.Reason,
			Err: statusError("GET", ref)})
	}
}

// retire stops new messages from going to s, at once, and returns what
// completes the retirement, which the caller runs once it has reported
// the fence, so that the re-initialization is reported after it: a
// re-initialization starts, and s is ended (DELETE) at once if no call is
// pending on it, else when its last call ends (see untrack). Only the
// first call for s has an effect, and none once s is lost.
func (c *conn) retire(s *session) (finish func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.retired || s.isLost() {
		return func() {}
	}
	s.retired = true
	return func() {
		c.mu.Lock()
		if s.isLost() {
			c.mu.Unlock()
			return
		}
		canRenew := c.initialized && c.initParams != nil && !c.defersLocked(s)
		drained := s.drainedLocked()
		if !drained && !s.ended {
			c.retiring = append(c.retiring, s)
		}
		c.mu.Unlock()
		if drained {
			c.endRetired(s)
		}
		if canRenew {
			c.spawn(func() { c.renew(c.ctx, s, true) })
		}
	}
}

// supersede retires old (nil: none), the session that the SDK's own
// initialize replaced: no message goes to it any more, and it is ended
// with DELETE once its last call ends, at once when it carries none, as a
// retired session is (MCP 2025-11-25, "Session Management": a client
// that no longer needs a session ends it). Its calls still running get
// their answers, and its server requests theirs. No re-initialization
// starts: the SDK's initialize is the new session.
func (c *conn) supersede(old *session) {
	if old == nil {
		return
	}
	c.mu.Lock()
	if old.retired || old.isLost() {
		c.mu.Unlock()
		return
	}
	old.retired = true
	drained := old.drainedLocked()
	if !drained {
		c.retiring = append(c.retiring, old)
	}
	c.mu.Unlock()
	if drained {
		c.endRetired(old)
	}
}

// untrackLocked records that cl, just removed from c.calls, no longer
// runs on its session, and returns that session when it is retired and
// cl was its last call: the caller ends it with endRetired after
// releasing c.mu.
func (c *conn) untrackLocked(cl *call) *session {
	s := cl.sess
	if s == nil {
		return nil
	}
	s.calls--
	if s.drainedLocked() {
		return s
	}
	return nil
}

// drainedLocked reports whether s is retired and carries no call any more,
// accepted or on its way: it is then ended (endRetired). c.mu is held.
func (s *session) drainedLocked() bool {
	return s.retired && s.calls == 0 && s.posting == 0
}

// endRetired ends the retired session s: it stops its standalone stream,
// forgets the server requests it sent, which the SDK gets
// notifications/cancelled for (cancelOrphans), and DELETEs it in the
// background (MCP 2025-11-25, "Session Management"). Only the first call
// for s has an effect, and none once s is lost (loseSession ended it).
func (c *conn) endRetired(s *session) {
	c.mu.Lock()
	if s.ended || s.isLost() {
		c.mu.Unlock()
		return
	}
	s.ended = true
	orphans := c.forgetLocked(s)
	if s.stopStandalone != nil {
		s.stopStandalone()
	}
	c.mu.Unlock()
	c.cancelOrphans(orphans, "the MCP session that sent this request has ended, so an answer would reach no one")
	if s.id != "" {
		c.spawn(func() { c.deleteSession(s) })
	}
}

// forgetLocked drops what the connection keeps of s: its place among the
// retiring sessions and the origins of the server requests it sent, whose
// ids as the SDK saw them it returns, in the order the server sent them.
func (c *conn) forgetLocked(s *session) []jsonrpc.ID {
	for i, r := range c.retiring {
		if r == s {
			c.retiring = append(c.retiring[:i], c.retiring[i+1:]...)
			break
		}
	}
	var orphans []origin
	for id, o := range c.origin {
		if o.sess == s {
			delete(c.origin, id)
			delete(c.asked, asked{s, o.id})
			o.id = id
			orphans = append(orphans, o)
		}
	}
	slices.SortFunc(orphans, func(a, b origin) int { return cmp.Compare(a.seq, b.seq) })
	ids := make([]jsonrpc.ID, len(orphans))
	for i, o := range orphans {
		ids[i] = o.id
	}
	return ids
}
