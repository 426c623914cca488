package client_test

import (
	"context"
	"errors"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/client"
)

// A resumable transport for mcp.Client: progress arrives exactly once
// across broken connections, and a call lost with its session fails with
// ErrSessionLost (the transport has already started a new session, so it
// may be sent again).
func Example() {
	ctx := context.Background()
	transport := &client.Transport{
		Endpoint: "http://127.0.0.1:8080/mcp",
		OnEvent:  func(e client.Event) { log.Printf("transport: %v", e) },
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "1.0.0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			log.Printf("progress %v of %v", req.Params.Progress, req.Params.Total)
		},
	})
	cs, err := c.Connect(ctx, transport, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()

	params := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": 20, "delay_ms": 100}}
	params.SetProgressToken("countdown-1")
	res, err := cs.CallTool(ctx, params)
	switch {
	case errors.Is(err, client.ErrSessionLost):
		log.Printf("the server lost the session; the call may or may not have run: %v", err)
	case errors.Is(err, client.ErrStreamLost):
		log.Printf("the answer could not be resumed: %v", err)
	case err != nil:
		log.Fatal(err)
	default:
		log.Printf("result: %v", res.Content)
	}
}
