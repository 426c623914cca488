// Command benchpeer serves one of the benchmark's Go servers on loopback, so
// that tidemark-bench can run each as a separate process and read its CPU
// time and memory from /proc:
//
//	benchpeer --kind gosdk          go-sdk v1.8.0 StreamableHTTPHandler with MemoryEventStore, hosting internal/demo's server
//	benchpeer --kind mcpgo          mcp-go v1.2.1 StreamableHTTPServer with its InMemoryEventStore
//	benchpeer --kind ceiling        bare net/http handler writing Tidemark's SSE frames without MCP
//	benchpeer --kind tidemark-min   Tidemark's transport and memory store with the SDK-free minimal engine
//	benchpeer --kind tidemark       tidemark.NewHandler(internal/demo server): what `tidemark serve` runs, in process, for profiling
//	benchpeer --kind stdio          internal/demo's server over stdin and stdout (mcp.StdioTransport), for `tidemark serve --stdio`
//
// With --pprof ADDR it also serves net/http/pprof and expvar (/debug/vars,
// with runtime.MemStats) on ADDR and samples mutex contention and blocking
// (runtime.SetMutexProfileFraction(10), runtime.SetBlockProfileRate(10µs));
// without it nothing is sampled.
package main

import (
	"context"
	"errors"
	"expvar"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/bench/peers/ceiling"
	"github.com/tidemark-mcp/tidemark/bench/peers/mcpgopeer"
	"github.com/tidemark-mcp/tidemark/bench/peers/minengine"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("benchpeer", flag.ContinueOnError)
	kind := fs.String("kind", "", "server to run: gosdk, mcpgo, ceiling, tidemark-min, tidemark or stdio")
	addr := fs.String("addr", "127.0.0.1:0", "TCP address to listen on (host:port); the URL is printed on stdout")
	path := fs.String("path", "/mcp", "URL path of the MCP endpoint")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address (host:port) and sample mutex and block profiles; empty: off")
	retention := fs.Int("retention-events", 100_000, "Tidemark kinds: most events retained per session (events)")
	maxSessions := fs.Int("max-sessions", 20_000, "Tidemark kinds: most live sessions (sessions)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	if *kind == "stdio" {
		// Stdout carries the protocol; the server ends when stdin does (its
		// gateway closed it) or at SIGINT/SIGTERM.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := demo.NewServer().Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "benchpeer: stdio: %v\n", err)
			return 1
		}
		return 0
	}

	var h http.Handler
	var closeFn func() error
	switch *kind {
	case "gosdk":
		srv := demo.NewServer()
		h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
			&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
	case "mcpgo":
		h = mcpgopeer.NewHandler()
	case "ceiling":
		h = ceiling.New()
	case "tidemark-min":
		mh := minengine.NewHandler(minengine.Options{
			Retention:   eventlog.Options{MaxEvents: *retention},
			MaxSessions: *maxSessions,
			Logger:      logger,
		})
		h, closeFn = mh, mh.Close
	case "tidemark":
		th := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
			Retention: eventlog.Options{MaxEvents: *retention},
			Sessions:  session.Options{MaxSessions: *maxSessions, Logger: logger},
			Transport: transport.Options{Logger: logger},
		})
		h, closeFn = th, th.Close
	default:
		fmt.Fprintf(os.Stderr, "benchpeer: --kind must be gosdk, mcpgo, ceiling, tidemark-min, tidemark or stdio, not %q\n", *kind)
		return 2
	}

	if *pprofAddr != "" {
		runtime.SetMutexProfileFraction(10)
		runtime.SetBlockProfileRate(int((10 * time.Microsecond).Nanoseconds()))
		pm := http.NewServeMux()
		pm.HandleFunc("/debug/pprof/", pprof.Index)
		pm.HandleFunc("/debug/pprof/profile", pprof.Profile)
		pm.HandleFunc("/debug/pprof/trace", pprof.Trace)
		pm.Handle("/debug/vars", expvar.Handler())
		pln, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchpeer: pprof listen on %s: %v\n", *pprofAddr, err)
			return 1
		}
		go http.Serve(pln, pm)
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchpeer: listen on %s: %v\n", *addr, err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle(*path, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening http://%s%s\n", ln.Addr(), *path)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "benchpeer: serve: %v\n", err)
			return 1
		}
	case <-ctx.Done():
	}
	srv.Close()
	if closeFn != nil {
		closeFn()
	}
	return 0
}
