package demo

// This file holds the notify tool and the resource it can announce: a way
// to watch a notification raised on one replica reach the
// subscriptions/listen streams of every replica (package fanout).

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/fanout"
)

// ReadmeURI is the demo's one resource: a text saying what the demo
// serves. Nothing changes it; notify announces an update of it (or of any
// other URI) on request.
const ReadmeURI = "demo://readme"

// readme is the text of ReadmeURI.
const readme = `Tidemark demo server. Tools: countdown (progress notifications), echo, ` +
	`confirm (a question to the user), notify (raises a notification for every replica's listeners).`

// NotifyArgs are the arguments of the notify tool.
type NotifyArgs struct {
	Method string `json:"method" jsonschema:"notifications/resources/updated, notifications/tools/list_changed, notifications/prompts/list_changed or notifications/resources/list_changed"`
	URI    string `json:"uri,omitempty" jsonschema:"the updated resource's URI (notifications/resources/updated only)"`
}

// addNotify registers on s the readme resource, resource subscriptions
// (the server must announce resources.subscribe for a listener to name
// URIs) and the notify tool, which raises its notification through bus.
func addNotify(s *mcp.Server, bus *fanout.Bus) {
	s.AddResource(&mcp.Resource{URI: ReadmeURI, Name: "readme", MIMEType: "text/plain", Description: "What the demo server serves."},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: ReadmeURI, MIMEType: "text/plain", Text: readme}}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{
		Name: "notify",
		Description: "Raises a notification for the subscriptions/listen streams (and sessions) of every replica: " +
			"a resource update of uri, or a tools, prompts or resources list change. It changes nothing.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, args NotifyArgs) (*mcp.CallToolResult, any, error) {
		n := fanout.Notification{Method: args.Method, URI: args.URI}
		if err := bus.Raise(ctx, n); err != nil {
			return textResult(err.Error(), true), nil, nil
		}
		text := "notified " + args.Method
		if args.URI != "" {
			text += " " + args.URI
		}
		return textResult(text, false), nil, nil
	})
}

// serverOptions returns a copy of base (nil: the zero options) with
// resource subscription handlers that accept any URI (the go-sdk keeps
// which session or stream holds which) where base has none, so that the
// server announces resources.subscribe.
func serverOptions(base *mcp.ServerOptions) *mcp.ServerOptions {
	var opts mcp.ServerOptions
	if base != nil {
		opts = *base
	}
	if opts.SubscribeHandler == nil {
		opts.SubscribeHandler = func(_ context.Context, req *mcp.SubscribeRequest) error {
			if req.Params.URI == "" {
				return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the resource URI is empty: name the resource to subscribe to"}
			}
			return nil
		}
	}
	if opts.UnsubscribeHandler == nil {
		opts.UnsubscribeHandler = func(context.Context, *mcp.UnsubscribeRequest) error { return nil }
	}
	return &opts
}
