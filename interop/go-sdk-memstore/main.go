// Command go-sdk-memstore is a peer for `tidemark probe` tests and for the
// gateway's (tidemark serve --upstream): the demo server's tools
// (countdown, echo, confirm; package internal/demo) served by the go-sdk's
// own Streamable HTTP handler (mcp.NewStreamableHTTPHandler, go-sdk
// v1.8.0) with its in-memory event store (mcp.NewMemoryEventStore), the
// SDK's stock way to make streams resumable, or with none. Tidemark is not
// involved, so the probe's findings against it are the SDK's.
//
// Usage:
//
//	go-sdk-memstore [--addr 127.0.0.1:8080] [--path /mcp] [--event-store memory|none]
//
// Once listening it logs `msg=serving url=http://HOST:PORT/PATH` (slog text
// format) on stderr, with the port resolved when --addr ends in :0. Each
// initialize it receives is logged as `msg="initialize received"` with the
// client's name and protocol version.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/demo"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "TCP address to listen on (host:port; port 0 picks a free one)")
	path := flag.String("path", "/mcp", "URL path of the MCP endpoint")
	eventStore := flag.String("event-store", "memory", "memory: the go-sdk's MemoryEventStore, streams resumable; none: no event store, streams not resumable")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	opts := &mcp.StreamableHTTPOptions{Logger: logger}
	switch *eventStore {
	case "memory":
		opts.EventStore = mcp.NewMemoryEventStore(nil)
	case "none":
	default:
		fmt.Fprintf(os.Stderr, "go-sdk-memstore: --event-store %q: want memory or none\n", *eventStore)
		os.Exit(2)
	}
	server := demo.NewServer()
	server.AddReceivingMiddleware(logInitialize(logger))
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, opts)
	mux := http.NewServeMux()
	mux.Handle(*path, h)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-sdk-memstore: %v\n", err)
		os.Exit(1)
	}
	logger.Info("serving", "url", "http://"+ln.Addr().String()+*path, "event_store", *eventStore)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintf(os.Stderr, "go-sdk-memstore: %v\n", err)
		os.Exit(1)
	}
}

// logInitialize logs each initialize request: a test reads from it which
// client opened a session here, and with which protocol version.
func logInitialize(logger *slog.Logger) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.InitializeParams); ok && method == "initialize" {
				name := ""
				if p.ClientInfo != nil {
					name = p.ClientInfo.Name
				}
				logger.Info("initialize received", "client", name, "protocol_version", p.ProtocolVersion)
			}
			return next(ctx, method, req)
		}
	}
}
