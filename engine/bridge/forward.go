package bridge

// This file holds the forwarding of a sessionless request to the backend:
// which methods go there, how their params are translated for the
// backend's revision, and how its errors come back.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// The per-request _meta keys of 2026-07-28 (basic/lifecycle) that a
// backend of an earlier revision must not see: the go-sdk would take a
// request carrying them for a request of 2026-07-28.
var sessionlessMeta = []string{
	mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities, mcp.MetaKeyLogLevel,
}

// forward is the server's receiving middleware: every request the backend
// answers goes there; the rest (server/discover, subscriptions/listen,
// notifications) is the go-sdk's. A tools/call of a mirrored tool goes
// through the go-sdk's tool dispatch, whose handler forwards it (so the
// go-sdk marks input-required results as such).
func (b *Bridge) forward(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch p := req.GetParams().(type) {
		case *mcp.CallToolParamsRaw:
			if b.mirrored(p.Name) {
				return next(ctx, method, req)
			}
			return b.callTool(ctx, req, p)
		case *mcp.GetPromptParams:
			return b.getPrompt(ctx, req, p)
		case *mcp.ReadResourceParams:
			return b.readResource(ctx, req, p)
		case *mcp.ListToolsParams, *mcp.ListPromptsParams, *mcp.ListResourcesParams,
			*mcp.ListResourceTemplatesParams, *mcp.CompleteParams:
			return b.list(ctx, p)
		}
		return next(ctx, method, req)
	}
}

// list forwards a request that carries no state and needs no tracking.
func (b *Bridge) list(ctx context.Context, params mcp.Params) (mcp.Result, error) {
	c, err := b.backend(ctx)
	if err != nil {
		return nil, wireError(err)
	}
	var res mcp.Result
	switch p := params.(type) {
	case *mcp.ListToolsParams:
		res, err = c.cs.ListTools(ctx, &mcp.ListToolsParams{Meta: c.meta(p.Meta), Cursor: p.Cursor})
	case *mcp.ListPromptsParams:
		res, err = c.cs.ListPrompts(ctx, &mcp.ListPromptsParams{Meta: c.meta(p.Meta), Cursor: p.Cursor})
	case *mcp.ListResourcesParams:
		res, err = c.cs.ListResources(ctx, &mcp.ListResourcesParams{Meta: c.meta(p.Meta), Cursor: p.Cursor})
	case *mcp.ListResourceTemplatesParams:
		res, err = c.cs.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Meta: c.meta(p.Meta), Cursor: p.Cursor})
	case *mcp.CompleteParams:
		q := *p
		q.Meta = c.meta(p.Meta)
		res, err = c.cs.Complete(ctx, &q)
	}
	if err != nil {
		return nil, b.lost(c, err)
	}
	return res, nil
}

// callTool forwards a tools/call.
func (b *Bridge) callTool(ctx context.Context, req mcp.Request, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	args := p.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	binding := b.binding(req, "tools/call", p.Name, p.Arguments)
	return relay(ctx, b, req, binding, p.Meta, p.RequestState,
		func(c *conn, meta mcp.Meta, state string) (*mcp.CallToolResult, *string, error) {
			res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{
				Meta: meta, Name: p.Name, Arguments: args, InputResponses: p.InputResponses, RequestState: state,
			})
			if err != nil {
				return nil, nil, err
			}
			return res, &res.RequestState, nil
		})
}

// getPrompt forwards a prompts/get.
func (b *Bridge) getPrompt(ctx context.Context, req mcp.Request, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	var args json.RawMessage
	if len(p.Arguments) > 0 {
		args, _ = json.Marshal(p.Arguments) // a map of strings always marshals
	}
	binding := b.binding(req, "prompts/get", p.Name, args)
	return relay(ctx, b, req, binding, p.Meta, p.RequestState,
		func(c *conn, meta mcp.Meta, state string) (*mcp.GetPromptResult, *string, error) {
			q := *p
			q.Meta, q.RequestState = meta, state
			res, err := c.cs.GetPrompt(ctx, &q)
			if err != nil {
				return nil, nil, err
			}
			return res, &res.RequestState, nil
		})
}

// readResource forwards a resources/read.
func (b *Bridge) readResource(ctx context.Context, req mcp.Request, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	binding := b.binding(req, "resources/read", p.URI, nil)
	return relay(ctx, b, req, binding, p.Meta, p.RequestState,
		func(c *conn, meta mcp.Meta, state string) (*mcp.ReadResourceResult, *string, error) {
			q := *p
			q.Meta, q.RequestState = meta, state
			res, err := c.cs.ReadResource(ctx, &q)
			if err != nil {
				return nil, nil, err
			}
			return res, &res.RequestState, nil
		})
}

// relay forwards one request that may carry a requestState (the client's
// _meta and state): it opens the state to the backend's own (a refusal
// ends the request before the backend sees it), tracks the call for its
// progress and log messages, has send make the request on the backend
// connection with the backend's _meta and state, and seals the state of
// the answer (send returns where it is).
func relay[R any](ctx context.Context, b *Bridge, req mcp.Request, binding requeststate.Request, meta mcp.Meta, state string,
	send func(c *conn, meta mcp.Meta, state string) (R, *string, error)) (R, error) {
	var zero R
	c, err := b.backend(ctx)
	if err != nil {
		return zero, wireError(err)
	}
	inner, err := b.openState(ctx, binding, state)
	if err != nil {
		return zero, err
	}
	m, done := b.calls.start(ctx, req, c.meta(meta))
	defer done()
	res, out, err := send(c, m, inner)
	if err != nil {
		return zero, b.lost(c, err)
	}
	if *out, err = b.sealState(binding, *out); err != nil {
		return zero, err
	}
	return res, nil
}

// meta returns the _meta the backend gets for a request that carried m: a
// copy, without the per-request keys of 2026-07-28 unless the backend
// speaks that revision.
func (c *conn) meta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := maps.Clone(m)
	if !c.modern {
		for _, k := range sessionlessMeta {
			delete(out, k)
		}
	}
	return out
}

// wireError returns the error a forwarded request answers the client with:
// the backend's JSON-RPC error as the backend sent it (code, message and
// data: the go-sdk client wraps it, and the wrapping would lose the data),
// a lost backend (its connection closed or at EOF) as an internal error with reason server_exited, and
// anything else as it is.
func wireError(err error) error {
	var wire *jsonrpc.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &wire):
		return wire
	// The go-sdk client fails the calls in flight with ErrConnectionClosed
	// or with the read error (io.EOF from engineConn.Read), whichever of
	// its closing and its reader comes first.
	case errors.Is(err, mcp.ErrConnectionClosed), errors.Is(err, io.EOF):
		data, _ := json.Marshal(map[string]any{"reason": replay.ReasonServerExited})
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Data: data,
			Message: "the MCP server behind this gateway ended before answering; the next request starts it again"}
	}
	return err
}
