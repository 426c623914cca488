package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Texts that clients (and server_test.go) observe verbatim.
const (
	simpleText       = "This is a simple text response for testing."
	embeddedText     = "This is an embedded resource content."
	errorToolMessage = "This tool intentionally returns an error for testing"
)

// noInput is the argument type of tools that take no arguments. Its inferred
// schema is an object without properties.
type noInput struct{}

// textResult wraps a single text block in a tool result.
func textResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// pause waits for d, returning early with the context's error if the request
// is cancelled, so a cancelled call does not keep a goroutine busy.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// addContentTools registers the tools whose results exercise each content
// block type. They have no side effects.
func addContentTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_simple_text",
		Description: "Returns a single text content block.",
	}, func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
		return textResult("%s", simpleText), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_image_content",
		Description: "Returns a 1x1 red PNG image content block.",
	}, func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.ImageContent{Data: redPixelPNG(), MIMEType: "image/png"},
		}}, nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_audio_content",
		Description: "Returns a short WAV tone as an audio content block.",
	}, func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.AudioContent{Data: toneWAV(), MIMEType: "audio/wav"},
		}}, nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_embedded_resource",
		Description: "Returns a text resource embedded in the result.",
	}, func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI:      "test://embedded-resource",
				MIMEType: "text/plain",
				Text:     embeddedText,
			}},
		}}, nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_multiple_content_types",
		Description: "Returns text, image and embedded resource blocks in one result.",
	}, func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "Multiple content types test:"},
			&mcp.ImageContent{Data: redPixelPNG(), MIMEType: "image/png"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI:      "test://mixed-content-resource",
				MIMEType: "application/json",
				Text:     `{"test":"data","value":123}`,
			}},
		}}, nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_error_handling",
		Description: "Always fails, reporting the failure in the result (isError) rather than as a protocol error.",
	}, func(context.Context, *mcp.CallToolRequest, noInput) (*mcp.CallToolResult, any, error) {
		// A plain error from a typed handler becomes an isError result whose
		// text is the error message; only *jsonrpc.Error becomes a protocol
		// error.
		return nil, nil, errors.New(errorToolMessage)
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "json_schema_2020_12_tool",
		Description: "Declares an input schema using JSON Schema 2020-12 keywords ($defs, $anchor, allOf/anyOf, if/then/else).",
		// Raw JSON, so every keyword reaches tools/list exactly as written.
		InputSchema: json.RawMessage(`{
			"$schema": "https://json-schema.org/draft/2020-12/schema",
			"type": "object",
			"$defs": {
				"address": {
					"$anchor": "addressDef",
					"type": "object",
					"properties": {
						"street": {"type": "string"},
						"city": {"type": "string"}
					}
				}
			},
			"properties": {
				"name": {"type": "string"},
				"address": {"$ref": "#/$defs/address"},
				"contactMethod": {"type": "string", "enum": ["phone", "email"]},
				"phone": {"type": "string"},
				"email": {"type": "string"}
			},
			"allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
			"if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
			"then": {"required": ["phone"]},
			"else": {"required": ["email"]},
			"additionalProperties": false
		}`),
	}, func(_ context.Context, _ *mcp.CallToolRequest, args map[string]any) (*mcp.CallToolResult, any, error) {
		// The SDK has already validated args against the schema above.
		b, err := json.Marshal(args)
		if err != nil {
			return nil, nil, err
		}
		return textResult("Accepted contact details: %s", b), nil, nil
	})
}

// Progress and logging steps are spaced out so that a client can observe the
// notifications arriving while the call is still in flight.
const stepDelay = 50 * time.Millisecond

// reconnectDelay is the retry interval announced when test_reconnection
// closes its SSE stream; the result is produced after twice that, so a client
// that honours the interval is already resuming when it arrives.
const reconnectDelay = 250 * time.Millisecond

type samplingInput struct {
	Prompt string `json:"prompt" jsonschema:"the prompt to send to the client's LLM"`
}

type elicitationInput struct {
	Message string `json:"message" jsonschema:"the message to show the user"`
}

// addInteractiveTools registers the tools that talk back to the client while
// they run: notifications (logging, progress), server-to-client requests
// (sampling, elicitation) and a deliberate SSE disconnect. All of them use the
// handler's ctx, so the SDK routes what they send onto the stream of the
// request that caused it.
func addInteractiveTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_tool_with_logging",
		Description: "Sends three info-level log messages while it runs.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		msgs := []string{"Tool execution started", "Tool processing data", "Tool execution completed"}
		for i, msg := range msgs {
			if i > 0 {
				if err := pause(ctx, stepDelay); err != nil {
					return nil, nil, err
				}
			}
			// Log drops the message unless the client asked for this level.
			if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "test_tool_with_logging", Data: msg}); err != nil {
				return nil, nil, fmt.Errorf("sending log message: %w", err)
			}
		}
		return textResult("Logged %d messages", len(msgs)), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_tool_with_progress",
		Description: "Reports progress 0, 50 and 100 out of 100 when the request carries a progress token.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		token := req.Params.GetProgressToken()
		const total = 100
		for i, done := range []float64{0, 50, 100} {
			if i > 0 {
				if err := pause(ctx, stepDelay); err != nil {
					return nil, nil, err
				}
			}
			if token == nil {
				continue // nobody asked to be told
			}
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      done,
				Total:         total,
				Message:       fmt.Sprintf("%.0f%% done", done),
			})
			if err != nil {
				return nil, nil, fmt.Errorf("sending progress: %w", err)
			}
		}
		if token == nil {
			return textResult("Completed 3 steps (no progress token, so no progress was reported)"), nil, nil
		}
		return textResult("Completed 3 steps, reported progress to token %v", token), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_sampling",
		Description: "Asks the client's LLM to answer the prompt (sampling/createMessage) and returns its answer.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in samplingInput) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
			Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Prompt}}},
			MaxTokens: 100,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("sampling failed: %w", err)
		}
		return textResult("LLM response: %s", contentText(res.Content)), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_elicitation",
		Description: "Asks the user for a username and email (elicitation/create) and returns the answer.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in elicitationInput) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
			Message: in.Message,
			RequestedSchema: objectSchema(map[string]any{
				"username": map[string]any{"type": "string", "description": "User's response"},
				"email":    map[string]any{"type": "string", "description": "User's email address"},
			}, "username", "email"),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("elicitation failed: %w", err)
		}
		return textResult("User response: %s", describeElicitation(res)), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_elicitation_sep1034_defaults",
		Description: "Elicits a form whose primitive fields all carry default values (SEP-1034).",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
			Message: "Please review your profile; every field has a default",
			RequestedSchema: objectSchema(map[string]any{
				"name":     map[string]any{"type": "string", "description": "Full name", "default": "John Doe"},
				"age":      map[string]any{"type": "integer", "description": "Age in years", "default": 30},
				"score":    map[string]any{"type": "number", "description": "Score", "default": 95.5},
				"status":   map[string]any{"type": "string", "description": "Account status", "enum": []string{"active", "inactive", "pending"}, "default": "active"},
				"verified": map[string]any{"type": "boolean", "description": "Whether the account is verified", "default": true},
			}),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("elicitation failed: %w", err)
		}
		return textResult("Elicitation completed: %s", describeElicitation(res)), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_elicitation_sep1330_enums",
		Description: "Elicits a form using each enum style: untitled, titled (oneOf), legacy enumNames, and their multi-select forms (SEP-1330).",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		titled := func(prefix string) []map[string]any {
			names := []string{"First", "Second", "Third"}
			opts := make([]map[string]any, len(names))
			for i, n := range names {
				opts[i] = map[string]any{"const": fmt.Sprintf("value%d", i+1), "title": n + " " + prefix}
			}
			return opts
		}
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
			Message: "Pick some options",
			RequestedSchema: objectSchema(map[string]any{
				"untitledSingle": map[string]any{"type": "string", "enum": []string{"option1", "option2", "option3"}},
				"titledSingle":   map[string]any{"type": "string", "oneOf": titled("Option")},
				"legacyEnum": map[string]any{
					"type":      "string",
					"enum":      []string{"opt1", "opt2", "opt3"},
					"enumNames": []string{"Option One", "Option Two", "Option Three"},
				},
				"untitledMulti": map[string]any{
					"type": "array", "minItems": 1, "maxItems": 3,
					"items": map[string]any{"type": "string", "enum": []string{"option1", "option2", "option3"}},
				},
				"titledMulti": map[string]any{
					"type": "array", "minItems": 1, "maxItems": 3,
					"items": map[string]any{"anyOf": titled("Choice")},
				},
			}),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("elicitation failed: %w", err)
		}
		return textResult("Elicitation completed: %s", describeElicitation(res)), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_reconnection",
		Description: "Closes its SSE response stream mid-call and finishes afterwards, so the client must resume with Last-Event-ID to get the result (SEP-1699).",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
		closed := false
		if req.Extra != nil && req.Extra.CloseSSEStream != nil {
			req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: reconnectDelay})
			closed = true
		}
		if err := pause(ctx, 2*reconnectDelay); err != nil {
			return nil, nil, err
		}
		if !closed {
			// JSON responses and stdio have no stream to close.
			return textResult("Reconnection test completed (the transport had no SSE stream to close)"), nil, nil
		}
		return textResult("Reconnection test completed after the stream was closed"), nil, nil
	})
}

// objectSchema builds a flat object schema for an elicitation form.
func objectSchema(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// describeElicitation renders an elicitation answer as "action=..., content={...}".
func describeElicitation(res *mcp.ElicitResult) string {
	content := []byte("{}")
	if res.Content != nil {
		if b, err := json.Marshal(res.Content); err == nil {
			content = b
		}
	}
	return fmt.Sprintf("action=%s, content=%s", res.Action, content)
}

// contentText returns the text of content blocks, or a placeholder naming the
// type of a block that is not text.
func contentText(blocks ...mcp.Content) string {
	var out string
	for _, c := range blocks {
		if out != "" {
			out += "\n"
		}
		if t, ok := c.(*mcp.TextContent); ok {
			out += t.Text
		} else {
			out += fmt.Sprintf("(%T content)", c)
		}
	}
	return out
}
