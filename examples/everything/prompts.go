package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const simplePromptText = "This is a simple prompt for testing."

// userPrompt builds a prompt result whose messages all come from the user.
func userPrompt(description string, content ...mcp.Content) *mcp.GetPromptResult {
	res := &mcp.GetPromptResult{Description: description}
	for _, c := range content {
		res.Messages = append(res.Messages, &mcp.PromptMessage{Role: "user", Content: c})
	}
	return res
}

// addPrompts registers the prompts, one per kind of prompt content.
func addPrompts(s *mcp.Server) {
	s.AddPrompt(&mcp.Prompt{
		Name:        "test_simple_prompt",
		Description: "A prompt without arguments.",
	}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return userPrompt("A simple prompt", &mcp.TextContent{Text: simplePromptText}), nil
	})

	s.AddPrompt(&mcp.Prompt{
		Name:        "test_prompt_with_arguments",
		Description: "A prompt that interpolates two arguments.",
		Arguments: []*mcp.PromptArgument{
			{Name: "arg1", Description: "First test argument", Required: true},
			{Name: "arg2", Description: "Second test argument", Required: true},
		},
	}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		args := req.Params.Arguments
		text := fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", args["arg1"], args["arg2"])
		return userPrompt("A prompt with arguments", &mcp.TextContent{Text: text}), nil
	})

	s.AddPrompt(&mcp.Prompt{
		Name:        "test_prompt_with_embedded_resource",
		Description: "A prompt that embeds a resource given by URI.",
		Arguments: []*mcp.PromptArgument{
			{Name: "resourceUri", Description: "URI of the resource to embed", Required: true},
		},
	}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		uri := req.Params.Arguments["resourceUri"]
		if uri == "" {
			return nil, invalidParams("argument resourceUri must not be empty")
		}
		return userPrompt("A prompt with an embedded resource",
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI:      uri,
				MIMEType: "text/plain",
				Text:     "Embedded resource content for testing.",
			}},
			&mcp.TextContent{Text: "Please process the embedded resource above."},
		), nil
	})

	s.AddPrompt(&mcp.Prompt{
		Name:        "test_prompt_with_image",
		Description: "A prompt that includes an image.",
	}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return userPrompt("A prompt with an image",
			&mcp.ImageContent{Data: redPixelPNG(), MIMEType: "image/png"},
			&mcp.TextContent{Text: "Please analyze the image above."},
		), nil
	})
}

// completionCandidates lists the suggestions for each completable argument,
// keyed by reference ("prompt:NAME" or "resource:URI-TEMPLATE") and argument
// name.
var completionCandidates = map[string]map[string][]string{
	"prompt:test_prompt_with_arguments": {
		"arg1": {"hello", "help", "paris", "park", "party", "test", "testing"},
		"arg2": {"world", "word", "work", "test", "tested"},
	},
	"prompt:test_prompt_with_embedded_resource": {
		"resourceUri": {staticTextURI, staticBinaryURI, watchedURI, templatePrefix + "123" + templateSuffix},
	},
	"resource:" + templatePrefix + "{id}" + templateSuffix: {
		"id": {"1", "2", "42", "123", "456"},
	},
}

// maxCompletions is the most values a completion result may carry.
const maxCompletions = 100

// complete answers completion/complete with the candidates that start with
// what the user typed so far, in a stable (sorted) order. Unknown references
// get an empty list rather than an error: having no suggestion is normal.
func complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p := req.Params
	if p.Ref == nil {
		return nil, invalidParams("ref is required")
	}
	var key string
	switch p.Ref.Type {
	case "ref/prompt":
		key = "prompt:" + p.Ref.Name
	case "ref/resource":
		key = "resource:" + p.Ref.URI
	default:
		return nil, invalidParams("unsupported ref type %q", p.Ref.Type)
	}
	values := []string{} // never null on the wire
	for _, c := range completionCandidates[key][p.Argument.Name] {
		if strings.HasPrefix(c, p.Argument.Value) {
			values = append(values, c)
		}
	}
	sort.Strings(values)
	total := len(values)
	if len(values) > maxCompletions {
		values = values[:maxCompletions]
	}
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{
		Values:  values,
		Total:   total,
		HasMore: total > len(values),
	}}, nil
}
