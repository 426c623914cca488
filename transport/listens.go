// listens.go holds the open subscriptions/listen streams of the sessionless
// era: their bound (Options.MaxListens), what one may ask to keep
// (checkListen), and their end at a graceful shutdown, which ends them
// instead of waiting for them.

package transport

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
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

// add registers cancel and returns the function that removes it, unless
// limit streams are registered already (limit negative: no bound): then
// it registers nothing and ok is false.
func (l *listens) add(cancel context.CancelFunc, limit int) (remove func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit >= 0 && len(l.cancel) >= limit {
		return nil, false
	}
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
	}, true
}

// capacityRefusal is the refusal of a listen stream beyond
// Options.MaxListens: 503 capacity with Retry-After, the answer of every
// bound on what the process holds; the request's id is the listen's.
func capacityRefusal(limit int, id jsonrpc.ID) *refusal {
	ref := refuse(replay.ReasonCapacity, fmt.Sprintf(
		"no room for another subscriptions/listen stream: this server holds %d open at most; listen again later", limit))
	ref.id = id
	return ref
}

// checkListen refuses a subscriptions/listen whose params would make its
// stream hold more than a session may (engine.AdmitListen), with the
// listen's id, before it takes a place among the listens open: 413
// body_too_large for params over engine.MaxListenParams bytes, as an
// initialize's are refused, and 400 invalid_params for too many resource
// URIs, as a resources/subscribe past a session's bound is.
func checkListen(msg jsonrpc.Message) *refusal {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != methodListen {
		return nil
	}
	err := engine.AdmitListen(req.Params)
	if err == nil {
		return nil
	}
	reason := replay.ReasonInvalidParams
	if len(req.Params) > engine.MaxListenParams {
		reason = replay.ReasonBodyTooLarge
	}
	ref := refuse(reason, err.Error()+": a listen stream keeps them for its life (listen to fewer resources, or open more streams)")
	ref.id = req.ID
	return ref
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
