// Package probe checks, from the outside, how an MCP server speaking
// Streamable HTTP (MCP 2025-11-25, basic/transports) resumes streams: it
// opens sessions, runs a long tool call, cuts and resumes its stream, and
// sends the cursors a careful server must refuse. Each check ends PASS,
// FAIL or N/A with the HTTP statuses it observed. It treats session IDs and
// event IDs as opaque and judges by status codes, so it works against any
// server; `tidemark probe` is its command. docs/probe.md explains each
// check, and each check's file states the rule it judges.
package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Defaults of Config.
const (
	DefaultTool    = "countdown"
	DefaultArgs    = `{"n":20,"delay_ms":10}`
	DefaultStorm   = 16
	DefaultTimeout = 30 * time.Second
	// ProtocolVersion is the version the probe offers in initialize: the
	// last one of the stateful era, with priming events (SEP-1699).
	ProtocolVersion = "2025-11-25"
)

// Config says what to probe and how.
type Config struct {
	// URL is the MCP endpoint, e.g. "http://127.0.0.1:8080/mcp".
	URL string
	// Tool is the tool whose call makes the long stream the checks cut and
	// resume. It should send several notifications (progress) spaced a few
	// milliseconds apart and must not ask the client anything. Default
	// "countdown".
	Tool string
	// Args are the tool's arguments, a JSON object. Default
	// {"n":20,"delay_ms":10}. Every call carries a progress token.
	Args json.RawMessage
	// RetentionEvents is the server's per-session event retention, in
	// events; the compacted-cursor check runs only when it is set (> 0).
	// Default 0: that check is N/A.
	RetentionEvents int
	// Storm is how many sessions resume at once in the storm check
	// (sessions). Default 16; negative: the check is N/A.
	Storm int
	// Timeout bounds each check. Default 30 seconds.
	Timeout time.Duration
	// HTTPClient sends the requests. Nil: a client of its own. Its Timeout
	// must be zero: streams stay open while a call runs.
	HTTPClient *http.Client
	// Header is added to every request (for example Authorization).
	Header http.Header
}

// Verdict is a check's result.
type Verdict string

// The verdicts.
const (
	Pass Verdict = "PASS"
	Fail Verdict = "FAIL"
	NA   Verdict = "N/A"
)

// Result is the outcome of one check.
type Result struct {
	// ID is the check's stable name, e.g. "cursor-ahead".
	ID string `json:"check"`
	// Verdict is PASS, FAIL or N/A.
	Verdict Verdict `json:"result"`
	// Statuses are the HTTP statuses of the check's requests that decide
	// it, in the order sent.
	Statuses []int `json:"statuses"`
	// Observed says what the server did, in a few words.
	Observed string `json:"observed"`
	// Rule is the rule the check holds the server to, with its source.
	Rule string `json:"rule"`
	// Millis is how long the check took, in milliseconds.
	Millis int64 `json:"ms"`
}

// Report is the outcome of a probe.
type Report struct {
	URL string `json:"url"`
	// Server is the serverInfo name and version the server announced.
	Server string `json:"server"`
	// ProtocolVersion is the version the server negotiated.
	ProtocolVersion string   `json:"protocolVersion"`
	Tool            string   `json:"tool"`
	Results         []Result `json:"checks"`
	Pass            int      `json:"pass"`
	Fail            int      `json:"fail"`
	NA              int      `json:"na"`
	// Error says why the probe stopped before its checks ran or before
	// all of them did (the baseline call failed, the run was
	// interrupted); empty when every check ran.
	Error string `json:"error,omitempty"`
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool { return r.Fail > 0 }

// check is one entry of the catalogue.
type check struct {
	id   string
	rule string
	run  func(ctx context.Context, e *env) Result
}

// checks is the catalogue, in the order they run and print.
var checks = []check{
	{"priming", "MCP 2025-11-25 basic/transports (SEP-1699): an SSE stream starts with an event that has an ID and empty data, so the client can resume before the first message", checkPriming},
	{"resume-exact", `MCP 2025-11-25 Resumability: GET with Last-Event-ID replays the messages after it on that stream; (DESIGN.md, "Delivery rules"): replay is exact, no gap and no repeat`, checkResumeExact},
	{"cursor-ahead", `(DESIGN.md, "Where the rule comes from"): never clamp Last-Event-ID to the high-water mark; a cursor beyond the newest event is an error (4xx), not an empty 200`, checkCursorAhead},
	{"cursor-malformed", `Tidemark's replay decision (DESIGN.md, "The replay decision"): a cursor that does not parse answers 400 (cursor_malformed); 404 or 409 would make the client drop a live session`, checkCursorMalformed},
	{"foreign-cursor", `(DESIGN.md, "Where the rule comes from"): replay is a function of (session, generation, cursor range); another session's cursor is refused (4xx, not 404), never replayed`, checkForeignCursor},
	{"unknown-session", `MCP 2025-11-25 Session Management; (DESIGN.md, "Where the rule comes from"): an unknown session ID answers 404, on GET with Last-Event-ID and on POST`, checkUnknownSession},
	{"deleted-session", "MCP 2025-11-25 Session Management: after DELETE the session ID answers 404; a deleted session's cursors are never replayed", checkDeletedSession},
	{"stream-isolation", "MCP 2025-11-25 Resumability: the server MUST NOT replay messages that would have been delivered on a different stream", checkStreamIsolation},
	{"compacted-cursor", `(DESIGN.md, "Where the rule comes from"): a cursor below the replay floor (its events compacted) answers 409 and forces re-initialization`, checkCompacted},
	{"takeover", `MCP 2025-11-25 Resumability; one reader per stream (DESIGN.md, "Delivery rules"): a resume while the old connection still looks open (half-open TCP) takes the stream over; refusing it (409) makes a client re-initialize and lose the session`, checkTakeover},
	{"concurrent-resume", `MCP 2025-11-25 Multiple Connections: a message goes on one stream only; one reader per stream (DESIGN.md, "Delivery rules"), so two resumes of one stream never both get an event`, checkConcurrentResume},
	{"storm", `(DESIGN.md, "Where the rule comes from"): sessions resuming at once (a reconnect storm) each get their stream exactly: no error, no duplicate, nothing missing`, checkStorm},
}

// CheckIDs returns the IDs of the checks in the order they run.
func CheckIDs() []string {
	ids := make([]string, len(checks))
	for i, c := range checks {
		ids[i] = c.id
	}
	return ids
}

// env is what every check shares: the server and the baseline call.
type env struct {
	cfg  Config
	p    *peer
	base *baseline
}

// Run probes cfg.URL and returns the report. It returns an error, with a
// partial report, only when the probe cannot start: the URL is invalid, or
// the server does not complete initialize or answer the baseline tool call
// with HTTP 200. A FAIL is not an error. At the end it ends (DELETE) every
// session it opened.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Tool == "" {
		cfg.Tool = DefaultTool
	}
	if len(cfg.Args) == 0 {
		cfg.Args = json.RawMessage(DefaultArgs)
	}
	if !json.Valid(cfg.Args) || cfg.Args[0] != '{' {
		return nil, fmt.Errorf("probe: tool arguments must be a JSON object, not %s", cfg.Args)
	}
	if cfg.Storm == 0 {
		cfg.Storm = DefaultStorm
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		cfg.HTTPClient = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	rep := &Report{URL: cfg.URL, Tool: cfg.Tool}
	p := &peer{url: cfg.URL, http: cfg.HTTPClient, header: cfg.Header, version: ProtocolVersion}
	defer p.cleanup()

	bctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	base, err := runBaseline(bctx, p, cfg)
	timedOut := errors.Is(bctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	if err != nil && timedOut {
		// A context error alone names neither the bound nor what to look at.
		return rep, fmt.Errorf("probe: the baseline call got no complete answer within --timeout %v, so nothing can be checked: "+
			"check that a server answers at %s (a listener that accepts and never answers looks like this), "+
			"or raise --timeout for a tool that takes longer (%w)", cfg.Timeout, cfg.URL, err)
	}
	if err != nil {
		return rep, fmt.Errorf("probe: the baseline call failed, so nothing can be checked: %w", err)
	}
	rep.Server, rep.ProtocolVersion = base.sess.server, base.sess.version
	e := &env{cfg: cfg, p: p, base: base}
	for _, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		start := time.Now()
		r := c.run(cctx, e)
		if cctx.Err() != nil && r.Verdict == Pass {
			r.Verdict, r.Observed = Fail, "timed out: "+r.Observed
		}
		cancel()
		r.ID, r.Rule, r.Millis = c.id, c.rule, time.Since(start).Milliseconds()
		if r.Statuses == nil {
			r.Statuses = []int{}
		}
		switch r.Verdict {
		case Pass:
			rep.Pass++
		case Fail:
			rep.Fail++
		default:
			rep.NA++
		}
		rep.Results = append(rep.Results, r)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	return rep, nil
}

// failed returns a FAIL result saying what went wrong; err's status joins
// statuses.
func failed(statuses []int, err error, format string, args ...any) Result {
	if s := statusOf(err); s != 0 {
		statuses = append(statuses, s)
	}
	msg := fmt.Sprintf(format, args...)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			msg += ": timed out"
		} else {
			msg += ": " + err.Error()
		}
	}
	return Result{Verdict: Fail, Statuses: statuses, Observed: msg}
}
