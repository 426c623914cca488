package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

// serveConfig holds the flags of `tidemark serve`. Each flag's help text
// states its default and unit; README.md's flag table is checked against
// them by TestREADMEFlags.
type serveConfig struct {
	addr            string
	path            string
	jsonResponse    bool
	retentionEvents int
	retentionBytes  int64
	retentionAge    time.Duration
	budget          int64
	idleTTL         time.Duration
	maxSessions     int
	retry           time.Duration
	keepAlive       time.Duration
	maxBody         int64
	shutdownGrace   time.Duration
	logLevel        slog.Level
	logFormat       string
}

func serveFlags(stderr io.Writer) (*flag.FlagSet, *serveConfig) {
	c := &serveConfig{}
	fs := flag.NewFlagSet("tidemark serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "TCP address to listen on (host:port)")
	fs.StringVar(&c.path, "path", "/mcp", "URL path of the MCP endpoint")
	fs.BoolVar(&c.jsonResponse, "json-response", false, "answer POSTs with one application/json body instead of an SSE stream")
	fs.IntVar(&c.retentionEvents, "retention-events", eventlog.DefaultMaxEvents, "most events retained per session (events; -1: no limit)")
	fs.Int64Var(&c.retentionBytes, "retention-bytes", eventlog.DefaultMaxBytes, "most bytes retained per session (bytes; -1: no limit)")
	fs.DurationVar(&c.retentionAge, "retention-age", eventlog.DefaultMaxAge, "how long events are retained (duration; -1s: no limit)")
	fs.Int64Var(&c.budget, "retention-budget", eventlog.DefaultBudget, "most bytes retained across all sessions of this process (bytes; -1: no limit)")
	fs.DurationVar(&c.idleTTL, "session-idle-ttl", session.DefaultIdleTTL, "evict a session idle for this long (duration; -1s: never)")
	fs.IntVar(&c.maxSessions, "max-sessions", session.DefaultMaxSessions, "most live sessions; one more evicts the least recently used (sessions)")
	fs.DurationVar(&c.retry, "retry", transport.DefaultRetry, "SSE retry field sent in priming and close events (duration; -1s: none)")
	fs.DurationVar(&c.keepAlive, "keepalive", transport.DefaultKeepAlive, "idle time before an SSE keep-alive comment (duration; -1s: never)")
	fs.Int64Var(&c.maxBody, "max-body-bytes", transport.DefaultMaxBodyBytes, "largest POST body accepted (bytes)")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 10*time.Second, "how long SIGINT/SIGTERM waits for open requests (duration)")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: DEBUG, INFO, WARN or ERROR")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	return fs, c
}

func serve(args []string, stderr io.Writer) int {
	fs, c := serveFlags(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tidemark serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	logger, err := newLogger(stderr, c.logFormat, c.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark serve: %v\n", err)
		return 2
	}

	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark serve: listen on %s: %v (choose another --addr)\n", c.addr, err)
		return 1
	}
	h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
		Retention: eventlog.Options{MaxEvents: c.retentionEvents, MaxBytes: c.retentionBytes, MaxAge: c.retentionAge, Budget: c.budget},
		Sessions:  session.Options{IdleTTL: c.idleTTL, MaxSessions: c.maxSessions, Logger: logger},
		Transport: transport.Options{
			JSONResponse: c.jsonResponse, Retry: c.retry, KeepAlive: c.keepAlive,
			MaxBodyBytes: c.maxBody, Logger: logger,
		},
	})
	mux := http.NewServeMux()
	mux.Handle(c.path, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("serving", "url", "http://"+ln.Addr().String()+c.path, "store", "memory")

	select {
	case err := <-errc:
		logger.Error("server failed", "error", err)
		h.Close()
		return 1
	case <-ctx.Done():
	}
	logger.Info("shutting down", "reason", "signal", "grace", c.shutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownGrace)
	defer cancel()
	h.Shutdown(sctx) // streams get a final retry field, then close
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("shutdown incomplete", "error", err)
		srv.Close()
	}
	h.Close()
	logger.Info("stopped")
	return 0
}

func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
	}
}
