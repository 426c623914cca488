// Command everything serves, through Tidemark's handler, every tool,
// resource and prompt that the official MCP conformance suite's server
// scenarios call. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/transport"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3000", "address to listen on (host:port; port 0: a free port, logged)")
	path := flag.String("path", "/mcp", "HTTP path of the MCP endpoint")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	server, run := newServer(logger)
	go run(ctx)
	h := tidemark.NewHandler(server, &tidemark.Options{Transport: transport.Options{Logger: logger}})
	mux := http.NewServeMux()
	mux.Handle(*path, h)
	// Listen before logging, so the logged URL has the resolved port.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		logger.Error("listen failed", "addr", *addr, "error", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Shutdown(sctx)
		srv.Shutdown(sctx)
	}()
	logger.Info("serving", "url", "http://"+ln.Addr().String()+*path)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		logger.Error("server failed", "error", err)
		os.Exit(1)
	}
	h.Close()
}
