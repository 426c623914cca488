package demo

// This file holds the confirm tool: one question put to the user, the same
// way for every protocol revision (multi round-trip requests, SEP-2322).

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/requeststate"
)

// ConfirmArgs are the arguments of the confirm tool.
type ConfirmArgs struct {
	Question string `json:"question" jsonschema:"the question to put to the user"`
}

// confirmKey is the inputRequests key of confirm's question.
const confirmKey = "confirm"

// AddConfirm registers the confirm tool on s. It asks the user its question
// through an elicitation with one required boolean field, "confirmed", and
// returns the text "accepted" (accepted with confirmed true), "declined"
// (declined, or accepted with confirmed false) or "cancelled".
//
// The handler answers its first call with an input-required result (MCP
// 2026-07-28, basic/patterns/mrtr) whose requestState sealer seals for this
// call: its principal, its question, and sealer's lifetime. A 2026-07-28
// client answers and retries, on any replica whose sealer shares the key
// ring; for a client of 2025-11-25 or earlier the go-sdk sends the
// elicitation/create request itself and calls the handler again with the
// answer and the same state. Either way the retry's state is opened first:
// a refused one ends the call with sealer's JSON-RPC error. A client that
// declared no elicitation capability gets a tool error instead of a
// question it cannot answer. An accepted answer whose content does not
// match the question's requestedSchema fails the call with -32602, under
// either protocol; AddConfirm installs on s the checks that say so, and
// that answer every failed call with a JSON-RPC error code (see
// addAnswerChecks).
func AddConfirm(s *mcp.Server, sealer *requeststate.Sealer) {
	addAnswerChecks(s)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "confirm",
		Description: "Asks the user to confirm a question (elicitation) and returns accepted, declined or cancelled.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, args ConfirmArgs) (*mcp.CallToolResult, any, error) {
		return confirm(ctx, sealer, req, args)
	})
}

func confirm(ctx context.Context, sealer *requeststate.Sealer, req *mcp.CallToolRequest, args ConfirmArgs) (*mcp.CallToolResult, any, error) {
	p := req.Params
	binding := requeststate.ToolCall(req)
	if p.RequestState == "" {
		if len(p.InputResponses) > 0 {
			// Answers to no question this server asked: starting over would
			// hide the client's mistake.
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "inputResponses were sent without the requestState they answer"}
		}
		if caps := req.ClientCapabilities(); caps == nil || caps.Elicitation == nil {
			return textResult("confirm needs a client that answers elicitation requests; this one declared no elicitation capability", true), nil, nil
		}
		return ask(sealer, binding, args.Question)
	}
	if err := sealer.Open(ctx, binding, p.RequestState, nil); err != nil {
		return nil, nil, err
	}
	r, ok := p.InputResponses[confirmKey]
	if !ok || r == nil {
		// The question went unanswered: ask again, as the protocol
		// recommends, under a fresh state (a single-use state is spent).
		return ask(sealer, binding, args.Question)
	}
	answer, ok := r.(*mcp.ElicitResult)
	if !ok {
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses[%q] must be an elicitation result, got %T", confirmKey, r)}
	}
	if answer.Action == "accept" && answer.Content != nil {
		if err := matchSchema(confirmSchema(), answer.Content); err != nil {
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses[%q] %v", confirmKey, err)}
		}
	}
	outcome := "cancelled"
	switch answer.Action {
	case "accept":
		outcome = "declined"
		if ok, _ := answer.Content["confirmed"].(bool); ok {
			outcome = "accepted"
		}
	case "decline":
		outcome = "declined"
	}
	return textResult(outcome, false), nil, nil
}

// ask returns the input-required result that puts question to the user,
// with a state sealed for binding.
func ask(sealer *requeststate.Sealer, binding requeststate.Request, question string) (*mcp.CallToolResult, any, error) {
	state, err := sealer.Seal(binding, nil)
	if err != nil {
		return nil, nil, err
	}
	// Content is empty, not nil: an input-required result has no content
	// (MCP 2026-07-28, InputRequiredResult), and the go-sdk writes a nil
	// one as "content": null where CallToolResult's schema wants an array.
	return &mcp.CallToolResult{
		Content:       []mcp.Content{},
		InputRequests: mcp.InputRequestMap{confirmKey: &mcp.ElicitParams{Message: question, RequestedSchema: confirmSchema()}},
		RequestState:  state,
	}, nil, nil
}

// confirmSchema is the requestedSchema of confirm's question: one
// required boolean field, "confirmed".
func confirmSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"confirmed": map[string]any{"type": "boolean", "description": "true to confirm"},
		},
		"required": []string{"confirmed"},
	}
}

func textResult(text string, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: isError}
}
