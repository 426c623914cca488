package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/metrics/prom"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	redisstore "github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// The operator's listener of `tidemark serve --metrics-addr` (package
// admin): metrics, health probes and the session inspector, on a listener
// of its own, never the MCP one.

// readinessToken is the token /readyz looks up to check that the store
// answers: it is never issued (tokens are base32 without hyphens), so a
// reachable store answers "not found".
const readinessToken = "tidemark-readiness-probe"

// storeReady returns the readiness check of st: ready when st answers a
// lookup, with anything but a failure to reach it.
func storeReady(st store.Store) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := st.Get(ctx, readinessToken)
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrEnded) {
			return nil
		}
		return &admin.NotReadyError{Reason: replay.ReasonUnavailable, Err: fmt.Errorf("the store cannot be reached: %w", err)}
	}
}

// registeredReady returns the readiness check of a fleet replica: ready
// while the fleet's directory holds id at url, so other replicas can
// forward to it.
func registeredReady(fleet *redisstore.Store, id, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		got, err := fleet.Lookup(ctx, id)
		switch {
		case errors.Is(err, store.ErrUnavailable):
			return &admin.NotReadyError{Reason: replay.ReasonUnavailable, Err: err}
		case err != nil:
			return &admin.NotReadyError{Reason: replay.ReasonNotRegistered, Err: err}
		case got != url:
			return &admin.NotReadyError{Reason: replay.ReasonNotRegistered,
				Err: fmt.Errorf("replica %q is announced at %s, not at this process's %s", id, got, url)}
		}
		return nil
	}
}

// startAdmin listens on addr and serves opts there until the returned
// server is shut down. It fails when addr cannot be listened on.
func startAdmin(addr string, opts admin.Options, logger *slog.Logger) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr: listen on %s: %v (choose another address)", addr, err)
	}
	srv := &http.Server{Handler: admin.Handler(opts), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleConnTimeout}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics listener failed", "error", err)
		}
	}()
	return srv, ln, nil
}

// operator holds what serve sets up for operators: the metrics registry
// (nil without --metrics-addr), the tracer provider (nil when the OTEL_*
// variables ask for no tracing) and the operator's listener.
type operator struct {
	reg      *prometheus.Registry
	tp       *sdktrace.TracerProvider
	srv      *http.Server
	draining atomic.Bool // /readyz answers 503 shutdown once set
}

// setupTelemetry makes the registry (with --metrics-addr) and the tracer
// provider (from OTEL_*) and puts them in opts.
func (c *serveConfig) setupTelemetry(opts *tidemark.Options) (*operator, error) {
	o := &operator{}
	if c.metricsAddr != "" {
		o.reg = prom.NewRegistry()
		rec, err := prom.New(o.reg)
		if err != nil {
			return nil, err
		}
		opts.Metrics = rec // the gateway engine records on it too
	}
	tp, err := tracing.FromEnv(context.Background())
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if tp != nil {
		o.tp = tp
		opts.TracerProvider = tp
	}
	return o, nil
}

// listen starts the operator's listener on addr (nothing when addr is
// empty), with the readiness checks ready and the session inspector in.
func (o *operator) listen(addr string, ready []func(context.Context) error, in admin.Inspector, logger *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ready = append([]func(context.Context) error{func(context.Context) error {
		if o.draining.Load() {
			return &admin.NotReadyError{Reason: replay.ReasonShutdown, Err: errors.New("the server is shutting down")}
		}
		return nil
	}}, ready...)
	srv, ln, err := startAdmin(addr, admin.Options{Gatherer: o.reg, Ready: ready, Sessions: in}, logger)
	if err != nil {
		return err
	}
	o.srv = srv
	logger.Info("operator's listener", "url", "http://"+ln.Addr().String(), "endpoints", "/metrics /healthz /readyz /debug/sessions")
	return nil
}

// close stops the listener and flushes the spans not yet exported.
func (o *operator) close(logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if o.srv != nil {
		o.srv.Shutdown(ctx)
	}
	if o.tp != nil {
		if err := o.tp.Shutdown(ctx); err != nil {
			logger.Warn("flushing traces failed; the spans not yet exported are lost", "error", err)
		}
	}
}

// readiness returns /readyz's checks: the store answers (when it is not
// the process's memory), and in a fleet this replica is in the directory.
func (c *serveConfig) readiness(st store.Store, fleet *redisstore.Store, ln net.Listener) []func(context.Context) error {
	var checks []func(context.Context) error
	if st != nil {
		checks = append(checks, storeReady(st))
	}
	if fleet != nil {
		checks = append(checks, registeredReady(fleet, c.fleet.replicaID, c.fleet.advertise(ln, c.path)))
	}
	return checks
}

// inspector returns h's session inspector, or nil when it has none.
func inspector(h any) admin.Inspector {
	in, _ := h.(admin.Inspector)
	return in
}
