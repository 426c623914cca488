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
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/bearer"
	"github.com/tidemark-mcp/tidemark/engine/stdio"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/durable"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/transport"
)

// protocolAll is the --protocol that serves every revision, of both eras.
const protocolAll = "all"

// protocolVersions returns the revisions the server behind the
// sessionless era lists in server/discover
// (mcp.ServerOptions.SupportedProtocolVersions): 2026-07-28 alone with
// --protocol 2026-07-28, else nil, the go-sdk's every revision.
func (c *serveConfig) protocolVersions() []string {
	if c.protocol == transport.VSessionless {
		return []string{transport.VSessionless}
	}
	return nil
}

// serveConfig holds the flags of `tidemark serve`. Each flag's help text
// states its default and unit; the flag table of docs/operating.md is
// checked against them by TestDocsFlagTables.
type serveConfig struct {
	addr            string
	path            string
	jsonResponse    bool
	protocol        string // --protocol: protocolAll or transport.VSessionless
	retentionEvents int
	retentionBytes  int64
	retentionAge    time.Duration
	budget          int64
	idleTTL         time.Duration
	hibernateAfter  time.Duration // 0: never
	stdioHibernate  bool          // --stdio-hibernate
	maxSessions     int
	maxCalls        int
	retry           time.Duration
	keepAlive       time.Duration
	maxBody         int64
	maxInflight     int64
	maxListens      int
	shutdownGrace   time.Duration
	logLevel        slog.Level
	logFormat       string
	stdio           bool     // gateway mode: the command is fs.Args()
	env             []string // --env KEY=VALUE, in order
	maxProcesses    int
	initTimeout     time.Duration // --stdio-init-timeout
	cancelGrace     time.Duration // --stdio-cancel-grace
	dataDir         string        // empty: memory store
	operator        operatorConfig
	fleet           fleetConfig
	secrets         secretConfig
	state           stateConfig
	upstream        upstreamConfig
	tasks           taskConfig
	auth            authConfig
	version         bool // --version: print the build and exit
}

func serveFlags(stderr io.Writer) (*flag.FlagSet, *serveConfig) {
	c := &serveConfig{}
	fs := flag.NewFlagSet("tidemark serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "TCP address to listen on (host:port)")
	fs.StringVar(&c.path, "path", "/mcp", "URL path of the MCP endpoint (starts with /; no spaces, braces, ? or #)")
	fs.BoolVar(&c.jsonResponse, "json-response", false, "answer POSTs with one application/json body instead of an SSE stream")
	fs.StringVar(&c.protocol, "protocol", protocolAll, "the protocol revisions served: all (2024-11-05 to 2025-11-25, with sessions that resume, and 2026-07-28, sessionless) or 2026-07-28 (sessionless alone: server/discover lists it alone, and a request of an earlier revision, initialize included, gets 400 protocol_version with JSON-RPC error -32022 naming it)")
	fs.IntVar(&c.retentionEvents, "retention-events", eventlog.DefaultMaxEvents, "most events retained per session (events; -1: no limit)")
	fs.Int64Var(&c.retentionBytes, "retention-bytes", eventlog.DefaultMaxBytes, "most bytes retained per session (bytes; -1: no limit)")
	fs.DurationVar(&c.retentionAge, "retention-age", eventlog.DefaultMaxAge, "how long events are retained, except each session's newest (duration; -1s: no limit)")
	fs.Int64Var(&c.budget, "retention-budget", eventlog.DefaultBudget, "most bytes of events retained across all sessions of this process, newest events included: over it the oldest go first, and a session whose newest event is the oldest left is evicted; also sets the memory limit, this plus --max-inflight-bytes, 8 KiB per --max-sessions and 64 MiB (bytes; -1: no limit)")
	fs.DurationVar(&c.idleTTL, "session-idle-ttl", session.DefaultIdleTTL, "evict a session idle for this long (duration; -1s: never)")
	fs.DurationVar(&c.hibernateAfter, "hibernate-after", session.DefaultHibernateAfter, "hibernate a session idle for this long, with no call in flight and no open stream: only its record stays, in the store, and the next request wakes it; takes effect below --session-idle-ttl, and with --stdio only with --stdio-hibernate (duration; 0: never)")
	fs.IntVar(&c.maxSessions, "max-sessions", session.DefaultMaxSessions, "most live sessions; one more hibernates the least recently used one that is not busy (no call in flight, open stream or request being served), or, when sessions cannot hibernate, evicts the least recently used one with no call in flight; when none can give way, the request answers 503 capacity (sessions)")
	fs.IntVar(&c.maxCalls, "max-calls-per-session", session.DefaultMaxCallsPerSession, "most requests in flight on one session, and most messages in one JSON-RPC batch; more answer 429 too_many_calls, a larger batch 400 batch_too_large (requests)")
	fs.DurationVar(&c.retry, "retry", transport.DefaultRetry, "SSE retry field sent in priming and close events (duration; -1s: none)")
	fs.DurationVar(&c.keepAlive, "keepalive", transport.DefaultKeepAlive, "idle time before an SSE keep-alive comment (duration; -1s: never)")
	fs.Int64Var(&c.maxBody, "max-body-bytes", transport.DefaultMaxBodyBytes, "largest POST body accepted (bytes)")
	fs.Int64Var(&c.maxInflight, "max-inflight-bytes", transport.DefaultMaxInflightBytes, "most memory held by the request bodies of calls being answered, summed over the process, each body counting twice its size (it and its decoded copy) and 32 bytes per JSON value it holds (what decoding costs), at most the bound; a POST over it answers 503 inflight_bytes; at least twice --max-body-bytes (bytes; -1: no bound)")
	fs.IntVar(&c.maxListens, "max-listens", transport.DefaultMaxListens, "most 2026-07-28 subscriptions/listen streams open at once in this process, which no session counts; one more answers 503 capacity, those open unharmed; each holds 4 goroutines and about 100 KiB of RSS, so the default bounds them to about 100 MiB (streams; -1: no bound)")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 10*time.Second, "how long SIGINT/SIGTERM lets calls in flight finish (new calls get 503) before streams close with a final retry field (duration)")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: DEBUG, INFO, WARN or ERROR")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&c.stdio, "stdio", false, "gateway mode: serve the stdio MCP server named after -- (serve --stdio -- COMMAND [ARGS...]), one subprocess per session generation")
	fs.Func("env", "with --stdio: KEY=VALUE added to the environment of its subprocesses, which otherwise holds only PATH and HOME (repeatable)", func(kv string) error {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, not %q", kv)
		}
		c.env = append(c.env, kv)
		return nil
	})
	fs.StringVar(&c.dataDir, "data-dir", "", "keep sessions and event logs in this directory so they survive restarts and kill -9 (path; empty: in memory, lost on exit; when set, a 1 GiB bound on the directory replaces --retention-budget, and the memory limit is 688 MiB plus 8 KiB per --max-sessions, 766 MiB at the defaults)")
	fleetFlags(fs, &c.fleet)
	secretFlags(fs, &c.secrets)
	stateFlags(fs, &c.state)
	operatorFlags(fs, &c.operator)
	fs.IntVar(&c.maxProcesses, "max-processes", stdio.DefaultMaxProcesses, "with --stdio: most subprocesses running at once; a session beyond it gets 503 capacity (processes; -1: no limit)")
	fs.BoolVar(&c.stdioHibernate, "stdio-hibernate", false, "with --stdio: end a session's subprocess when the session hibernates (--hibernate-after); it wakes at generation+1 with a new subprocess, and streams from before it cannot be resumed")
	fs.DurationVar(&c.cancelGrace, "stdio-cancel-grace", stdio.DefaultCancelGrace, "with --stdio: how long a subprocess may still answer a call the client cancelled; then the call is answered with reason cancelled, its stream ends, and a later answer is dropped (duration)")
	fs.DurationVar(&c.initTimeout, "stdio-init-timeout", stdio.DefaultInitializeTimeout, "with --stdio: how long a subprocess may take to answer initialize; then its process group is killed and the initialize fails with reason initialize_timeout (duration; -1s: no limit)")
	upstreamFlags(fs, &c.upstream)
	taskFlags(fs, &c.tasks)
	authFlags(fs, &c.auth)
	fs.BoolVar(&c.version, "version", false, "print the version, commit, commit date and Go version of this build, and exit")
	return fs, c
}

// checkArgs checks the arguments after the flags, then the flags: those
// that apply with another one only (checkOnlyWith), then their values
// (check, and those of the upstream, of the operator's listener and of
// the fleet). fromEnv are the flags the environment set (applyEnv), by
// name: given on the command line or there, a flag that applies with
// another one only is refused without it, whatever its value.
func (c *serveConfig) checkArgs(fs *flag.FlagSet, fromEnv map[string]string) error {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	given := func(name string) bool { return onCommandLine[name] || fromEnv[name] != "" }
	switch {
	case c.stdio && fs.NArg() == 0:
		return errors.New("--stdio needs the server command after --, e.g. tidemark serve --stdio -- npx @modelcontextprotocol/server-everything stdio")
	case !c.stdio && fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := checkOnlyWith(fs, given); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if err := c.state.checkGiven(given, c.fleet.redisURL != ""); err != nil {
		return err
	}
	if err := c.upstream.check(c.stdio, os.LookupEnv); err != nil {
		return err
	}
	if err := c.tasks.check(); err != nil {
		return err
	}
	if err := c.operator.check(c.addr); err != nil {
		return err
	}
	if err := c.auth.check(os.LookupEnv); err != nil {
		return err
	}
	return c.fleet.check(c.dataDir)
}

// check refuses flag values that have no meaning, rather than reading them
// as a default: a zero limit, a path a URL cannot have, a negative wait.
func (c *serveConfig) check() error {
	if err := checkHostPort("addr", c.addr); err != nil {
		return err
	}
	// A query or fragment is never part of the path a request is matched
	// on (RFC 3986, section 3): such an endpoint would answer nothing.
	if !strings.HasPrefix(c.path, "/") || strings.ContainsAny(c.path, " \t{}?#") {
		return fmt.Errorf("--path %q: want a URL path starting with / (no spaces, braces, ? or #), e.g. /mcp", c.path)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return fmt.Errorf("--log-format %q: want text or json", c.logFormat)
	}
	if c.protocol != protocolAll && c.protocol != transport.VSessionless {
		return fmt.Errorf("--protocol %q: want %s or %s (sessionless alone)", c.protocol, protocolAll, transport.VSessionless)
	}
	if fi, err := os.Stat(c.dataDir); c.dataDir != "" && err == nil && !fi.IsDir() {
		return fmt.Errorf("--data-dir %q: is a file, not a directory: want a directory path (made if missing)", c.dataDir)
	}
	if err := c.fleet.checkValues(); err != nil {
		return err
	}
	if err := c.redisPassword(os.LookupEnv); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"retention-events", int64(c.retentionEvents)},
		{"retention-bytes", c.retentionBytes},
		{"retention-budget", c.budget},
	} {
		if f.v == 0 || f.v < -1 {
			return fmt.Errorf("--%s %d: want a positive number, or -1 for no limit", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name  string
		v     time.Duration
		least time.Duration // the least positive value
		off   string
	}{
		{"retention-age", c.retentionAge, 1, "no limit"},
		{"session-idle-ttl", c.idleTTL, 1, "never"},
		{"retry", c.retry, transport.MinRetry, "no retry field"},
		{"keepalive", c.keepAlive, transport.MinKeepAlive, "no keep-alive"},
		{"stdio-init-timeout", c.initTimeout, 1, "no limit"},
	} {
		if f.v == 0 {
			return fmt.Errorf("--%s 0: want a positive duration, or a negative one for %s", f.name, f.off)
		}
		if f.v > 0 && f.v < f.least {
			return fmt.Errorf("--%s %v: want %v or more, or a negative duration for %s", f.name, f.v, f.least, f.off)
		}
	}
	switch {
	case c.maxSessions <= 0:
		return fmt.Errorf("--max-sessions %d: want a positive number of sessions", c.maxSessions)
	case c.maxCalls <= 0:
		return fmt.Errorf("--max-calls-per-session %d: want a positive number of requests", c.maxCalls)
	case c.maxInflight == 0 || c.maxInflight < -1:
		return fmt.Errorf("--max-inflight-bytes %d: want a positive number of bytes, or -1 for no bound", c.maxInflight)
	case c.maxListens == 0 || c.maxListens < -1:
		return fmt.Errorf("--max-listens %d: want a positive number of streams, or -1 for no bound", c.maxListens)
	case c.maxBody <= 0:
		return fmt.Errorf("--max-body-bytes %d: want a positive number of bytes", c.maxBody)
	case c.maxInflight != -1 && c.maxInflight < transport.InflightCost*c.maxBody:
		// A body that counts more than the bound would pass the body
		// limit and then be refused 503 with Retry-After at every
		// attempt, for ever.
		return fmt.Errorf("--max-inflight-bytes %d is below twice --max-body-bytes %d (a body counts twice its size): a POST body of more than half of it could never be served, and would be told to retry for ever; "+
			"set --max-inflight-bytes to at least %d (or -1 for no bound), or lower --max-body-bytes", c.maxInflight, c.maxBody, transport.InflightCost*c.maxBody)
	case c.hibernateAfter < 0:
		return fmt.Errorf("--hibernate-after %v: want a positive duration, or 0 for never", c.hibernateAfter)
	case c.cancelGrace <= 0:
		return fmt.Errorf("--stdio-cancel-grace %v: want a positive duration", c.cancelGrace)
	case c.shutdownGrace < 0:
		return fmt.Errorf("--shutdown-grace %v: want zero or a positive duration", c.shutdownGrace)
	case c.maxProcesses == 0 || c.maxProcesses < -1:
		return fmt.Errorf("--max-processes %d: want a positive number, or -1 for no limit", c.maxProcesses)
	}
	if c.hibernateAfter == 0 {
		c.hibernateAfter = -1 // session.Options: negative is never
	}
	return c.state.check(c.upstream.url != "")
}

func serve(args []string, stdout, stderr io.Writer) int {
	fs, c := serveFlags(stderr)
	if code, ok := parseCommand(fs, args, &c.version, stdout, stderr); !ok {
		return code
	}
	fromEnv, err := applyEnv(fs, os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark serve: %v\n", err)
		return 2
	}
	// The error lines name the variable of a flag the environment set.
	errOut := &annotating{w: stderr, fromEnv: fromEnv}
	if err := c.checkArgs(fs, fromEnv); err != nil {
		fmt.Fprintf(errOut, "tidemark serve: %v\n", err)
		return 2
	}
	logger, err := newLogger(stderr, c.logFormat, c.logLevel)
	if err != nil {
		fmt.Fprintf(errOut, "tidemark serve: %v\n", err)
		return 2
	}
	if c.secrets.redisPasswordFile != "" {
		warnReadable(logger, "Redis password file", c.secrets.redisPasswordFile)
	}
	c.warnHibernation(logger)
	op, err := c.operator.start(logger)
	defer op.close(logger)
	if err != nil {
		fmt.Fprintf(errOut, "tidemark serve: %v\n", err)
		return 1
	}

	// The key ring and the store load before the listener, so a bad
	// --request-state-keys or --data-dir exits before any client connects.
	sealer, err := c.requestStateSealer(logger)
	if err != nil {
		fmt.Fprintf(errOut, "tidemark serve: %v\n", err)
		return 1
	}
	b, err := c.openStore(logger)
	if err != nil {
		fmt.Fprintf(errOut, "tidemark serve: %v\n", err)
		return 1
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		b.close()
		fmt.Fprintf(errOut, "tidemark serve: listen on %s: %v (choose another --addr)\n", c.addr, err)
		return 1
	}
	if err := c.upstream.notSelf(ln.Addr()); err != nil {
		ln.Close()
		b.close()
		fmt.Fprintf(errOut, "tidemark serve: %v\n", err)
		return 2
	}
	opts := c.options(b, logger)
	if opts.Auth, err = c.auth.options(ln.Addr(), c.path, logger); err != nil {
		ln.Close()
		b.close()
		fmt.Fprintf(errOut, "tidemark serve: %v\n", err)
		return 2
	}
	op.configure(opts)
	if b.fleet != nil {
		opts.Transport.Directory = b.fleet
		opts.Transport.Advertised = c.fleet.advertise(ln, c.path)
		if err := c.fleet.announceFirst(b.fleet, c.fleet.advertise(ln, c.path), logger); err != nil {
			ln.Close()
			b.close()
			fmt.Fprintf(errOut, "tidemark serve: %v\n", err)
			return 1
		}
	}
	h, closeEngine, err := c.engineHandler(fs, opts, logger, sealer)
	if err != nil {
		ln.Close()
		b.close()
		fmt.Fprintf(errOut, "tidemark serve: %v\n", err)
		return 2
	}
	op.attach(h, readiness(b.st, b.fleet, c.fleet.replicaID, c.fleet.advertise(ln, c.path)))
	// closeHandler ends every session's live state; in gateway mode all
	// subprocesses (or upstream sessions) end at once first, so none
	// outlives us. On the memory store the handler's Close then releases
	// the upstream sessions that hibernated sessions keep
	// (session.Options.ReleaseOnClose), and the engine's second Close
	// waits for those DELETEs.
	closeHandler := func() {
		closeEngine()
		h.Close()
		closeEngine()
	}
	return c.run(ln, h, b, op, closeHandler, c.servedAttrs(fs), logger)
}

// checkValues refuses fleet flag values that cannot work, whether or not
// --redis is set: a --redis URL none of go-redis's parsers reads, a
// --replica-id with spaces or control characters (it names the replica
// in logs, records and the directory), an --advertise-url that is not an
// absolute http(s) URL.
func (c *fleetConfig) checkValues() error {
	if c.redisURL != "" {
		if err := redis.CheckURL(c.redisURL); err != nil {
			return fmt.Errorf("--redis %q: %s: %s", redact.URL(c.redisURL), redact.URLError(c.redisURL, err), urlForms)
		}
	}
	if strings.IndexFunc(c.replicaID, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("--replica-id %q: want an ID without spaces or control characters, unique in the fleet", c.replicaID)
	}
	if c.advertiseURL != "" {
		return checkHTTPURL("advertise-url", c.advertiseURL, "this replica's MCP endpoint, which the other replicas reach")
	}
	return nil
}

// backing is the store `tidemark serve` runs on: st is nil for the memory
// store, fleet is st when it is Redis (--redis). attrs are the serving
// line's attributes that describe it.
type backing struct {
	st    store.Store
	fleet *redis.Store
	attrs []any
}

// close closes the store, if it is not the memory store.
func (b *backing) close() {
	if b.st != nil {
		b.st.Close()
	}
}

// openStore opens the store the flags choose (--data-dir, --redis, or the
// memory store) and sets the process's memory limit from what remains in
// this process's memory (setMemoryLimit), and the floor under the
// collector's heap goal (setHeapFloor). Its errors name the flag at
// fault.
func (c *serveConfig) openStore(logger *slog.Logger) (*backing, error) {
	b := &backing{attrs: []any{"store", "memory"}}
	if c.dataDir != "" {
		ds, err := durable.Open(c.dataDir, durable.Options{IdleTTL: c.idleTTL, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("--data-dir: %w", err)
		}
		b.st = ds
		b.attrs = []any{"store", "durable", "dir", ds.Dir()}
		// The process budget bounds memory; a durable store is bounded by
		// its data directory (durable.Options.MaxBytes) instead.
		c.budget = -1
	}
	if c.fleet.redisURL != "" {
		fleet, err := c.fleet.openRedis(logger, c.idleTTL)
		if err != nil {
			return nil, err
		}
		b.st, b.fleet = fleet, fleet
		b.attrs = []any{"store", "redis", "replica", c.fleet.replicaID}
		c.budget = -1 // Redis is not this process's memory
	}
	b.attrs = append(b.attrs, "memory_limit", setMemoryLimit(c.budget, c.maxInflight, c.maxSessions, b.st == nil), "heap_floor", setHeapFloor(b.st == nil))
	return b, nil
}

// options are the Handler's options the flags set, on the store b.
func (c *serveConfig) options(b *backing, logger *slog.Logger) *tidemark.Options {
	opts := &tidemark.Options{
		Store:     b.st,
		Retention: eventlog.Options{MaxEvents: c.retentionEvents, MaxBytes: c.retentionBytes, MaxAge: c.retentionAge, Budget: c.budget},
		Sessions: session.Options{
			IdleTTL: c.idleTTL, HibernateAfter: c.hibernateAfter, MaxSessions: c.maxSessions, MaxCallsPerSession: c.maxCalls,
			Logger: logger, Swept: newReleaser(logger).swept,
			// Only a data directory or Redis outlives the process, for
			// the next one to wake the sessions handed over in.
			HandOver: b.st != nil,
		},
		Transport: transport.Options{
			JSONResponse: c.jsonResponse, Retry: c.retry, KeepAlive: c.keepAlive,
			MaxBodyBytes: c.maxBody, MaxInflightBytes: c.maxInflight, MaxListens: c.maxListens, Logger: logger,
			SessionlessOnly: c.protocol == transport.VSessionless,
		},
	}
	if b.fleet != nil {
		opts.Sessions.Owner, opts.Sessions.Lease, opts.Sessions.RenewInterval = c.fleet.replicaID, c.fleet.leaseTTL, c.fleet.leaseRenew
	}
	return opts
}

// endpoint serves h at exactly c.path. The path is matched exactly, not
// through http.ServeMux, whose path cleaning answers "//mcp" or
// "/x/../mcp" with a 307 redirect; every other path is a JSON-RPC 404
// (TestServeUnknownPath). With --auth-issuer, the protected resource
// metadata is served at its well-known path, bare and suffixed with
// c.path (RFC 9728, section 3.1).
func (c *serveConfig) endpoint(h *tidemark.Handler) http.Handler {
	meta := h.ResourceMetadata()
	if c.path == "/" && meta == nil {
		return h
	}
	notFound := h.PathNotFound(c.path)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if meta != nil && (r.URL.Path == bearer.WellKnownPath || r.URL.Path == bearer.WellKnownPath+strings.TrimSuffix(c.path, "/")) {
			meta.ServeHTTP(w, r)
			return
		}
		if r.URL.Path != c.path {
			notFound.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// announce keeps this replica in the fleet's directory until the returned
// function is called, which withdraws it and returns once it is withdrawn.
// Without --redis it does nothing.
func (c *serveConfig) announce(ln net.Listener, b *backing, logger *slog.Logger) (stop func()) {
	if b.fleet == nil {
		return func() {}
	}
	actx, cancel := context.WithCancel(context.Background())
	announced := make(chan struct{})
	go func() {
		defer close(announced)
		c.fleet.announce(actx, b.fleet, c.fleet.advertise(ln, c.path), logger)
	}()
	return func() { cancel(); <-announced }
}

// run serves h on ln until SIGINT, SIGTERM or SIGHUP, then shuts down: calls in
// flight finish within --shutdown-grace (new calls get 503), then streams
// get a final retry field and close within streamCloseTime, then the
// sessions are handed over at their generation within handOverTime
// (session.Registry.HandOver). served are
// the serving line's attributes after the store's. It returns the
// process's exit code: 0 after a shutdown, 1 if the server failed.
func (c *serveConfig) run(ln net.Listener, h *tidemark.Handler, b *backing, op *operator, closeHandler func(), served []any, logger *slog.Logger) int {
	// IdleTimeout closes kept-alive connections that carry no request,
	// so idle clients cannot hold sockets without limit; streams are
	// requests in progress and are not affected.
	srv := &http.Server{Handler: c.endpoint(h), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleConnTimeout}
	// SIGHUP stops the process as SIGTERM does: a closed terminal or a
	// "reload" sent by habit drains it and hands its sessions over, where
	// Go's default would kill it at once (every session's generation
	// lost, as after SIGKILL). serve reads its configuration only at
	// start, so there is nothing to reload.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// stopAnnouncing withdraws this replica from the fleet's directory,
	// first thing at shutdown, so that others stop forwarding to it.
	stopAnnouncing := c.announce(ln, b, logger)
	attrs := append([]any{"url", "http://" + ln.Addr().String() + c.path}, b.attrs...)
	if b.fleet != nil {
		attrs = append(attrs, "advertise", c.fleet.advertise(ln, c.path))
	}
	logger.Info("serving", append(attrs, served...)...)

	var sig os.Signal
	select {
	case err := <-errc:
		logger.Error("server failed", "error", err)
		stopAnnouncing()
		closeHandler()
		return 1
	case sig = <-sigc:
	}
	op.draining.Store(true)
	// exit_within is the sum of the shutdown's deadlines: what a stop
	// timeout (Kubernetes' termination grace period after its preStop,
	// compose's stop_grace_period, systemd's TimeoutStopSec) must allow.
	logger.Info("shutting down", "reason", replay.ReasonSignal, "grace", c.shutdownGrace, "exit_within", c.exitWithin(), "signal", sig.String())
	stopAnnouncing()
	// Streams get their final retry field with a time of their own: a
	// drain that used up the grace must not cut them without it.
	dctx, cancelDrain := context.WithTimeout(context.Background(), c.shutdownGrace)
	defer cancelDrain()
	h.Drain(dctx)
	sctx, cancel := context.WithTimeout(context.Background(), streamCloseTime)
	defer cancel()
	h.Shutdown(sctx)
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("shutdown incomplete", "error", err)
		srv.Close()
	}
	// The calls have finished (or the grace ran out) and the streams are
	// closed: the sessions with nothing in flight that can wake exactly
	// are handed over at their generation, and Close ends the others (the
	// next process claims generation+1).
	hctx, cancelHandOver := context.WithTimeout(context.Background(), handOverTime)
	defer cancelHandOver()
	handed, left := h.Registry().HandOver(hctx)
	logger.Info("sessions handed over", "reason", replay.ReasonShutdown, "handed_over", handed, "not_handed_over", left)
	closeHandler()
	logger.Info("stopped")
	return 0
}

// streamCloseTime bounds the end of shutdown after the drain: sending every
// stream its final retry field and waiting for the handlers to return.
const streamCloseTime = 5 * time.Second

// handOverTime bounds the handover after the streams' close
// (session.Registry.HandOver): a log sync and a store write per session
// with nothing in flight, 16 at once. The sessions not reached by then
// are closed, as without a handover.
const handOverTime = 2 * time.Second

// exitWithin returns the sum of the deadlines of a shutdown after SIGINT
// or SIGTERM: the drain (--shutdown-grace), the streams' close
// (streamCloseTime), the sessions' handover (handOverTime), in a fleet
// the release of the leases (bounded by --lease-renew,
// session.Registry.Close), then the operator's listener and the traces'
// flush (operatorCloseTime). Only closing the store has no
// deadline of its own.
func (c *serveConfig) exitWithin() time.Duration {
	d := c.shutdownGrace + streamCloseTime + handOverTime + operatorCloseTime
	if c.fleet.redisURL != "" {
		d += c.fleet.leaseRenew
	}
	return d
}

// idleConnTimeout is how long a kept-alive connection may wait for its next
// request before the server closes it (http.Server.IdleTimeout).
const idleConnTimeout = 2 * time.Minute

// newLogger returns the logger of --log-format (text or json) and
// --log-level, writing to w. Durations read the same in both formats,
// as time.Duration.String writes them ("grace":"10s", grace=10s): the JSON
// handler's own form is an integer of nanoseconds, which the docs'
// examples (docs/deploying.md, "shutting down") and an operator comparing
// exit_within with a stop timeout do not read.
func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		opts.ReplaceAttr = durationString
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// durationString is a slog.HandlerOptions.ReplaceAttr that writes a
// time.Duration value as its String form.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// warnHibernation warns when --hibernate-after can never take effect:
// not below --session-idle-ttl, the sweep ends an idle session before it
// would hibernate (DESIGN.md, "Hibernation").
func (c *serveConfig) warnHibernation(logger *slog.Logger) {
	if c.hibernateAfter > 0 && c.idleTTL > 0 && c.hibernateAfter >= c.idleTTL {
		logger.Warn("--hibernate-after is not below --session-idle-ttl: idle sessions end before they would hibernate; set it lower to hibernate them",
			"hibernate_after", c.hibernateAfter, "session_idle_ttl", c.idleTTL)
	}
}
