package bridge

// This file holds the sealing of the requestState the backend puts in its
// input-required results (MCP 2026-07-28, basic/patterns/mrtr): the client
// holds the backend's state only inside a state the Bridge's Sealer sealed.

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/requeststate"
)

// binding returns what a relayed state is bound to: the request's
// principal, method, target and arguments.
func (b *Bridge) binding(req mcp.Request, method, target string, args json.RawMessage) requeststate.Request {
	r := requeststate.Request{Method: method, Target: target, Arguments: args}
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil {
		r.Principal = extra.TokenInfo.UserID
	}
	return r
}

// sealState returns the state the client gets for the backend's state: ""
// for none, the backend's own without a Sealer, else a sealed state
// carrying it.
func (b *Bridge) sealState(binding requeststate.Request, state string) (string, error) {
	if state == "" || b.opts.Sealer == nil {
		return state, nil
	}
	return b.opts.Sealer.Seal(binding, state)
}

// openState returns the backend's state inside the state a retry carries,
// or the Sealer's refusal (a JSON-RPC error with its reason), which ends
// the request before it reaches the backend.
func (b *Bridge) openState(ctx context.Context, binding requeststate.Request, state string) (string, error) {
	if state == "" || b.opts.Sealer == nil {
		return state, nil
	}
	var inner string
	if err := b.opts.Sealer.Open(ctx, binding, state, &inner); err != nil {
		return "", err
	}
	return inner, nil
}
