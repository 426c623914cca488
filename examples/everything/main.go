// Command everything serves, through Tidemark's handler, every tool,
// resource and prompt that the official MCP conformance suite's server
// scenarios call. See docs/testing.md.
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
	"github.com/tidemark-mcp/tidemark/requeststate"
	"github.com/tidemark-mcp/tidemark/transport"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3000", "address to listen on (host:port; port 0: a free port, logged)")
	path := flag.String("path", "/mcp", "HTTP path of the MCP endpoint")
	keys := flag.String("request-state-keys", "", "key ring file that seals requestState, as `tidemark serve --request-state-keys` reads it (path; empty: $"+requeststate.EnvKeys+", else a random key of this process)")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ring, source, err := requeststate.LoadRing(*keys)
	if err != nil {
		logger.Error("key ring", "error", err)
		os.Exit(2)
	}
	if ring == nil {
		ring, source = requeststate.RandomRing(), "random key of this process"
	}
	logger.Info("request state keys", "source", source, "keys", ring.IDs())
	server, run := newServer(logger, requeststate.New(ring, requeststate.Options{Logger: logger}))
	go run(ctx)
	h := tidemark.NewHandler(server, &tidemark.Options{
		Transport: transport.Options{Logger: logger},
		Tasks:     &tidemark.TaskOptions{Tools: taskTools},
	})
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
