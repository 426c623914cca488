// Command conformance-client is the MCP client that the official
// conformance suite (@modelcontextprotocol/conformance) drives in client
// mode, built on Tidemark's resumable transport (package client):
//
//	conformance client --command "conformance-client" --scenario sse-retry
//
// The suite starts a test server, then runs the command with the server's
// URL as the last argument and the scenario's name in
// $MCP_CONFORMANCE_SCENARIO. Scenarios:
//
//   - initialize: connect (initialize, notifications/initialized), close.
//   - tools_call: list the tools and call add_numbers with a=5, b=3.
//   - sse-retry: call test_reconnection, whose stream the server closes
//     after a priming event with retry 500 ms; the transport must resume
//     with GET and Last-Event-ID no sooner than that (SEP-1699).
//
// Any other scenario connects, lists the tools and closes. The exit code is
// 0 when every step succeeded, 1 otherwise (with the error on stderr).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/client"
)

// timeout bounds one scenario; the suite itself allows 30 seconds.
const timeout = 25 * time.Second

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: conformance-client URL (scenario in $MCP_CONFORMANCE_SCENARIO)")
		os.Exit(2)
	}
	url := os.Args[len(os.Args)-1]
	if err := run(url, os.Getenv("MCP_CONFORMANCE_SCENARIO")); err != nil {
		fmt.Fprintf(os.Stderr, "conformance-client: %v\n", err)
		os.Exit(1)
	}
}

func run(url, scenario string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tr := &client.Transport{
		Endpoint: url,
		Logger:   logger,
		OnEvent:  func(e client.Event) { fmt.Fprintf(os.Stderr, "transport event: %v\n", e) },
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "tidemark-conformance-client", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer cs.Close()

	switch scenario {
	case "initialize":
		return nil
	case "tools_call":
		if _, err := cs.ListTools(ctx, nil); err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		return callTool(ctx, cs, "add_numbers", map[string]any{"a": 5, "b": 3})
	case "sse-retry":
		return callTool(ctx, cs, "test_reconnection", map[string]any{})
	default:
		if _, err := cs.ListTools(ctx, nil); err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		return nil
	}
}

func callTool(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return fmt.Errorf("tools/call %s: %w", name, err)
	}
	if res.IsError {
		return fmt.Errorf("tools/call %s: the tool reported an error: %+v", name, res.Content)
	}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			fmt.Printf("%s: %s\n", name, tc.Text)
		}
	}
	return nil
}
