// Package tidemark serves MCP over Streamable HTTP with resumable streams
// whose replay is safe by construction: replay validity is a function of
// (session, generation, cursor range), never of the cursor range alone.
//
// NewHandler is a drop-in replacement for the go-sdk's
// mcp.NewStreamableHTTPHandler: it hosts an *mcp.Server with durable
// sessions, generations, exact resumption and explicit refusals (404, 409,
// 400) where a replay would be unsafe. The parts it is built from are
// importable on their own: replay (cursor and decision), store (backends),
// eventlog, session, engine and transport.
package tidemark

import (
	"context"
	"log/slog"
	"net/http"
	"path"
	"reflect"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark-mcp/tidemark/bearer"
	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/metrics/prom"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/store/observed"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tracing"
	"github.com/tidemark-mcp/tidemark/transport"
)

// Options configures a Handler. The zero value serves from memory with the
// documented defaults of each part.
type Options struct {
	// Store keeps session records and event logs. Default: a new
	// memory.Store (sessions end with the process, so Close releases what
	// hibernated sessions keep outside it: session.Options.ReleaseOnClose).
	// The Handler closes it.
	Store store.Store
	// Retention bounds each session's event log and the process's total;
	// see eventlog.Options.
	Retention eventlog.Options
	// Sessions configures the session registry: idle TTL, capacity,
	// tombstones; see session.Options.
	Sessions session.Options
	// Transport configures HTTP behaviour: JSON responses, retry,
	// keep-alive, body limit, origins; see transport.Options. Its
	// Sessionless field is set by NewHandler.
	Transport transport.Options
	// SweepInterval is how often idle sessions are evicted or hibernated
	// and old events dropped, so a session lives at most this long past
	// its idle TTL. Default: 10 seconds, or a quarter of Sessions.IdleTTL,
	// of Sessions.HibernateAfter or of Retention.MaxAge when that is
	// shorter (at least 100 milliseconds).
	SweepInterval time.Duration
	// Restorable says that the server's handlers keep no per-session
	// state of their own, beyond what Tidemark restores in a new
	// ServerSession (the initialize parameters, the log level, the
	// resource subscriptions), so a session that hibernates
	// (Sessions.HibernateAfter) wakes at the same generation and every
	// cursor a client holds still resumes (gosdk.Engine.Restorable).
	// NewHandler only. Default false: a hibernated session wakes at
	// generation+1, as after a restart, and a resume of a stream from
	// before the hibernation answers 409.
	Restorable bool
	// Registerer, when set, receives Tidemark's Prometheus collectors
	// (package metrics/prom; docs/operating.md, "Metrics"), and every layer
	// records its events on them. NewHandler panics when they are
	// registered on it already: give each Handler a registry of its own.
	// Default: no metrics.
	Registerer prometheus.Registerer
	// Metrics, when set, is the recorder every layer records on instead
	// of one made for Registerer: a caller that also builds an engine
	// recording on it (stdio.Options.Metrics) makes it with prom.New.
	// Its sessions-live gauge is registered when it has WatchSessions.
	Metrics metrics.Recorder
	// TracerProvider, when set, starts Tidemark's spans: one per JSON-RPC
	// request (OpenTelemetry MCP semantic conventions), per resume, per
	// store write, and with Tasks per round of a task and per settle of one
	// by a reader (package tracing). Default: no spans.
	TracerProvider trace.TracerProvider
	// Auth, when set, makes the Handler an OAuth 2.1 resource server (MCP
	// 2025-11-25, basic/authorization): every request needs a bearer token
	// Auth.Verify accepts, and the sessions, tasks and requestStates it
	// creates belong to the token's user (transport.Auth). Default: no
	// authorization.
	Auth *Auth
	// Tasks, when set, serves the Tasks extension (io.modelcontextprotocol/
	// tasks) in the sessionless era, in front of Transport.Sessionless
	// (package taskrun; DESIGN.md, "Tasks: the executor rule"). The task
	// records go to Store when it keeps tasks (store.Tasks); otherwise
	// tasks are not served, and the handler logs why. Default: no tasks.
	Tasks *TaskOptions
}

// Auth configures the resource server of a Handler.
type Auth struct {
	// Verify checks a bearer token and says whom it acts for: a go-sdk
	// auth.TokenVerifier such as bearer.Verifier.Verify (JWTs against the
	// issuer's keys, or introspection). An error wrapping
	// auth.ErrInvalidToken answers 401 token_invalid; any other 503
	// unavailable. Required.
	Verify auth.TokenVerifier
	// Metadata is this resource's protected resource metadata (RFC 9728;
	// bearer.ResourceMetadata): its Resource, the URL clients reach the
	// endpoint at, gives the URL every challenge names
	// (bearer.ResourceMetadataURL), and Handler.ResourceMetadata serves
	// it. Required.
	Metadata *oauthex.ProtectedResourceMetadata
	// Scopes are the scopes every request needs; ToolScopes the scope a
	// tools/call of each tool needs besides (403 insufficient_scope).
	Scopes     []string
	ToolScopes map[string]string
}

// TaskOptions configures the Tasks extension of a Handler (taskrun.Options).
type TaskOptions struct {
	// Tools names the tools that run as tasks and how (taskrun.Tool);
	// every other tool answers at once.
	Tools map[string]taskrun.Tool
	// Fallback, when set, says how a tool not in Tools runs; nil: at once.
	Fallback func(name string) taskrun.Tool
	// TTL is each task's ttlMs, default and most 1 hour; Poll its
	// pollIntervalMs, default 1 second; Keep how long a settled task stays
	// readable at least, default 10 minutes.
	TTL, Poll, Keep time.Duration
	// Max is the most tasks this process runs at once (default 1,000);
	// Reruns how many times a task of an idempotent tool runs again after
	// its executor was lost (default 0: never).
	Max, Reruns int
	// Replica names this process (default: Sessions.Owner, else "local");
	// the lease on the tasks it runs is Sessions.Lease, renewed every
	// Sessions.RenewInterval.
	Replica string
	// Subject returns the owner of the tasks r creates and the only one
	// who sees them; default: the go-sdk auth.TokenInfo.UserID of r, or
	// "" without one.
	Subject func(*http.Request) string
}

// Handler is an http.Handler that serves one *mcp.Server.
type Handler struct {
	*transport.Handler
	tasks  *taskrun.Handler // nil: no tasks
	meta   http.Handler     // the protected resource metadata; nil: no Auth
	reg    *session.Registry
	st     store.Store
	cancel context.CancelFunc
	done   chan struct{}
}

// NewHandler returns a Handler serving server. Requests of the stateful era
// (protocol 2025-03-26 to 2025-11-25) get Tidemark's sessions and
// resumption; requests of the sessionless era (2026-07-28) are
// served by the go-sdk's stateless handler over the same server. It adds a
// receiving middleware to server (see gosdk.New). Call Close when done.
func NewHandler(server *mcp.Server, opts *Options) *Handler {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Transport.Sessionless == nil {
		tOpts := o.Transport
		o.Transport.Sessionless = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
			&mcp.StreamableHTTPOptions{
				Stateless:    true,
				JSONResponse: tOpts.JSONResponse,
				Logger:       tOpts.Logger,
				// The transport has already checked Host and Origin.
				DisableLocalhostProtection: true,
				MaxRequestBodyBytes:        tOpts.MaxBodyBytes,
				// A sessionless request lives exactly as long as its POST
				// (DESIGN.md, "Eras"): a cut one, or a task's call that
				// tasks/cancel stops, ends its handler.
				PropagateRequestCancellation: true,
			})
	}
	eng := gosdk.New(server)
	eng.Restorable = o.Restorable
	return NewEngineHandler(eng, &o)
}

// NewEngineHandler returns a Handler serving sessions whose live state eng
// hosts, such as the stdio gateway engine (engine/stdio). Requests of the
// sessionless era go to opts.Transport.Sessionless, and get 400
// protocol_version when it is nil. Call Close when done; Close does not
// close eng beyond ending the live state of each session.
func NewEngineHandler(eng engine.Engine, opts *Options) *Handler {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Store == nil {
		o.Store = memory.New(memory.Options{})
	}
	if _, ok := o.Store.(*memory.Store); ok {
		o.Sessions.ReleaseOnClose = true
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = defaultSweepInterval(o.Sessions.IdleTTL, o.Sessions.HibernateAfter, o.Retention.MaxAge)
	}
	if o.Sessions.Logger == nil {
		o.Sessions.Logger = o.Transport.Logger
	}
	var meta http.Handler
	if a := o.Auth; a != nil {
		if a.Verify == nil || a.Metadata == nil {
			panic("tidemark: Options.Auth needs Verify and Metadata")
		}
		u, err := bearer.ResourceMetadataURL(a.Metadata.Resource)
		if err != nil {
			panic("tidemark: Options.Auth.Metadata: " + err.Error())
		}
		o.Transport.Auth = &transport.Auth{Verify: a.Verify, ResourceMetadata: u, Scopes: a.Scopes, ToolScopes: a.ToolScopes}
		meta = auth.ProtectedResourceMetadataHandler(a.Metadata)
	}
	rec := o.Metrics
	if rec == nil && o.Registerer != nil {
		pr, err := prom.New(o.Registerer)
		if err != nil {
			panic("tidemark: Options.Registerer: " + err.Error())
		}
		rec = pr
	}
	// The task layer takes the store before the observed wrapper, which
	// keeps no task records.
	tracer := tracing.New(o.TracerProvider)
	tasksRun := taskHandler(&o, rec, tracer)
	if rec != nil || tracer != nil {
		o.Store = observed.New(o.Store, backendName(o.Store), rec, tracer)
	}
	if rec == nil {
		rec = metrics.Discard
	}
	o.Retention.Metrics = rec
	o.Sessions.Metrics, o.Sessions.Tracer = rec, tracer
	o.Transport.Metrics, o.Transport.Tracer = rec, tracer
	log := eventlog.New(o.Store, o.Retention)
	reg := session.New(o.Store, log, eng, o.Sessions)
	if w, ok := rec.(interface {
		WatchSessions(live, hibernated func() int, leased bool) error
	}); ok {
		if err := w.WatchSessions(reg.Len, reg.Hibernated, o.Sessions.Lease > 0); err != nil {
			panic("tidemark: Options.Registerer: " + err.Error())
		}
	}
	tOpts := o.Transport
	ctx, cancel := context.WithCancel(context.Background())
	h := &Handler{
		Handler: transport.New(reg, tOpts),
		tasks:   tasksRun, meta: meta, reg: reg, st: o.Store, cancel: cancel, done: make(chan struct{}),
	}
	go func() {
		defer close(h.done)
		reg.Run(ctx, o.SweepInterval)
	}()
	return h
}

// ResourceMetadata returns the handler of the protected resource metadata
// of Options.Auth (RFC 9728, with CORS for browser clients), nil without
// it. Serve it at the path bearer.ResourceMetadataURL gives for the
// resource (bearer.WellKnownPath followed by the endpoint's path), and at
// bearer.WellKnownPath itself for clients that look there first.
func (h *Handler) ResourceMetadata() http.Handler { return h.meta }

// Registry returns the session registry, for operations such as
// Registry().Recreate (start a new generation of a session).
func (h *Handler) Registry() *session.Registry { return h.reg }

// taskHandler wraps o.Transport.Sessionless with the Tasks extension when
// o.Tasks asks for it and o.Store keeps tasks, starts it, and returns it;
// nil otherwise.
func taskHandler(o *Options, rec metrics.Recorder, tracer *tracing.Tracer) *taskrun.Handler {
	if o.Tasks == nil || o.Transport.Sessionless == nil {
		return nil
	}
	log := o.Transport.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, ok := o.Store.(store.Tasks)
	if !ok {
		log.Warn("tasks not served: the store keeps no task records", "store", backendName(o.Store))
		return nil
	}
	t := o.Tasks
	replica := t.Replica
	if replica == "" {
		replica = o.Sessions.Owner
	}
	subject := t.Subject
	if subject == nil {
		subject = func(r *http.Request) string {
			if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
				return ti.UserID
			}
			return ""
		}
	}
	tools := func(name string) taskrun.Tool {
		if tool, ok := t.Tools[name]; ok {
			return tool
		}
		if t.Fallback != nil {
			return t.Fallback(name)
		}
		return taskrun.Tool{}
	}
	th := taskrun.New(o.Transport.Sessionless, taskrun.Options{
		Store: st, Tools: tools, Replica: replica,
		Lease: o.Sessions.Lease, Renew: o.Sessions.RenewInterval,
		TTL: t.TTL, Keep: t.Keep, Poll: t.Poll, Max: t.Max, Reruns: t.Reruns,
		Subject: subject, Logger: log, Metrics: rec, Tracer: tracer,
	})
	if err := th.Start(context.Background()); err != nil {
		log.Warn("tasks of an earlier process not all settled at start", "error", err)
	}
	o.Transport.Sessionless = th
	return th
}

// Drain stops taking new calls and waits until ctx ends for the calls in
// flight and the tasks this process runs (their leases are then released,
// so that the next reader settles them at once); see transport.Handler.
func (h *Handler) Drain(ctx context.Context) error {
	if h.tasks == nil {
		return h.Handler.Drain(ctx)
	}
	done := make(chan struct{})
	go func() { defer close(done); h.tasks.Shutdown(ctx) }()
	err := h.Handler.Drain(ctx)
	<-done
	return err
}

// Close stops the sweeper, stops the tasks this process runs, ends every
// session's live state in this process and closes the store. Shut the
// HTTP server down first.
func (h *Handler) Close() error {
	if h.tasks != nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		h.tasks.Shutdown(ctx)
	}
	h.cancel()
	<-h.done
	h.reg.Close()
	return h.st.Close()
}

// backendName returns the metrics label of a store: the last element of its
// package path (memory, durable, redis).
func backendName(st store.Store) string {
	t := reflect.TypeOf(st)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return path.Base(t.PkgPath())
}

// defaultSweepInterval is Options.SweepInterval's default: 10 seconds, or a
// quarter of the shortest positive limit the sweep enforces, at least 100
// milliseconds.
func defaultSweepInterval(limits ...time.Duration) time.Duration {
	d := 10 * time.Second
	for _, l := range limits {
		if l > 0 {
			d = min(d, l/4)
		}
	}
	return max(d, 100*time.Millisecond)
}
