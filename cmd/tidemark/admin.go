// admin.go holds what `tidemark serve` sets up for operators: the
// --metrics-addr flag, the Prometheus recorder and the OTEL_* tracer
// provider the handler records on, and the operator's listener (package
// admin: metrics, health probes, the session and task inspectors), never
// the MCP one.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/metrics/prom"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/tracing"
	"github.com/tidemark-mcp/tidemark/transport"
)

// operatorConfig holds the flag of the operator's listener.
type operatorConfig struct {
	addr string // --metrics-addr; empty: no operator's listener, no metrics
}

func operatorFlags(fs *flag.FlagSet, c *operatorConfig) {
	fs.StringVar(&c.addr, "metrics-addr", "", "serve Prometheus metrics (/metrics), health probes (/healthz, /readyz) and the session and task inspectors (/debug/sessions, /debug/tasks) on this TCP address, a listener of its own (host:port; empty: off)")
}

// check refuses an operator's listener on the MCP listener's address
// mcpAddr (port 0 excepted: each listener gets a port of its own).
func (c operatorConfig) check(mcpAddr string) error {
	if c.addr == "" {
		return nil
	}
	if err := checkHostPort("metrics-addr", c.addr); err != nil {
		return err
	}
	if c.addr == mcpAddr && !strings.HasSuffix(mcpAddr, ":0") {
		return fmt.Errorf("--metrics-addr %s: the operator's listener must not be the MCP listener (--addr); choose another port", c.addr)
	}
	return nil
}

// operator is what serve sets up for operators: the metrics registry and
// recorder (nil without --metrics-addr), the tracer provider (nil when the
// OTEL_* variables ask for no tracing) and the operator's listener. The
// listener starts before the MCP one: /healthz answers at once, while
// /readyz answers 503 and the inspector knows no session until serve
// hands over the handler (attach).
type operator struct {
	reg      *prometheus.Registry
	rec      metrics.Recorder // nil without --metrics-addr
	tp       *sdktrace.TracerProvider
	srv      *http.Server
	serving  atomic.Pointer[serving]
	draining atomic.Bool // /readyz answers 503 shutdown once set
}

// serving is what attach hands the operator's listener.
type serving struct {
	sessions admin.Inspector
	ready    []func(context.Context) error
}

// start makes the registry and recorder (with --metrics-addr) and the
// tracer provider (from OTEL_*), and starts the operator's listener. It
// fails on OTEL_* values it cannot follow, or when the listener cannot
// listen. Call close when done, whatever start returns.
func (c operatorConfig) start(logger *slog.Logger) (*operator, error) {
	o := &operator{}
	tp, err := tracing.FromEnv(context.Background())
	if err != nil {
		return o, fmt.Errorf("tracing: %w", err)
	}
	o.tp = tp
	if c.addr == "" {
		return o, nil
	}
	o.reg = prom.NewRegistry()
	rec, err := prom.New(o.reg)
	if err != nil {
		return o, err
	}
	o.rec = rec
	build := currentBuild()
	if err := prom.RegisterBuildInfo(o.reg, build.Version, build.Revision, build.GoVersion); err != nil {
		return o, err
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return o, fmt.Errorf("--metrics-addr: listen on %s: %v (choose another address)", c.addr, err)
	}
	// The MCP listener's Host and Origin checks keep a page of a foreign
	// origin (DNS rebinding) from reading metrics and token prefixes.
	h := transport.GuardOriginAndHost(admin.Handler(admin.Options{
		Gatherer: o.reg, Ready: []func(context.Context) error{o.ready}, Sessions: o, Tasks: o, Build: &build,
	}), transport.Options{Logger: logger})
	o.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleConnTimeout}
	go func() {
		if err := o.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics listener failed", "error", err)
		}
	}()
	logger.Info("operator's listener started", "url", "http://"+ln.Addr().String(), "endpoints", "/metrics /healthz /readyz /debug/sessions /debug/tasks")
	return o, nil
}

// configure makes every layer of the handler opts builds record on o's
// recorder and trace with o's provider.
func (o *operator) configure(opts *tidemark.Options) {
	if o.rec != nil {
		opts.Metrics = o.rec
	}
	if o.tp != nil {
		opts.TracerProvider = o.tp
	}
}

// attach hands the operator's listener the session inspector and the
// readiness checks of the handler now serving.
func (o *operator) attach(in admin.Inspector, ready []func(context.Context) error) {
	o.serving.Store(&serving{sessions: in, ready: ready})
}

// ready is /readyz's check: 503 unavailable until attach, 503 shutdown
// once draining, else the attached checks in order.
func (o *operator) ready(ctx context.Context) error {
	s := o.serving.Load()
	switch {
	case o.draining.Load():
		return &admin.NotReadyError{Reason: replay.ReasonShutdown, Err: errors.New("the server is shutting down")}
	case s == nil:
		return &admin.NotReadyError{Reason: replay.ReasonUnavailable, Err: errors.New("the server is starting")}
	}
	for _, check := range s.ready {
		if err := check(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Recent implements admin.Inspector with the attached inspector; none
// before attach.
func (o *operator) Recent(ctx context.Context, n int) (admin.List, error) {
	if s := o.serving.Load(); s != nil {
		return s.sessions.Recent(ctx, n)
	}
	return admin.List{}, nil
}

// Lookup implements admin.Inspector with the attached inspector; none
// before attach.
func (o *operator) Lookup(ctx context.Context, prefix string) ([]admin.Detail, error) {
	if s := o.serving.Load(); s != nil {
		return s.sessions.Lookup(ctx, prefix)
	}
	return nil, nil
}

// RunningTasks implements admin.TaskInspector with the attached
// inspector; none before attach.
func (o *operator) RunningTasks() []admin.Task {
	if s := o.serving.Load(); s != nil {
		if in, ok := s.sessions.(admin.TaskInspector); ok {
			return in.RunningTasks()
		}
	}
	return nil
}

// SettledTasks implements admin.TaskInspector with the attached
// inspector; none before attach.
func (o *operator) SettledTasks() []admin.Task {
	if s := o.serving.Load(); s != nil {
		if in, ok := s.sessions.(admin.TaskInspector); ok {
			return in.SettledTasks()
		}
	}
	return nil
}

// LookupTasks implements admin.TaskInspector with the attached
// inspector; none before attach.
func (o *operator) LookupTasks(ctx context.Context, prefix string) ([]admin.TaskDetail, error) {
	if s := o.serving.Load(); s != nil {
		if in, ok := s.sessions.(admin.TaskInspector); ok {
			return in.LookupTasks(ctx, prefix)
		}
	}
	return nil, nil
}

// operatorCloseTime bounds close: the operator's listener's shutdown and
// the flush of the spans not yet exported share it. It is the last
// deadline of a shutdown (serveConfig.exitWithin).
const operatorCloseTime = 5 * time.Second

// close stops the listener and flushes the spans not yet exported, within
// operatorCloseTime.
func (o *operator) close(logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), operatorCloseTime)
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

// readinessToken is the token /readyz looks up to check that the store
// answers: it is never issued (tokens are base32 without hyphens), so a
// reachable store answers "not found".
const readinessToken = "tidemark-readiness-probe"

// checker is a store that can say whether it would refuse new data while
// its reads still answer (durable.Store: its data directory removed, or
// its file system below the free space it keeps).
type checker interface {
	Check(ctx context.Context) error
}

// readiness returns /readyz's checks: the store answers (when it is not
// the process's memory) and, when it can tell (checker), would take new
// data; and in a fleet this replica is in the directory at advertised.
func readiness(st store.Store, fleet *redis.Store, replicaID, advertised string) []func(context.Context) error {
	var checks []func(context.Context) error
	if st != nil {
		checks = append(checks, func(ctx context.Context) error {
			_, err := st.Get(ctx, readinessToken)
			if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrEnded) {
				return nil
			}
			return &admin.NotReadyError{Reason: replay.ReasonUnavailable, Err: fmt.Errorf("the store cannot be read: %w", err)}
		})
		if c, ok := st.(checker); ok {
			checks = append(checks, func(ctx context.Context) error {
				if err := c.Check(ctx); err != nil {
					return &admin.NotReadyError{Reason: replay.ReasonUnavailable, Err: fmt.Errorf("the store refuses new data: %w", err)}
				}
				return nil
			})
		}
	}
	if fleet != nil {
		checks = append(checks, func(ctx context.Context) error {
			got, err := fleet.Lookup(ctx, replicaID)
			switch {
			case errors.Is(err, store.ErrUnavailable):
				return &admin.NotReadyError{Reason: replay.ReasonUnavailable, Err: err}
			case err != nil:
				return &admin.NotReadyError{Reason: replay.ReasonNotRegistered, Err: err}
			case got != advertised:
				return &admin.NotReadyError{Reason: replay.ReasonNotRegistered,
					Err: fmt.Errorf("replica %q is announced at %s, not at this process's %s", replicaID, got, advertised)}
			}
			return nil
		})
	}
	return checks
}
