// listens.go holds the open subscriptions/listen streams of the sessionless
// era, which a graceful shutdown ends instead of waiting for them.

package transport

import (
	"context"
	"net/http"
	"sync"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// methodListen is the sessionless era's method that opens a listen stream
// (MCP 2026-07-28, SEP-2575): it has no answer of its own until the
// server ends it.
const methodListen = "subscriptions/listen"

// listens is the set of the listen streams being served, each by the
// function that cancels its request's context.
type listens struct {
	mu     sync.Mutex
	next   uint64
	cancel map[uint64]context.CancelFunc
}

// add registers cancel and returns the function that removes it.
func (l *listens) add(cancel context.CancelFunc) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel == nil {
		l.cancel = make(map[uint64]context.CancelFunc)
	}
	id := l.next
	l.next++
	l.cancel[id] = cancel
	return func() {
		l.mu.Lock()
		delete(l.cancel, id)
		l.mu.Unlock()
	}
}

// endAll cancels every listen stream registered; their handlers return
// and their responses end.
func (l *listens) endAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, cancel := range l.cancel {
		cancel()
	}
}

// isListen reports whether r, a POST of the sessionless era, opens a
// listen stream. With MCP-Protocol-Version set its Mcp-Method header
// says, since the handler refuses a body whose method the header belies
// (MCP 2026-07-28, basic/transports, "Standard Headers"); without it, the
// body's method does.
func (h *Handler) isListen(r *http.Request, hdr headers) bool {
	if hdr.hasVersion {
		return r.Header.Get(wire.HeaderMethod) == methodListen
	}
	call := h.sessionlessCall(r, methodListen)
	return call != nil && call.Method == methodListen
}
