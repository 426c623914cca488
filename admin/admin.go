// Package admin serves the operator's listener of tidemark serve
// (--metrics-addr): Prometheus metrics at /metrics, the Kubernetes probes
// /healthz and /readyz, the session inspector at /debug/sessions and the
// task inspector at /debug/tasks. It is never mounted on the MCP listener:
// what it shows (token and task ID prefixes, owners, positions) is for
// operators, not clients.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
)

// DefaultRecent is how many sessions /debug/sessions lists when the
// request has no n parameter.
const DefaultRecent = 20

// ReadyTimeout bounds /readyz: its checks share it, and when they have
// not all passed within it /readyz answers 503 unavailable, so that the
// answer comes before Kubernetes' default probe timeout of 1 s
// (timeoutSeconds), past which a probe sees no body, only a timeout.
const ReadyTimeout = 800 * time.Millisecond

// readyGrace is how much sooner than ReadyTimeout the checks' context
// ends, so that a check that stops at its context's end has the time to
// say why (the store's own error) before /readyz answers without it.
const readyGrace = 50 * time.Millisecond

// Options configures Handler.
type Options struct {
	// Gatherer is what /metrics serves; nil: /metrics answers 404.
	Gatherer prometheus.Gatherer
	// Ready are the readiness checks /readyz runs, in order; the first
	// that fails decides the answer. Each returns nil when ready, else an
	// error, preferably a *NotReadyError naming the reason. They share a
	// context that ends readyGrace before ReadyTimeout.
	Ready []func(ctx context.Context) error
	// Sessions answers the inspector; nil: /debug/sessions answers 404.
	Sessions Inspector
	// Tasks answers the task inspector; nil: /debug/tasks answers 404.
	Tasks TaskInspector
	// Build is the build /healthz names; nil: /healthz names none.
	Build *Build
}

// NotReadyError says why a readiness check failed: Reason is the word of
// /readyz's body (replay.ReasonUnavailable: the store cannot be reached;
// replay.ReasonNotRegistered: this replica is missing from the fleet's
// directory), Err the cause.
type NotReadyError struct {
	Reason replay.Reason
	Err    error
}

// Error returns the reason and the cause.
func (e *NotReadyError) Error() string { return string(e.Reason) + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *NotReadyError) Unwrap() error { return e.Err }

// Handler returns the listener's handler. Every answer is JSON except
// /metrics (Prometheus text or OpenMetrics, as the scraper asks); /healthz
// answers 200 {"status": "ok"}, with "build" (Options.Build) when set. Its
// endpoints serve GET (and HEAD); another method gets 405 with Allow (RFC
// 9110, section 15.5.6), an unknown path 404.
func Handler(opts Options) http.Handler {
	mux := http.NewServeMux()
	if opts.Gatherer != nil {
		// OpenMetrics when the scraper's Accept asks for it (Prometheus
		// does), the text format 0.0.4 otherwise.
		mux.Handle("/metrics", onlyGET(promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{EnableOpenMetrics: true})))
	}
	health := map[string]any{"status": "ok"}
	if opts.Build != nil {
		health["build"] = opts.Build
	}
	mux.Handle("/healthz", onlyGET(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, health)
	})))
	mux.Handle("/readyz", onlyGET(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveReady(w, r, opts.Ready)
	})))
	if opts.Sessions != nil {
		mux.Handle("/debug/sessions", onlyGET(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serveSessions(w, r, opts.Sessions)
		})))
		mux.Handle("/debug/sessions/{prefix}", onlyGET(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serveSession(w, r, opts.Sessions)
		})))
	}
	if opts.Tasks != nil {
		mux.Handle("/debug/tasks", onlyGET(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serveTasks(w, opts.Tasks)
		})))
		mux.Handle("/debug/tasks/{prefix}", onlyGET(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serveTask(w, r, opts.Tasks)
		})))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{
			"error": "no such endpoint: GET /metrics, /healthz, /readyz, /debug/sessions, /debug/sessions/{token prefix}, /debug/tasks or /debug/tasks/{task ID prefix}",
		})
	})
	return mux
}

// allowed is the Allow header of every endpoint's 405.
const allowed = "GET, HEAD"

// onlyGET serves GET and HEAD with next, and answers any other method 405
// Method Not Allowed with Allow: GET, HEAD and a JSON body that says so.
func onlyGET(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", allowed)
			writeJSON(w, http.StatusMethodNotAllowed, map[string]any{
				"error": "method " + r.Method + " is not allowed on " + r.URL.Path + ": use GET",
			})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveReady answers 200 {"ready":true} when every check passes, else 503
// with the first failure's reason and error; 503 unavailable when they
// have not finished within ReadyTimeout, even if a check ignores its
// context's end.
func serveReady(w http.ResponseWriter, r *http.Request, checks []func(context.Context) error) {
	bound := time.NewTimer(ReadyTimeout)
	defer bound.Stop()
	ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout-readyGrace)
	defer cancel()
	done := make(chan error, 1) // the checks' goroutine never waits on it
	go func() { done <- runChecks(ctx, checks) }()
	var err error
	select {
	case err = <-done:
	case <-r.Context().Done():
		return
	case <-bound.C:
		err = &NotReadyError{Reason: replay.ReasonUnavailable, Err: fmt.Errorf("the readiness checks did not finish within %v", ReadyTimeout)}
	}
	if err == nil {
		writeJSON(w, http.StatusOK, map[string]any{"ready": true})
		return
	}
	reason := replay.ReasonUnavailable
	var nr *NotReadyError
	if errors.As(err, &nr) {
		reason = nr.Reason
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": reason, "error": err.Error()})
}

// runChecks runs checks in order and returns the first failure, or nil.
func runChecks(ctx context.Context, checks []func(context.Context) error) error {
	for _, check := range checks {
		if err := check(ctx); err != nil {
			return err
		}
	}
	return nil
}

// serveSessions answers the session count and the n most recently used
// sessions (?n=, default DefaultRecent), hibernated ones included; 503
// when the store cannot be read.
func serveSessions(w http.ResponseWriter, r *http.Request, in Inspector) {
	n := DefaultRecent
	if s := r.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "n must be a number of sessions, 0 or more, not " + strconv.Quote(s)})
			return
		}
		n = v
	}
	l, err := in.Recent(r.Context(), n)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error(), "reason": replay.ReasonUnavailable})
		return
	}
	if l.Sessions == nil {
		l.Sessions = []Summary{}
	}
	writeJSON(w, http.StatusOK, l)
}

// serveSession answers the details of the sessions whose token starts
// with the path's prefix: 404 when none does, 400 for a prefix longer
// than the redact.Shown characters /debug/sessions shows (see
// longerThanShown).
func serveSession(w http.ResponseWriter, r *http.Request, in Inspector) {
	prefix := r.PathValue("prefix")
	if longerThanShown(w, prefix, "a session token prefix", "/debug/sessions") {
		return
	}
	found, err := in.Lookup(r.Context(), prefix)
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error(), "reason": replay.ReasonUnavailable})
	case len(found) == 0:
		writeJSON(w, http.StatusNotFound, map[string]any{
			"error": "no session of this process has a token starting with " + strconv.Quote(prefix) + "; GET /debug/sessions lists them",
		})
	default:
		writeJSON(w, http.StatusOK, Details{Sessions: found})
	}
}

// serveTasks answers the tasks this process runs, then those it ran that
// settled while their records are kept.
func serveTasks(w http.ResponseWriter, in TaskInspector) {
	running, settled := in.RunningTasks(), in.SettledTasks()
	all := make([]Task, 0, len(running)+len(settled))
	all = append(append(all, running...), settled...)
	writeJSON(w, http.StatusOK, TaskList{Count: len(running), Settled: len(settled), Tasks: all})
}

// serveTask answers the stored state of the tasks this process runs whose
// ID starts with the path's prefix: 404 when none does, 400 for a prefix
// longer than the redact.Shown characters /debug/tasks shows (see
// longerThanShown).
func serveTask(w http.ResponseWriter, r *http.Request, in TaskInspector) {
	prefix := r.PathValue("prefix")
	if longerThanShown(w, prefix, "a task ID prefix", "/debug/tasks") {
		return
	}
	found, err := in.LookupTasks(r.Context(), prefix)
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error(), "reason": replay.ReasonUnavailable})
	case len(found) == 0:
		writeJSON(w, http.StatusNotFound, map[string]any{
			"error": "no task this process runs, or ran and settled, has an ID starting with " + strconv.Quote(prefix) +
				"; GET /debug/tasks lists them (a task of another replica, or one whose record expired, is not looked up: not every store can be searched by ID prefix)",
		})
	default:
		writeJSON(w, http.StatusOK, TaskDetails{Tasks: found})
	}
}

// longerThanShown answers 400 and reports true when prefix is longer than
// the redact.Shown characters the listing (list, what it shows) gives. A
// lookup that answered a longer prefix would confirm or deny each further
// character, so anyone who can reach the listener could recover a whole
// session token or task ID, bearer secrets, one character at a time; the
// answer is the same whatever the extra characters are, and never echoes
// them.
func longerThanShown(w http.ResponseWriter, prefix, what, list string) bool {
	if len(prefix) <= redact.Shown {
		return false
	}
	writeJSON(w, http.StatusBadRequest, map[string]any{
		"error": what + " is " + strconv.Itoa(redact.Shown) + " characters at most, as GET " + list + " shows it",
	})
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
