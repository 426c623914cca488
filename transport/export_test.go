package transport

// TakeoverWaiters returns how many connections are waiting for an older
// connection of their stream to stop before they may serve it (attach.go).
func (h *Handler) TakeoverWaiters() int { return int(h.conns.waiting.Load()) }
