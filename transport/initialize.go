// initialize.go holds what a POST carrying initialize does to sessions
// (MCP 2025-11-25, lifecycle and "Session Management"): it creates the
// session, supersedes the one the client held once the new one's
// initialize succeeds, and ends the new session again when it fails.

package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// checkInitialize refuses an initialize whose params break the rule of
// initializeParams, before any session exists: 400 invalid_params (-32602)
// with the request's id. Engines would answer it after creating a session,
// or accept it: the go-sdk checks only that params are present, and
// negotiates its latest version for a protocolVersion missing, null or "".
//
// Params over engine.MaxInitializeParams bytes are refused first, 413
// body_too_large with the request's id: the session would keep them for
// its life (engine.State.Admit).
func checkInitialize(init *jsonrpc.Request) *refusal {
	var ref *refusal
	if err := (engine.State{}).Admit(nil, []*jsonrpc.Request{init}); err != nil {
		ref = refuse(replay.ReasonBodyTooLarge, err.Error()+": a session keeps them for its life (send a smaller clientInfo and capabilities)")
	} else if why := initializeParams(init.Params); why != "" {
		ref = refuse(replay.ReasonInvalidParams, "initialize: "+why+" (MCP 2025-11-25, lifecycle)")
	} else {
		return nil
	}
	ref.id = init.ID
	return ref
}

// initializeParams returns what is wrong with the params of an initialize,
// "" when nothing is: they must be an object whose protocolVersion is a
// string other than "", and whose capabilities and clientInfo are objects,
// none of the three missing or null (MCP 2025-11-25 schema,
// InitializeRequestParams: all three are required). What those objects
// hold is left to the engine, and so are other members, so that a newer
// client's additions pass.
func initializeParams(params json.RawMessage) string {
	var p map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil || p == nil {
		return "params must be an object"
	}
	for _, f := range []struct{ name, want string }{
		{"protocolVersion", `a string (the revision the client speaks, e.g. "2025-11-25")`},
		{"capabilities", "an object"},
		{"clientInfo", "an object with name and version"},
	} {
		v, ok := p[f.name]
		if !ok || string(bytes.TrimSpace(v)) == "null" {
			return "params." + f.name + " is required: " + f.want
		}
		if f.name == "protocolVersion" {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return "params.protocolVersion must be " + f.want
			}
			if s == "" {
				return "params.protocolVersion must not be empty: " + f.want
			}
			continue
		}
		var o map[string]json.RawMessage
		if json.Unmarshal(v, &o) != nil {
			return "params." + f.name + " must be " + f.want
		}
	}
	return ""
}

// initialize creates the session that init starts, sets its token in the
// response's Mcp-Session-Id, and returns the protocol version init asks
// for. The session the client held (token) is left alone here: it is
// superseded only once the new session's initialize succeeds (see
// settleInitialize). A failed creation is refused as the lookup's errors
// are (503 capacity, unavailable).
func (h *Handler) initialize(w http.ResponseWriter, r *http.Request, init *jsonrpc.Request) (*session.Live, string, *refusal) {
	live, err := h.reg.Create(r.Context(), userID(r))
	if err != nil {
		return nil, "", lookupRefusal(err)
	}
	w.Header().Set("Mcp-Session-Id", live.Token())
	var p struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	json.Unmarshal(init.Params, &p)
	return live, p.ProtocolVersion, nil
}

// supersede ends the session old names, which the client held when it
// initialized again and succeeded: a new session replaces it and its token
// answers 404 superseded (MCP 2025-11-25, "Session Management"). Get checks
// the user binding, so a request cannot end another user's session; a
// session another replica owns ends in the store, and that owner's renewal
// then fails.
func (h *Handler) supersede(ctx context.Context, old, user string) {
	if old == "" {
		return
	}
	if _, err := h.reg.Get(ctx, old, user); err == nil || errors.Is(err, fleet.ErrRemote) {
		h.reg.End(ctx, old, store.EndSuperseded)
	}
}

// initializeSucceeded waits until live's initialize is answered and reports
// whether it succeeded; it reports false at once when ctx ends (the client
// left) or the session ends first. The answer is recorded before it is
// stored, so the wait ends before the client can read it.
func (h *Handler) initializeSucceeded(ctx context.Context, live *session.Live) bool {
	select {
	case <-live.InitializeAnswered():
		return !live.InitializeFailed()
	case <-ctx.Done():
	case <-live.Done():
	}
	return false
}

// settleInitialize acts once live's initialize is answered: a failed
// initialize ends live's session, which never began (MCP 2025-11-25,
// lifecycle), so that it holds no room, and leaves the session old names
// (the one the client held, if any) and its streams unharmed; a successful
// one supersedes old. A session whose engine ends before initialize
// succeeded (a gateway's subprocess stopped) failed too. When the answer
// has not come yet (the client left first), a goroutine waits for it.
func (h *Handler) settleInitialize(ctx context.Context, live *session.Live, old, user string) {
	ctx = context.WithoutCancel(ctx)
	settle := func() {
		if live.InitializeFailed() {
			h.reg.End(ctx, live.Token(), store.EndInitializeFailed)
			return
		}
		h.supersede(ctx, old, user)
	}
	answered := live.InitializeAnswered()
	select {
	case <-answered:
		settle()
		return
	default:
	}
	go func() {
		select {
		case <-answered:
			settle()
		case <-live.Done():
			if !live.Initialized() {
				h.reg.End(ctx, live.Token(), store.EndInitializeFailed)
			}
		}
	}()
}
