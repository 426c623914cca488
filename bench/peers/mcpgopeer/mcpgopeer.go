// Package mcpgopeer is the mcp-go (github.com/mark3labs/mcp-go v1.2.1)
// peer of the benchmark: its StreamableHTTPServer with its in-memory event
// store, serving the countdown tool with internal/demo's behaviour (one
// notifications/progress per step when the call carries a progress token;
// a failed notification fails the call, as in the demo).
package mcpgopeer

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// MaxCountdownSteps bounds countdown's n, as internal/demo does.
const MaxCountdownSteps = 1_000_000

// NewHandler returns the mcp-go Streamable HTTP handler, stateful, with
// server.NewInMemoryEventStore for resumption.
func NewHandler() http.Handler {
	s := server.NewMCPServer("mcpgo-peer", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("countdown",
		mcp.WithDescription("Counts n steps, sending one progress notification per step, then returns."),
		mcp.WithNumber("n", mcp.Required(), mcp.Description("number of steps, 1 to 1000000")),
		mcp.WithNumber("delay_ms", mcp.Description("pause before each step, in milliseconds (0 to 60000)")),
	), countdown)
	return server.NewStreamableHTTPServer(s, server.WithEventStore(server.NewInMemoryEventStore()))
}

func countdown(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	n := req.GetInt("n", 0)
	delay := req.GetInt("delay_ms", 0)
	if n < 1 || n > MaxCountdownSteps {
		return mcp.NewToolResultError(fmt.Sprintf("n must be between 1 and %d, got %d", MaxCountdownSteps, n)), nil
	}
	if delay < 0 || delay > 60000 {
		return mcp.NewToolResultError(fmt.Sprintf("delay_ms must be between 0 and 60000, got %d", delay)), nil
	}
	var token mcp.ProgressToken
	if req.Params.Meta != nil {
		token = req.Params.Meta.ProgressToken
	}
	srv := server.ServerFromContext(ctx)
	for step := 1; step <= n; step++ {
		if delay > 0 {
			if err := sleep(ctx, delay); err != nil {
				return nil, err
			}
		} else if err := ctx.Err(); err != nil {
			return nil, err
		}
		if token == nil {
			continue
		}
		err := srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": token,
			"progress":      step,
			"total":         n,
			"message":       fmt.Sprintf("step %d of %d", step, n),
		})
		if err != nil {
			return nil, fmt.Errorf("progress step %d: %w", step, err)
		}
	}
	return mcp.NewToolResultText(fmt.Sprintf("countdown of %d finished", n)), nil
}

func sleep(ctx context.Context, ms int) error {
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
