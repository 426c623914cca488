// initialize.go holds what a POST carrying initialize does to sessions
// (MCP 2025-11-25, lifecycle and "Session Management"): it creates the
// session, supersedes the one the client held, and ends the new session
// again when its initialize fails.

package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// initialize creates the session that init starts, sets its token in the
// response's Mcp-Session-Id, supersedes the session token names (the one
// the client held, if any), and returns the protocol version init asks
// for. A failed creation is refused as the lookup's errors are (503
// capacity, unavailable).
func (h *Handler) initialize(w http.ResponseWriter, r *http.Request, token string, init *jsonrpc.Request) (*session.Live, string, *refusal) {
	ctx := r.Context()
	live, err := h.reg.Create(ctx, userID(r))
	if err != nil {
		return nil, "", lookupRefusal(err)
	}
	w.Header().Set("Mcp-Session-Id", live.Token())
	if token != "" {
		// A client that initializes again while holding a live session
		// replaces it: the old token is superseded and answers 404. Get
		// checks the user binding; a session another replica owns ends in
		// the store, and that owner's renewal then fails.
		if _, err := h.reg.Get(ctx, token, userID(r)); err == nil || errors.Is(err, session.ErrRemote) {
			h.reg.End(ctx, token, store.EndSuperseded)
		}
	}
	var p struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	json.Unmarshal(init.Params, &p)
	return live, p.ProtocolVersion, nil
}

// endIfInitializeFails ends live's session, which a failed initialize never
// began (MCP 2025-11-25, lifecycle), so that it holds no room: once the
// initialize is answered with an error, or once the engine session ends
// before initialize succeeded (a gateway's subprocess stopped). When the
// answer has not come yet (the client left first), a goroutine waits for
// it.
func (h *Handler) endIfInitializeFails(ctx context.Context, live *session.Live) {
	ctx = context.WithoutCancel(ctx)
	endIfFailed := func() {
		if live.InitializeFailed() {
			h.reg.End(ctx, live.Token(), store.EndInitializeFailed)
		}
	}
	answered := live.InitializeAnswered()
	select {
	case <-answered:
		endIfFailed()
		return
	default:
	}
	go func() {
		select {
		case <-answered:
			endIfFailed()
		case <-live.Done():
			if !live.Initialized() {
				h.reg.End(ctx, live.Token(), store.EndInitializeFailed)
			}
		}
	}()
}
