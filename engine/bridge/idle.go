package bridge

// This file holds the end of an idle backend connection: the backend is
// shared by every sessionless request, and behind the stdio gateway it is
// a subprocess counted in the engine's bound, so it must not outlive the
// requests that use it (Options.IdleAfter).

import "time"

// enter counts one sessionless request being served: no idle end is due
// while one is.
func (b *Bridge) enter() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.active++
	b.stopIdleLocked()
}

// leave counts one sessionless request less; the last one makes the
// connection's idle end due Options.IdleAfter later.
func (b *Bridge) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.active--
	b.armIdleLocked()
}

// armIdleLocked makes the idle end of the connection due IdleAfter from
// now, when a connection is up and no request is being served. b.mu is
// held.
func (b *Bridge) armIdleLocked() {
	if b.active > 0 || b.conn == nil || b.closed || b.opts.IdleAfter < 0 || b.idle != nil {
		return
	}
	b.idleSeq++
	seq := b.idleSeq
	b.idle = time.AfterFunc(b.opts.IdleAfter, func() { b.endIdle(seq) })
}

// stopIdleLocked cancels the idle end that is due, if any. b.mu is held.
func (b *Bridge) stopIdleLocked() {
	if b.idle != nil {
		b.idle.Stop()
		b.idle = nil
	}
}

// endIdle is the idle end armed as number seq: it closes the connection
// unless a request came since (the end was then stopped, and any later one
// has another number).
func (b *Bridge) endIdle(seq uint64) {
	b.mu.Lock()
	if b.idle == nil || b.idleSeq != seq || b.active > 0 || b.conn == nil {
		b.mu.Unlock()
		return
	}
	c := b.retireLocked()
	b.mu.Unlock()
	b.logger.Info("ended the idle backend connection for sessionless requests; the next request opens a new one",
		"connection", c.gen, "idle_after", b.opts.IdleAfter)
	c.cs.Close()
}

// EndIdle closes the backend connection at once when no sessionless
// request is being served, and reports whether it closed one; it returns
// once the connection is closed (for EngineTransport, once the
// subprocess has been reaped and its place in the engine's bound is
// free). The stdio gateway calls it when a session's start finds the
// engine at its bound (stdio.Options.Reclaim): the session would hold
// its subprocess for its life, while the shared one starts again at the
// next sessionless request, so the session gets the place now rather
// than a 503 until the idle end.
func (b *Bridge) EndIdle() bool {
	b.mu.Lock()
	if b.active > 0 || b.conn == nil {
		b.mu.Unlock()
		return false
	}
	c := b.retireLocked()
	b.mu.Unlock()
	b.logger.Info("ended the idle backend connection for sessionless requests to make room for a session; the next request opens a new one",
		"connection", c.gen)
	c.cs.Close()
	return true
}

// retireLocked takes the connection out of use as idle and returns it for
// the caller to close. b.mu is held, and b.conn is not nil.
func (b *Bridge) retireLocked() *conn {
	b.stopIdleLocked()
	c := b.conn
	b.conn = nil
	c.retired = true
	return c
}
