// export_test.go exports to the package's tests what they observe of the
// Handler's internals.

package transport

// TakeoverWaiters returns how many connections are waiting for an older
// connection of their stream to stop before they may serve it (attach.go).
func (h *Handler) TakeoverWaiters() int { return int(h.conns.waiting.Load()) }
