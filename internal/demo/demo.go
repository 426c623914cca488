// Package demo is the MCP server that `tidemark serve` hosts when no other
// server is given: a few tools that exercise what Tidemark exists for
// (progress streams, a question to the user that works on every protocol
// revision and any replica, a notification that reaches the listeners of
// every replica) and nothing else.
package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/fanout"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// MaxCountdownSteps bounds countdown's n, so one call cannot occupy the
// server for ever.
const MaxCountdownSteps = 1_000_000

// CountdownArgs are the arguments of the countdown tool.
type CountdownArgs struct {
	N       int `json:"n" jsonschema:"number of steps, 1 to 1000000"`
	DelayMS int `json:"delay_ms,omitempty" jsonschema:"pause before each step, in milliseconds (0 to 60000)"`
}

// EchoArgs are the arguments of the echo tool.
type EchoArgs struct {
	Text string `json:"text" jsonschema:"the text to return"`
}

// Options configures the demo server. The zero value seals confirm's
// requestState with a random key of this process and notifies the
// listeners of this process only.
type Options struct {
	// Sealer seals and opens the requestState of confirm's input-required
	// results (protocol 2026-07-28). Nil: a Sealer of a random per-process
	// key (requeststate.RandomRing), whose states open only in this process.
	Sealer *requeststate.Sealer
	// Server holds the options of the mcp.Server, e.g. a SubscribeHandler
	// that records subscriptions for a test. Nil, or nil handlers within
	// it: the demo's own resource subscription handlers, which accept any
	// URI.
	Server *mcp.ServerOptions
	// Bus carries notify's notifications; New attaches it to the server.
	// Nil: a Bus of this process alone (fanout.Options zero value).
	Bus *fanout.Bus
}

// NewServer returns the demo server with its zero Options.
func NewServer() *mcp.Server { return New(Options{}) }

// ToolNames returns the names of the tools New's server has, sorted: what
// tidemark serve checks its --auth-tool-scope names against.
func ToolNames() []string { return []string{"confirm", "countdown", "echo", "notify"} }

// New returns the demo server with four tools and one resource:
//   - countdown: n steps, each after delay_ms milliseconds, each reported
//     as notifications/progress (progress = step, total = n) when the call
//     carries a progress token; then the text "countdown of N finished".
//     Cancellation stops it at the next step.
//   - echo: returns its text argument.
//   - confirm: asks the user to confirm a question and returns "accepted",
//     "declined" or "cancelled" (see AddConfirm).
//   - notify: raises a notification through opts.Bus for the
//     subscriptions/listen streams and sessions of every replica, and
//     returns "notified METHOD[ URI]".
//   - the resource ReadmeURI, which any URI's subscription comes with.
func New(opts Options) *mcp.Server {
	sealer := opts.Sealer
	if sealer == nil {
		sealer = requeststate.New(requeststate.RandomRing(), requeststate.Options{})
	}
	bus := opts.Bus
	if bus == nil {
		// Without Redis, New neither fails nor starts a goroutine.
		bus, _ = fanout.New(context.Background(), fanout.Options{})
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "tidemark-demo", Version: "1.0.0"}, serverOptions(opts.Server))
	mcp.AddTool(s, &mcp.Tool{
		Name:        "countdown",
		Description: "Counts n steps, sending one progress notification per step, then returns.",
	}, countdown)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Returns its text argument."}, echo)
	AddConfirm(s, sealer)
	addNotify(s, bus)
	bus.Attach(s)
	return s
}

func countdown(ctx context.Context, req *mcp.CallToolRequest, args CountdownArgs) (*mcp.CallToolResult, any, error) {
	if args.N < 1 || args.N > MaxCountdownSteps {
		return nil, nil, fmt.Errorf("n must be between 1 and %d, got %d", MaxCountdownSteps, args.N)
	}
	if args.DelayMS < 0 || args.DelayMS > 60000 {
		return nil, nil, fmt.Errorf("delay_ms must be between 0 and 60000, got %d", args.DelayMS)
	}
	token := req.Params.GetProgressToken()
	for step := 1; step <= args.N; step++ {
		if args.DelayMS > 0 {
			t := time.NewTimer(time.Duration(args.DelayMS) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, nil, ctx.Err()
			case <-t.C:
			}
		} else if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if token != nil {
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      float64(step),
				Total:         float64(args.N),
				Message:       fmt.Sprintf("step %d of %d", step, args.N),
			})
			if err != nil {
				return nil, nil, fmt.Errorf("progress step %d: %w", step, err)
			}
		}
	}
	return &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("countdown of %d finished", args.N)}},
	}, nil, nil
}

func echo(ctx context.Context, req *mcp.CallToolRequest, args EchoArgs) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: args.Text}}}, nil, nil
}
