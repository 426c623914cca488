package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/requeststate"
)

// This file holds the tools and the prompt that need input from the client
// in the middle of a request, using the multi round-trip flow of the
// 2026-07-28 protocol (SEP-2322): instead of sending its own request, the
// server answers with resultType "input_required" listing what it needs, and
// the client retries the original request carrying the answers
// (inputResponses) and any requestState the server handed out.
//
// For clients of older protocol versions the SDK runs the same handlers
// transparently, sending the listed requests itself and calling the handler
// again with the answers.

// flowState is what a multi-round tool carries between its rounds, sealed
// in the requestState by package requeststate (bound to the caller, the
// tool call and a lifetime, and valid on every replica sharing the key
// ring).
type flowState struct {
	Step   string            `json:"step"`
	Values map[string]string `json:"values,omitempty"`
}

// sealFlow returns the requestState carrying st for req. Marshalling a
// flowState cannot fail.
func sealFlow(sealer *requeststate.Sealer, req *mcp.CallToolRequest, st flowState) string {
	state, err := sealer.Seal(requeststate.ToolCall(req), st)
	if err != nil {
		panic(err)
	}
	return state
}

// openFlow checks the requestState of req and returns what it carries; the
// error is the sealer's JSON-RPC refusal, which the handler returns as is.
func openFlow(ctx context.Context, sealer *requeststate.Sealer, req *mcp.CallToolRequest) (flowState, error) {
	var st flowState
	err := sealer.Open(ctx, requeststate.ToolCall(req), req.Params.RequestState, &st)
	return st, err
}

func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// unanchoredAnswers rejects a call to a stateful flow that carries answers but
// no requestState: the answers cannot be matched to a question this server
// asked, and silently starting over would hide the client's bug.
func unanchoredAnswers(p *mcp.CallToolParamsRaw) error {
	if p.RequestState == "" && len(p.InputResponses) > 0 {
		return invalidParams("inputResponses were sent without the requestState they answer")
	}
	return nil
}

// needInput is a tool result asking the client for input.
func needInput(requests mcp.InputRequestMap, state string) *mcp.CallToolResult {
	return &mcp.CallToolResult{InputRequests: requests, RequestState: state}
}

// elicitString asks the user for one string field.
func elicitString(message, field string) *mcp.ElicitParams {
	return &mcp.ElicitParams{
		Message:         message,
		RequestedSchema: objectSchema(map[string]any{field: map[string]any{"type": "string"}}, field),
	}
}

// confirmRequest asks the user for a yes/no confirmation.
func confirmRequest() *mcp.ElicitParams {
	return &mcp.ElicitParams{
		Message:         "Please confirm",
		RequestedSchema: objectSchema(map[string]any{"ok": map[string]any{"type": "boolean"}}, "ok"),
	}
}

func samplingRequest(prompt string, maxTokens int64) *mcp.CreateMessageParams {
	return &mcp.CreateMessageParams{
		Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: prompt}}},
		MaxTokens: maxTokens,
	}
}

// elicitation returns the elicitation answer stored under key, or nil if
// there is none. An answer of another kind is the client's error.
func elicitation(responses mcp.InputResponseMap, key string) (*mcp.ElicitResult, error) {
	r, ok := responses[key]
	if !ok || r == nil {
		return nil, nil
	}
	e, ok := r.(*mcp.ElicitResult)
	if !ok {
		return nil, invalidParams("inputResponses[%q] must be an elicitation result, got %s", key, responseKind(r))
	}
	return e, nil
}

// acceptedString returns the string the user entered for field in the
// elicitation answered under key, or "" if the user did not accept or left
// it empty.
func acceptedString(responses mcp.InputResponseMap, key, field string) string {
	e, err := elicitation(responses, key)
	if err != nil || e == nil || e.Action != "accept" {
		return ""
	}
	s, _ := e.Content[field].(string)
	return strings.TrimSpace(s)
}

// declined returns the action ("decline" or "cancel") of an elicitation
// answered under key that the user did not accept, or "" otherwise. Flows
// check it before asking again, so that a refusal ends the flow instead of
// repeating the question forever.
func declined(responses mcp.InputResponseMap, key string) string {
	e, err := elicitation(responses, key)
	if err != nil || e == nil || e.Action == "accept" {
		return ""
	}
	return e.Action
}

// samplingText returns the text of a sampling answer.
func samplingText(r mcp.InputResponse) (string, error) {
	switch r := r.(type) {
	case *mcp.CreateMessageWithToolsResult:
		return contentText(r.Content...), nil
	case *mcp.CreateMessageResult:
		return contentText(r.Content), nil
	default:
		return "", invalidParams("expected a sampling result, got %s", responseKind(r))
	}
}

// rootsList returns the root URIs of a roots/list answer.
func rootsList(r mcp.InputResponse) (string, error) {
	lr, ok := r.(*mcp.ListRootsResult)
	if !ok {
		return "", invalidParams("expected a roots/list result, got %s", responseKind(r))
	}
	uris := make([]string, 0, len(lr.Roots))
	for _, root := range lr.Roots {
		uris = append(uris, root.URI)
	}
	if len(uris) == 0 {
		return "(none)", nil
	}
	return strings.Join(uris, ", "), nil
}

func responseKind(r mcp.InputResponse) string {
	switch r.(type) {
	case *mcp.ElicitResult:
		return "an elicitation result"
	case *mcp.CreateMessageResult, *mcp.CreateMessageWithToolsResult:
		return "a sampling result"
	case *mcp.ListRootsResult:
		return "a roots/list result"
	default:
		return fmt.Sprintf("%T", r)
	}
}

// addInputRequiredTools registers the tools that gather client input through
// input_required results.
func addInputRequiredTools(s *mcp.Server, sealer *requeststate.Sealer) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_input_required_result_elicitation",
		Description: "Asks the user's name (elicitation) and greets them.",
	}, func(_ context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		if _, err := elicitation(req.Params.InputResponses, "user_name"); err != nil {
			return nil, nil, err
		}
		if action := declined(req.Params.InputResponses, "user_name"); action != "" {
			return textResult("Hello, whoever you are! (the user chose to %s)", action), nil, nil
		}
		if name := acceptedString(req.Params.InputResponses, "user_name", "name"); name != "" {
			return textResult("Hello, %s!", name), nil, nil
		}
		// No usable answer yet (none, under another key, or empty): ask again
		// rather than fail, as the protocol recommends.
		return needInput(mcp.InputRequestMap{"user_name": elicitString("What is your name?", "name")}, ""), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_input_required_result_sampling",
		Description: "Asks the client's LLM a question (sampling) and returns the answer.",
	}, func(_ context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		if r, ok := req.Params.InputResponses["capital_question"]; ok {
			text, err := samplingText(r)
			if err != nil {
				return nil, nil, err
			}
			return textResult("The model answered: %s", text), nil, nil
		}
		return needInput(mcp.InputRequestMap{"capital_question": samplingRequest("What is the capital of France?", 100)}, ""), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_input_required_result_list_roots",
		Description: "Asks the client for its roots (roots/list) and lists them.",
	}, func(_ context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		if r, ok := req.Params.InputResponses["client_roots"]; ok {
			roots, err := rootsList(r)
			if err != nil {
				return nil, nil, err
			}
			return textResult("Client roots: %s", roots), nil, nil
		}
		return needInput(mcp.InputRequestMap{"client_roots": &mcp.ListRootsParams{}}, ""), nil, nil
	})

	const stateTool = "test_input_required_result_request_state"
	mcp.AddTool(s, &mcp.Tool{
		Name:        stateTool,
		Description: "Asks for a confirmation and carries its progress in a sealed requestState.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		p := req.Params
		if p.RequestState == "" {
			if err := unanchoredAnswers(p); err != nil {
				return nil, nil, err
			}
			return needInput(mcp.InputRequestMap{"confirm": confirmRequest()}, sealFlow(sealer, req, flowState{Step: "confirm"})), nil, nil
		}
		st, err := openFlow(ctx, sealer, req)
		if err != nil {
			return nil, nil, err
		}
		answer, err := elicitation(p.InputResponses, "confirm")
		if err != nil {
			return nil, nil, err
		}
		if answer == nil {
			return needInput(mcp.InputRequestMap{"confirm": confirmRequest()}, p.RequestState), nil, nil
		}
		confirmed := answer.Action == "accept" && answer.Content["ok"] == true
		return textResult("state-ok: step %q verified, confirmed=%t", st.Step, confirmed), nil, nil
	})

	const multiTool = "test_input_required_result_multiple_inputs"
	mcp.AddTool(s, &mcp.Tool{
		Name:        multiTool,
		Description: "Asks for a name (elicitation), a greeting (sampling) and the client's roots in a single round.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		p := req.Params
		wanted := mcp.InputRequestMap{
			"user_name":    elicitString("What is your name?", "name"),
			"greeting":     samplingRequest("Generate a greeting", 50),
			"client_roots": &mcp.ListRootsParams{},
		}
		if p.RequestState == "" {
			if err := unanchoredAnswers(p); err != nil {
				return nil, nil, err
			}
			return needInput(wanted, sealFlow(sealer, req, flowState{Step: "all"})), nil, nil
		}
		if _, err := openFlow(ctx, sealer, req); err != nil {
			return nil, nil, err
		}
		// Ask again for whatever is still missing, keeping the same state.
		missing := mcp.InputRequestMap{}
		for key, r := range wanted {
			if _, ok := p.InputResponses[key]; !ok {
				missing[key] = r
			}
		}
		if len(missing) > 0 {
			return needInput(missing, p.RequestState), nil, nil
		}
		if _, err := elicitation(p.InputResponses, "user_name"); err != nil {
			return nil, nil, err
		}
		greeting, err := samplingText(p.InputResponses["greeting"])
		if err != nil {
			return nil, nil, err
		}
		roots, err := rootsList(p.InputResponses["client_roots"])
		if err != nil {
			return nil, nil, err
		}
		name := acceptedString(p.InputResponses, "user_name", "name")
		if name == "" {
			name = "(no name given)"
		}
		return textResult("Name: %s; greeting: %s; roots: %s", name, greeting, roots), nil, nil
	})

	const roundsTool = "test_input_required_result_multi_round"
	mcp.AddTool(s, &mcp.Tool{
		Name:        roundsTool,
		Description: "Asks two questions in two successive rounds, carrying the first answer in the requestState.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		p := req.Params
		askName := mcp.InputRequestMap{"step1": elicitString("Step 1: What is your name?", "name")}
		if p.RequestState == "" {
			if err := unanchoredAnswers(p); err != nil {
				return nil, nil, err
			}
			return needInput(askName, sealFlow(sealer, req, flowState{Step: "name"})), nil, nil
		}
		st, err := openFlow(ctx, sealer, req)
		if err != nil {
			return nil, nil, err
		}
		switch st.Step {
		case "name":
			if action := declined(p.InputResponses, "step1"); action != "" {
				return textResult("Stopped at step 1: the user chose to %s", action), nil, nil
			}
			name := acceptedString(p.InputResponses, "step1", "name")
			if name == "" {
				return needInput(askName, p.RequestState), nil, nil
			}
			next := flowState{Step: "color", Values: map[string]string{"name": name}}
			return needInput(mcp.InputRequestMap{
				"step2": elicitString("Step 2: What is your favorite color?", "color"),
			}, sealFlow(sealer, req, next)), nil, nil
		case "color":
			if action := declined(p.InputResponses, "step2"); action != "" {
				return textResult("Stopped at step 2: the user chose to %s", action), nil, nil
			}
			color := acceptedString(p.InputResponses, "step2", "color")
			if color == "" {
				return needInput(mcp.InputRequestMap{
					"step2": elicitString("Step 2: What is your favorite color?", "color"),
				}, p.RequestState), nil, nil
			}
			return textResult("%s's favorite color is %s", st.Values["name"], color), nil, nil
		default:
			return nil, nil, invalidParams("requestState is for an unknown step")
		}
	})

	const tamperTool = "test_input_required_result_tampered_state"
	mcp.AddTool(s, &mcp.Tool{
		Name:        tamperTool,
		Description: "Asks for a confirmation and rejects a retry whose requestState was altered.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		p := req.Params
		if p.RequestState == "" {
			if err := unanchoredAnswers(p); err != nil {
				return nil, nil, err
			}
			return needInput(mcp.InputRequestMap{"confirm": confirmRequest()}, sealFlow(sealer, req, flowState{Step: "confirm"})), nil, nil
		}
		if _, err := openFlow(ctx, sealer, req); err != nil {
			return nil, nil, err
		}
		if _, err := elicitation(p.InputResponses, "confirm"); err != nil {
			return nil, nil, err
		}
		return textResult("requestState verified"), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_input_required_result_capabilities",
		Description: "Asks for input only through the capabilities (elicitation, sampling, roots) the client declared.",
	}, func(_ context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		p := req.Params
		if len(p.InputResponses) > 0 {
			return textResult("Received %d answer(s)", len(p.InputResponses)), nil, nil
		}
		caps := req.ClientCapabilities()
		if caps == nil {
			caps = &mcp.ClientCapabilities{}
		}
		wanted := mcp.InputRequestMap{}
		if caps.Elicitation != nil {
			wanted["preferred_name"] = elicitString("What should we call you?", "name")
		}
		if caps.Sampling != nil {
			wanted["summary"] = samplingRequest("Summarize the MCP protocol in one sentence", 60)
		}
		if caps.RootsV2 != nil {
			wanted["client_roots"] = &mcp.ListRootsParams{}
		}
		if len(wanted) == 0 {
			return textResult("The client declared no capability to answer with, so nothing was asked"), nil, nil
		}
		return needInput(wanted, ""), nil, nil
	})
}

// addInputRequiredPrompt registers a prompt that needs user input before it
// can be rendered, showing that input_required is not limited to tools.
func addInputRequiredPrompt(s *mcp.Server) {
	ask := mcp.InputRequestMap{"user_context": elicitString("What context should the prompt use?", "context")}
	s.AddPrompt(&mcp.Prompt{
		Name:        "test_input_required_result_prompt",
		Description: "Asks the user for context (elicitation) before rendering.",
	}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		if _, err := elicitation(req.Params.InputResponses, "user_context"); err != nil {
			return nil, err
		}
		if declined(req.Params.InputResponses, "user_context") != "" {
			return userPrompt("Prompt rendered without user context", &mcp.TextContent{Text: "Write a short story."}), nil
		}
		setting := acceptedString(req.Params.InputResponses, "user_context", "context")
		if setting == "" {
			return &mcp.GetPromptResult{InputRequests: ask}, nil
		}
		return userPrompt("Prompt rendered with user context", &mcp.TextContent{Text: "Write a short story set in this context: " + setting}), nil
	})
}
