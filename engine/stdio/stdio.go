// Package stdio is Tidemark's gateway engine: it puts any MCP server that
// speaks the stdio transport (MCP 2025-11-25, basic/transports, "stdio":
// newline-delimited JSON-RPC on stdin and stdout, logs on stderr) behind
// Tidemark's resumable Streamable HTTP endpoint.
//
// Each session generation is one subprocess (DESIGN.md, "Engines"). A fresh
// session's subprocess starts when its initialize arrives; when the
// subprocess exits or crashes, its state is gone, so the session's next
// request re-creates it as a new subprocess at generation+1, to which the
// engine replays the stored initialize parameters, notifications/initialized,
// the log level and the resource subscriptions. Requests in flight when a
// subprocess dies fail with a JSON-RPC error on their streams whose reason
// is replay.ReasonServerExited; an initialize that reaches a subprocess
// that has exited already is answered the same way. A line on stdout over
// Options.MaxMessageBytes stops the subprocess, and its calls in flight
// fail with replay.ReasonMessageTooLarge instead.
//
// A call the client cancels (notifications/cancelled, passed on as it is)
// may still be answered within Options.CancelGrace; then it is answered
// with replay.ReasonCancelled, and a late answer of the subprocess is
// dropped (MCP 2025-11-25, utilities/cancellation: the server SHOULD NOT
// answer it). A new call with the ID of such a call reaches the subprocess
// under an ID of the engine's, since the subprocess may still run the old
// one.
//
// Outbound messages are related to inbound requests by JSON-RPC ID
// (responses) and progressToken (notifications/progress); logging messages
// and server-to-client requests relate to the one request in flight when
// exactly one is, and otherwise go to the standalone stream. Server-to-client
// requests get IDs unique within the session ("tidemark-<generation>-<n>"),
// because a new subprocess numbers its requests from the start again; the
// client's responses are mapped back to the subprocess's IDs.
//
// Hygiene: at most Options.MaxProcesses subprocesses run at once (Start
// then asks Options.Reclaim for room, and without it fails with
// engine.ErrCapacity, which the transport answers with 503 reason
// "capacity"); every subprocess leads its own process group, and
// ending a session (Close, idle eviction, DELETE, shutdown) ends the whole
// group, so no grandchild outlives it; the environment is explicit (PATH and
// HOME of Tidemark's own environment, then Options.Env). A subprocess that
// does not answer the client's initialize within Options.InitializeTimeout
// is stopped, and the initialize fails with reason
// replay.ReasonInitializeTimeout, so a command that is no MCP server
// cannot hold the client's POST open. Lines on stdout that are not
// JSON-RPC messages are dropped; the first 5 of each subprocess are logged
// in full, the rest counted in at most one log line per 10 seconds and
// one when it ends.
package stdio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/metrics"
)

// Defaults of Options.
const (
	// DefaultMaxProcesses is the default bound on concurrent subprocesses.
	DefaultMaxProcesses = 100
	// DefaultStartTimeout bounds how long Start waits for a re-created
	// subprocess to answer the replayed initialize and state requests.
	DefaultStartTimeout = 30 * time.Second
	// DefaultStopGrace is how long ending a subprocess waits after closing
	// its stdin before signalling its process group.
	DefaultStopGrace = 2 * time.Second
	// DefaultMaxMessageBytes bounds one line (one JSON-RPC message) that a
	// subprocess writes to stdout, in bytes.
	DefaultMaxMessageBytes = 16 << 20
	// DefaultInitializeTimeout bounds how long a subprocess may take to
	// answer the client's initialize.
	DefaultInitializeTimeout = 30 * time.Second
	// DefaultCancelGrace is how long a call the client cancelled may still
	// be answered by the subprocess before the engine answers it as
	// cancelled.
	DefaultCancelGrace = 5 * time.Second
)

// ErrClosed is wrapped by Start's error after Engine.Close.
var ErrClosed = errors.New("stdio: engine closed")

// Options configures an Engine.
type Options struct {
	// Command is the MCP server program, a path or a name looked up in
	// PATH when New runs. Required.
	Command string
	// Args are the program's arguments.
	Args []string
	// Env lists KEY=VALUE pairs added to the subprocess environment, after
	// PATH and HOME taken from Tidemark's environment (a pair with the same
	// KEY replaces them). Nothing else is inherited. Default: none.
	Env []string
	// Dir is the subprocess working directory. Default "": Tidemark's.
	Dir string
	// MaxProcesses is the most subprocesses running at once; Start of one
	// more session fails with an error wrapping engine.ErrCapacity, unless
	// Reclaim makes room. Default
	// (zero) DefaultMaxProcesses; negative: no limit.
	MaxProcesses int
	// Reclaim, when not nil, is asked for room when Start finds
	// MaxProcesses subprocesses running, before it refuses: it ends a
	// subprocess that serves nothing at the moment (the stdio gateway's:
	// the bridge's shared one with no sessionless request in flight,
	// bridge.Bridge.EndIdle), returns once that subprocess has been
	// reaped, and reports whether it ended one; Start then tries once
	// more. It must not call Start. Default nil: Start refuses at once.
	Reclaim func() bool
	// StartTimeout bounds how long Start waits for a re-created subprocess
	// to answer the replayed initialize, logging/setLevel and
	// resources/subscribe requests. Default (zero) 30 seconds.
	StartTimeout time.Duration
	// StopGrace is how long ending a subprocess waits for it to exit after
	// its stdin is closed (MCP 2025-11-25, stdio shutdown) before SIGTERM
	// goes to its process group, and as long again before SIGKILL. Default
	// (zero) 2 seconds.
	StopGrace time.Duration
	// MaxMessageBytes bounds one line a subprocess writes to stdout, in
	// bytes; a longer line ends the subprocess (its stream of messages can
	// no longer be trusted). Default (zero) 16 MiB.
	MaxMessageBytes int
	// InitializeTimeout bounds how long a subprocess may take to answer
	// the client's initialize, from when Deliver hands it over. A
	// subprocess that has not answered by then is stopped as a crashed one
	// is (SIGKILL to its process group), and the initialize, like any
	// other call it left in flight, gets a JSON-RPC internal error whose
	// error.data.reason is replay.ReasonInitializeTimeout. Default (zero)
	// DefaultInitializeTimeout, 30 seconds; negative: no limit. The
	// replayed initialize of a re-created session is bounded by
	// StartTimeout instead.
	InitializeTimeout time.Duration
	// CancelGrace is how long the subprocess may still answer a call the
	// client cancelled (notifications/cancelled, which goes to the
	// subprocess as it is). MCP 2025-11-25, utilities/cancellation: the
	// receiver of a cancellation SHOULD NOT answer the cancelled request,
	// so a call left unanswered at the end of the grace gets a JSON-RPC
	// internal error whose error.data.reason is replay.ReasonCancelled:
	// its stream ends, it no longer counts against its session's bounds,
	// and its ID may be sent again. An answer within the grace reaches
	// the client as any answer does; one after it is dropped. Default
	// (zero) DefaultCancelGrace, 5 seconds.
	CancelGrace time.Duration
	// Hibernate lets an idle session hibernate (DESIGN.md, "Hibernation"):
	// its subprocess is ended, and the next request starts a new one at
	// generation+1 (engine.HibernateLossy), since a subprocess's memory
	// is not in the saved state. Default false: subprocesses run until
	// their session ends (engine.HibernateNever).
	Hibernate bool
	// Metrics records subprocesses started and exited (package metrics).
	// Default: metrics.Discard.
	Metrics metrics.Processes
	// Logger receives engine-wide lines; session lines go to the logger of
	// engine.Info. Default slog.Default().
	Logger *slog.Logger
}

// Engine runs one subprocess per session generation. Create it with New;
// it is safe for concurrent use.
type Engine struct {
	opts Options
	path string   // resolved Command
	env  []string // the subprocess environment
	// summaryEvery is the shortest time between two summary lines about
	// a subprocess's invalid stdout lines (invalidSummaryEvery; tests
	// shorten it).
	summaryEvery time.Duration

	mu       sync.Mutex
	running  int                // subprocesses started and not yet reaped
	sessions map[*proc]struct{} // sessions whose subprocess runs
	closed   bool
}

var _ engine.Engine = (*Engine)(nil)

// Hibernation implements engine.Hibernator: a subprocess's own memory is
// not in the saved state, so a session that hibernates wakes at
// generation+1, and only when the operator asks (Options.Hibernate).
func (e *Engine) Hibernation() engine.Hibernation {
	if e.opts.Hibernate {
		return engine.HibernateLossy
	}
	return engine.HibernateNever
}

// New returns an Engine for opts. It fails if Command is empty or not
// found, or if an Env entry is not KEY=VALUE with a non-empty KEY.
func New(opts Options) (*Engine, error) {
	if opts.Command == "" {
		return nil, errors.New("stdio: no command given")
	}
	path, err := exec.LookPath(opts.Command)
	if err != nil {
		return nil, fmt.Errorf("stdio: command %q: %w", opts.Command, err)
	}
	env, err := buildEnv(os.Getenv, opts.Env)
	if err != nil {
		return nil, err
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.Discard
	}
	if opts.MaxProcesses == 0 {
		opts.MaxProcesses = DefaultMaxProcesses
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = DefaultStopGrace
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.CancelGrace <= 0 {
		opts.CancelGrace = DefaultCancelGrace
	}
	if opts.InitializeTimeout == 0 {
		opts.InitializeTimeout = DefaultInitializeTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Engine{opts: opts, path: path, env: env, summaryEvery: invalidSummaryEvery, sessions: make(map[*proc]struct{})}, nil
}

// buildEnv returns PATH and HOME from getenv (when set) followed by extra,
// later entries replacing earlier ones with the same key.
func buildEnv(getenv func(string) string, extra []string) ([]string, error) {
	var keys []string
	vals := make(map[string]string)
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	// The only variables of Tidemark's own environment a subprocess
	// inherits; everything else is explicit, so no secret of Tidemark's
	// environment reaches a server that did not ask for it.
	for _, k := range []string{"PATH", "HOME"} {
		if v := getenv(k); v != "" {
			set(k, v)
		}
	}
	for _, kv := range extra {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("stdio: environment entry %q is not KEY=VALUE", kv)
		}
		set(k, v)
	}
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, k+"="+vals[k])
	}
	return env, nil
}

// Env returns the environment every subprocess gets, as KEY=VALUE pairs.
func (e *Engine) Env() []string { return append([]string(nil), e.env...) }

// Running returns how many subprocesses are running (started and not yet
// reaped).
func (e *Engine) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running
}

// Start implements engine.Engine: it starts a subprocess for generation
// info.Generation of session info.Token and, when info.State is non-nil,
// replays the session's state to it. Errors: one wrapping
// engine.ErrCapacity when MaxProcesses subprocesses run and
// Options.Reclaim ended none of them; one wrapping
// ErrClosed after Close; the subprocess failing to start; the replayed
// initialize (or setLevel, or subscribe) failing or not being answered
// within StartTimeout.
func (e *Engine) Start(ctx context.Context, info engine.Info, out engine.Outbox) (engine.Session, error) {
	if err := e.reserve(info); err != nil {
		return nil, err
	}
	s, err := e.spawn(info, out)
	if err != nil {
		e.release(nil)
		return nil, fmt.Errorf("stdio: start session %s gen %d: %w", redact.Token(info.Token), info.Generation, err)
	}
	if info.State != nil {
		if err := s.restore(ctx, info.State); err != nil {
			s.Close()
			return nil, fmt.Errorf("stdio: restore session %s gen %d: %w", redact.Token(info.Token), info.Generation, err)
		}
	}
	return s, nil
}

// reserve counts one more subprocess running for info, asking
// Options.Reclaim for room once when MaxProcesses run. Errors: Start's
// ErrClosed and engine.ErrCapacity.
func (e *Engine) reserve(info engine.Info) error {
	asked := false
	for {
		e.mu.Lock()
		switch {
		case e.closed:
			e.mu.Unlock()
			return fmt.Errorf("stdio: start session %s gen %d: %w", redact.Token(info.Token), info.Generation, ErrClosed)
		case e.opts.MaxProcesses > 0 && e.running >= e.opts.MaxProcesses:
			n := e.running
			e.mu.Unlock()
			if !asked && e.opts.Reclaim != nil {
				asked = true
				if e.opts.Reclaim() {
					continue
				}
			}
			return fmt.Errorf("stdio: start session %s gen %d: %w: %d subprocesses running (limit %d)",
				redact.Token(info.Token), info.Generation, engine.ErrCapacity, n, e.opts.MaxProcesses)
		}
		e.running++
		e.mu.Unlock()
		return nil
	}
}

// release frees the capacity a subprocess held, once it has been reaped.
func (e *Engine) release(s *proc) {
	e.mu.Lock()
	e.running--
	if s != nil {
		delete(e.sessions, s)
	}
	e.mu.Unlock()
}

// Close ends every running subprocess, all at once (each as Session.Close
// does), waits until they have been reaped, and makes later Starts fail.
// Call it on shutdown so that no subprocess outlives Tidemark.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	all := make([]*proc, 0, len(e.sessions))
	for s := range e.sessions {
		all = append(all, s)
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(func() { s.Close() })
	}
	wg.Wait()
	return nil
}
