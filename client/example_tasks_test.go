package client_test

import (
	"context"
	"errors"
	"log"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/client"
)

// Calls as tasks in the sessionless era (protocol 2026-07-28): toward a
// server that offers the Tasks extension, countdown runs as a task that
// the transport polls to its end across cuts and restarts; a task whose
// server lost it fails with the task's own JSON-RPC error.
func ExampleTaskTransport() {
	ctx := context.Background()
	transport := &client.TaskTransport{
		Transport: &mcp.StreamableClientTransport{Endpoint: "http://127.0.0.1:8080/mcp"},
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, transport, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"n": 20, "delay_ms": 100}})
	var te *client.TaskError
	var rpc *jsonrpc.Error
	switch {
	case errors.As(err, &te) && errors.As(err, &rpc):
		// data.reason executor_lost: the server lost the task's executor;
		// the tool may or may not have taken effect.
		log.Printf("task %s failed: %d %s %s", te.TaskID, rpc.Code, rpc.Message, rpc.Data)
	case errors.Is(err, client.ErrTaskUnreachable):
		log.Printf("the server could not be reached to learn the outcome: %v", err)
	case err != nil:
		log.Fatal(err)
	default:
		log.Printf("result: %v", res.Content)
	}
}
