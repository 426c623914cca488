package demo

// This file holds how a question's failure reaches the client: an answer
// that does not match the question's requestedSchema, the client's own
// error answer, and any other error of a call, each as a JSON-RPC error
// with a code and with words about the client's request, never the
// go-sdk's words about its own retry loop.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// addAnswerChecks installs on s what makes a question's failure reach the
// client in its own terms:
//
//   - elicitation/create's answer is checked against the question's
//     requestedSchema before the go-sdk checks it: a mismatch is a
//     -32602 error naming elicitation/create and what does not match
//     (MCP 2025-11-25, client/elicitation: the server validates the
//     content against the requested schema);
//   - a tools/call, prompts/get or resources/read that fails answers the
//     JSON-RPC error its failure holds (the client's own error answer to
//     the question, with its code and message; the mismatch above), not
//     the go-sdk's wrapping of it ("multi-round-trip: fulfilling input
//     request ..."), and an error that holds none answers -32603
//     (JSON-RPC 2.0, section 5.1: internal error) with its message: the
//     go-sdk answers such an error with code 0, which names no error
//     class.
func addAnswerChecks(s *mcp.Server) {
	s.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if err != nil || method != "elicitation/create" {
				return res, err
			}
			p, _ := req.GetParams().(*mcp.ElicitParams)
			answer, _ := res.(*mcp.ElicitResult)
			if p == nil || answer == nil || answer.Action != "accept" || answer.Content == nil {
				return res, nil
			}
			if err := matchSchema(p.RequestedSchema, answer.Content); err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the answer to elicitation/create " + err.Error()}
			}
			return res, nil
		}
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			switch method {
			case "tools/call", "prompts/get", "resources/read":
				if err != nil {
					return nil, wireError(err)
				}
			}
			return res, err
		}
	})
}

// matchSchema returns an error saying how content does not match schema
// (a JSON Schema as the request carries it; nil matches everything), or
// nil. The error reads "does not match its requestedSchema: ...".
func matchSchema(schema any, content map[string]any) error {
	if schema == nil {
		return nil
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return fmt.Errorf("has a requestedSchema that is not JSON: %v", err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("has a requestedSchema that is not a JSON Schema: %v", err)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return fmt.Errorf("has a requestedSchema that does not resolve: %v", err)
	}
	if err := resolved.Validate(content); err != nil {
		return fmt.Errorf("does not match its requestedSchema: %v", err)
	}
	return nil
}

// wireError returns the JSON-RPC error err answers with: the first
// *jsonrpc.Error err holds, as it is, or -32603 with err's message.
func wireError(err error) *jsonrpc.Error {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}
