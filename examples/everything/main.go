// Command everything serves, through Tidemark's handler, every tool,
// resource and prompt that the official MCP conformance suite's server
// scenarios call. See docs/testing.md.
//
// Sessions and tasks are kept in memory, in a data directory (--data-dir,
// package store/durable) or in Redis (--redis, package store/redis), so
// that the suite runs against each store; --journal adds the journal tool
// (journal.go) that a crash test counts executions with.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/requeststate"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/transport"
)

// Leases of the sessions and tasks of a process on Redis, as
// `tidemark serve --redis` takes them by default.
const (
	leaseTTL   = 10 * time.Second
	leaseRenew = 3 * time.Second
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3000", "address to listen on (host:port; port 0: a free port, logged)")
	path := flag.String("path", "/mcp", "HTTP path of the MCP endpoint")
	keys := flag.String("request-state-keys", "", "key ring file that seals requestState, as `tidemark serve --request-state-keys` reads it (path; empty: $"+requeststate.EnvKeys+", else a random key of this process)")
	dataDir := flag.String("data-dir", "", "keep sessions and tasks in this directory (store/durable), as `tidemark serve --data-dir` does (path; empty: in memory)")
	redisURL := flag.String("redis", "", "keep sessions and tasks in Redis (store/redis), as `tidemark serve --redis` does (URL; empty: in memory)")
	journal := flag.String("journal", "", "serve the journal tool, which appends one line per execution to this file (path; empty: no journal tool)")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *dataDir != "" && *redisURL != "" {
		logger.Error("--data-dir and --redis exclude each other: choose one store")
		os.Exit(2)
	}
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
	opts := &tidemark.Options{
		Transport: transport.Options{Logger: logger},
		Tasks:     &tidemark.TaskOptions{Tools: taskTools},
	}
	if err := openStore(opts, *dataDir, *redisURL, logger); err != nil {
		logger.Error("store", "error", err)
		os.Exit(1)
	}
	server, run := newServer(logger, requeststate.New(ring, requeststate.Options{Logger: logger}))
	if *journal != "" {
		addJournal(server, *journal)
		opts.Tasks.Tools = maps.Clone(taskTools)
		opts.Tasks.Tools["journal"] = journalTool
	}
	go run(ctx)
	h := tidemark.NewHandler(server, opts)
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

// openStore sets opts.Store to the store the flags choose: the durable
// store on dataDir, Redis at redisURL (this process then holds its
// sessions and tasks under leases, as one replica of a fleet), or, with
// neither, the handler's default memory store.
func openStore(opts *tidemark.Options, dataDir, redisURL string, logger *slog.Logger) error {
	var (
		st   store.Store
		kind string
	)
	switch {
	case dataDir != "":
		ds, err := durable.Open(dataDir, durable.Options{Logger: logger})
		if err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		st, kind = ds, "durable"
	case redisURL != "":
		rs, err := redis.New(context.Background(), redis.Options{URL: redisURL})
		if err != nil {
			return fmt.Errorf("--redis: %w (start redis-server there, or point --redis at a running one)", err)
		}
		st, kind = rs, "redis"
		opts.Sessions = session.Options{Owner: "everything-" + rand.Text()[:8], Lease: leaseTTL, RenewInterval: leaseRenew, Logger: logger}
	default:
		return nil
	}
	opts.Store = st
	logger.Info("store", "store", kind)
	return nil
}
