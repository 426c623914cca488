package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Names of the tool and prompt that the trigger tools toggle. They exist only
// to make the tool and prompt lists change on demand.
const (
	transientTool   = "transient_tool"
	transientPrompt = "transient_prompt"
)

type headerInput struct {
	Region string `json:"region"`
	Level  int    `json:"level,omitempty"`
}

// addDiagnosticTools registers the tools the 2026-07-28 (stateless) scenarios
// use to probe protocol behaviour rather than features: capability checks,
// log gating, list-change notifications and Mcp-Param header mirroring.
func addDiagnosticTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_missing_capability",
		Description: "Needs the client's sampling capability; fails with MissingRequiredClientCapability (-32021) when it was not declared.",
	}, func(_ context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		if caps := req.ClientCapabilities(); caps == nil || caps.Sampling == nil {
			return nil, nil, missingCapability(&mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}})
		}
		if answer, ok := req.Params.InputResponses["haiku"]; ok {
			text, err := samplingText(answer)
			if err != nil {
				return nil, nil, err
			}
			return textResult("The client's LLM wrote: %s", text), nil, nil
		}
		// The capability is there, so use it: ask for a completion in band.
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"haiku": samplingRequest("Write a haiku about the sea", 60),
		}}, nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_streaming_elicitation",
		Description: "Needs user input while streaming: reports progress on the response stream, then asks for input in band (input_required) instead of sending an elicitation request.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		if _, err := elicitation(req.Params.InputResponses, "nickname"); err != nil {
			return nil, nil, err
		}
		if name := acceptedString(req.Params.InputResponses, "nickname", "nickname"); name != "" {
			return textResult("Streaming finished for %s", name), nil, nil
		}
		if action := declined(req.Params.InputResponses, "nickname"); action != "" {
			return textResult("Streaming finished without a nickname (the user chose to %s)", action), nil, nil
		}
		if token := req.Params.GetProgressToken(); token != nil {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: 1, Total: 2, Message: "waiting for user input",
			}); err != nil {
				return nil, nil, fmt.Errorf("sending progress: %w", err)
			}
		}
		// Under the stateless protocol the server may not send its own
		// requests on the response stream; input is asked for in the result.
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"nickname": &mcp.ElicitParams{
				Message:         "What should we call you?",
				RequestedSchema: objectSchema(map[string]any{"nickname": map[string]any{"type": "string"}}, "nickname"),
			},
		}}, nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_logging_tool",
		Description: "Logs one info message; the SDK only delivers it if the request opted in with a log level.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "test_logging_tool", Data: "test_logging_tool ran"}); err != nil {
			return nil, nil, fmt.Errorf("sending log message: %w", err)
		}
		return textResult("Log message emitted (delivered only if the request set a log level)"), nil, nil
	})

	// The trigger tools toggle a transient entry: each call is a real change
	// to the list (and so a list_changed notification to subscribers), while
	// the lists never grow beyond one extra entry.
	var mu sync.Mutex
	toolPresent, promptPresent := false, false

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_trigger_tool_change",
		Description: "Adds or removes a transient tool, so that subscribers receive notifications/tools/list_changed.",
	}, func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		defer mu.Unlock()
		if toolPresent {
			s.RemoveTools(transientTool)
		} else {
			mcp.AddTool(s, &mcp.Tool{
				Name:        transientTool,
				Description: "Exists only between calls of test_trigger_tool_change.",
			}, func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
				return textResult("transient tool called"), nil, nil
			})
		}
		toolPresent = !toolPresent
		return textResult("Tool list changed (%s present: %t)", transientTool, toolPresent), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_trigger_prompt_change",
		Description: "Adds or removes a transient prompt, so that subscribers receive notifications/prompts/list_changed.",
	}, func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		defer mu.Unlock()
		if promptPresent {
			s.RemovePrompts(transientPrompt)
		} else {
			s.AddPrompt(&mcp.Prompt{
				Name:        transientPrompt,
				Description: "Exists only between calls of test_trigger_prompt_change.",
			}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return userPrompt("", &mcp.TextContent{Text: "transient prompt"}), nil
			})
		}
		promptPresent = !promptPresent
		return textResult("Prompt list changed (%s present: %t)", transientPrompt, promptPresent), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_param_header",
		Description: "Has an argument mirrored into the Mcp-Param-Region HTTP header (SEP-2243), so intermediaries can route on it.",
		InputSchema: json.RawMessage(`{
			"type": "object",
			"properties": {
				"region": {"type": "string", "description": "Deployment region; also sent as Mcp-Param-Region", "x-mcp-header": "Region"},
				"level": {"type": "integer", "description": "Verbosity; not mirrored"}
			},
			"required": ["region"]
		}`),
	}, func(_ context.Context, _ *mcp.CallToolRequest, in headerInput) (*mcp.CallToolResult, any, error) {
		// The transport has already checked the header against the body.
		return textResult("region=%s level=%d", in.Region, in.Level), nil, nil
	})
}

// missingCapability is the protocol error for a request that needs client
// capabilities the client did not declare.
func missingCapability(required *mcp.ClientCapabilities) error {
	data, err := json.Marshal(mcp.MissingRequiredClientCapabilityData{RequiredCapabilities: required})
	if err != nil {
		return err
	}
	return &jsonrpc.Error{
		Code:    mcp.CodeMissingRequiredClientCapabilities,
		Message: "this tool needs client capabilities that were not declared",
		Data:    data,
	}
}
