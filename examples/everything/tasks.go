package main

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// This file holds the fixtures of the conformance suite's tasks-*
// scenarios (the Tasks extension, io.modelcontextprotocol/tasks): ordinary
// tools, which Tidemark runs as tasks for a request that declared the
// extension (package taskrun). taskTools says which and how.

// mrtrWindow is how long test_tool_with_task's first round may take to be
// answered as it is: its input round comes before any task.
const mrtrWindow = 2 * time.Second

// taskTools are the tools that run as tasks, and how.
var taskTools = map[string]taskrun.Tool{
	"slow_compute":        {Support: tasks.Optional, Idempotent: true},
	"failing_job":         {Support: tasks.Required},
	"protocol_error_job":  {Support: tasks.Optional},
	"confirm_delete":      {Support: tasks.Optional},
	"multi_input":         {Support: tasks.Optional},
	"test_tool_with_task": {Support: tasks.Required, Window: mrtrWindow},
}

type greetArgs struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

type slowArgs struct {
	Seconds float64 `json:"seconds" jsonschema:"how long to work, in seconds"`
	Label   string  `json:"label,omitempty" jsonschema:"a label echoed in the result"`
}

type deleteArgs struct {
	Filename string `json:"filename" jsonschema:"the file to delete"`
}

// addTaskTools registers the fixtures of the tasks-* scenarios.
func addTaskTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "greet", Description: "Greets someone at once (never a task)."},
		func(_ context.Context, _ *mcp.CallToolRequest, a greetArgs) (*mcp.CallToolResult, any, error) {
			return textResult("Hello, %s!", a.Name), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{
		Name: "slow_compute", Description: "Works for `seconds` seconds, then answers; stops when cancelled.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, ReadOnlyHint: true},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, a slowArgs) (*mcp.CallToolResult, any, error) {
		if err := pause(ctx, time.Duration(a.Seconds*float64(time.Second))); err != nil {
			return nil, nil, err
		}
		return textResult("computed %q in %gs", a.Label, a.Seconds), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "failing_job", Description: "Fails with a tool error after about a second (runs only as a task)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
			if err := pause(ctx, time.Second); err != nil {
				return nil, nil, err
			}
			res := textResult("the job failed, as it always does")
			res.IsError = true
			return res, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "protocol_error_job", Description: "Ends with a JSON-RPC error (an internal failure)."},
		func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "protocol_error_job failed internally, as it always does"}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "confirm_delete", Description: "Asks to confirm (one elicitation), then deletes nothing."},
		func(_ context.Context, req *mcp.CallToolRequest, a deleteArgs) (*mcp.CallToolResult, any, error) {
			answer, err := elicitation(req.Params.InputResponses, "confirm")
			if err != nil {
				return nil, nil, err
			}
			if answer == nil {
				return needInput(mcp.InputRequestMap{"confirm": &mcp.ElicitParams{
					Message:         fmt.Sprintf("Delete %s?", a.Filename),
					RequestedSchema: objectSchema(map[string]any{"confirm": map[string]any{"type": "boolean"}}, "confirm"),
				}}, ""), nil, nil
			}
			if answer.Action == "accept" && answer.Content["confirm"] == true {
				return textResult("deleted %s", a.Filename), nil, nil
			}
			return textResult("kept %s (the user chose to %s)", a.Filename, answer.Action), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "multi_input", Description: "Asks two questions at once (two elicitations), then answers."},
		func(_ context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
			p := req.Params
			wanted := mcp.InputRequestMap{
				"name":    elicitString("What is your name?", "name"),
				"confirm": confirmRequest(),
			}
			missing := mcp.InputRequestMap{}
			for k, r := range wanted {
				if _, ok := p.InputResponses[k]; !ok {
					missing[k] = r
				}
			}
			if len(missing) > 0 {
				return needInput(missing, ""), nil, nil
			}
			for k := range wanted {
				if _, err := elicitation(p.InputResponses, k); err != nil {
					return nil, nil, err
				}
			}
			return textResult("name: %s; both answers received", acceptedString(p.InputResponses, "name", "name")), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "test_tool_with_task", Description: "Asks the user's name in a plain input round, then runs as a task that greets them."},
		func(_ context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
			if _, err := elicitation(req.Params.InputResponses, "user_name"); err != nil {
				return nil, nil, err
			}
			if name := acceptedString(req.Params.InputResponses, "user_name", "name"); name != "" {
				return textResult("Hello, %s! (from a task)", name), nil, nil
			}
			return needInput(mcp.InputRequestMap{"user_name": elicitString("What is your name?", "name")}, ""), nil, nil
		})
}
