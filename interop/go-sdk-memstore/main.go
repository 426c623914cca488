// Command go-sdk-memstore is a peer for `tidemark probe` tests: the demo
// server's tools (countdown, echo, confirm; package internal/demo) served by
// the go-sdk's own Streamable HTTP handler (mcp.NewStreamableHTTPHandler,
// go-sdk v1.8.0) with its in-memory event store (mcp.NewMemoryEventStore),
// the SDK's stock way to make streams resumable. Tidemark is not involved,
// so the probe's findings against it are the SDK's.
//
// Usage:
//
//	go-sdk-memstore [--addr 127.0.0.1:8080] [--path /mcp]
//
// Once listening it logs `msg=serving url=http://HOST:PORT/PATH` (slog text
// format) on stderr, with the port resolved when --addr ends in :0.
package main

import (
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
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	server := demo.NewServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		EventStore: mcp.NewMemoryEventStore(nil),
		Logger:     logger,
	})
	mux := http.NewServeMux()
	mux.Handle(*path, h)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-sdk-memstore: %v\n", err)
		os.Exit(1)
	}
	logger.Info("serving", "url", "http://"+ln.Addr().String()+*path, "event_store", "go-sdk MemoryEventStore")
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintf(os.Stderr, "go-sdk-memstore: %v\n", err)
		os.Exit(1)
	}
}
