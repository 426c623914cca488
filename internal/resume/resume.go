// resume.go holds the I/O of resuming: one GET with Last-Event-ID (Get),
// and the loop that repeats it as Next decides (Stream.Resume, Stream.Open).

package resume

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// ErrDeadline is the Outcome.Err of a GET whose answer did not start before
// Policy.Timeout.
var ErrDeadline = errors.New("resume: no answer before the resume deadline")

// Request is what a resume GET carries besides its method.
type Request struct {
	// URL is the MCP endpoint.
	URL string
	// Header is sent first: the caller's own headers (Authorization, Via,
	// forwarded ones). The headers below replace its values of the same
	// names.
	Header http.Header
	// Session is Mcp-Session-Id; "" for none (a server without sessions).
	Session string
	// Version is MCP-Protocol-Version; "" for none (before 2025-06-18).
	Version string
	// LastEventID is the cursor to resume from; "" sends a plain GET (MCP
	// 2025-11-25, "Listening for Messages from the Server").
	LastEventID string
}

// newRequest returns the GET of r (wire.NewRequest: Header, then Accept
// text/event-stream, Mcp-Session-Id and MCP-Protocol-Version), with
// Last-Event-ID when r has a cursor.
func (r Request) newRequest(ctx context.Context) (*http.Request, error) {
	req, err := wire.NewRequest(ctx, http.MethodGet, r.URL, nil, r.Header, r.Session, r.Version)
	if err != nil {
		return nil, err
	}
	if r.LastEventID != "" {
		req.Header.Set(wire.HeaderLastEventID, r.LastEventID)
	}
	return req, nil
}

// Get sends one GET of r with hc (nil: http.DefaultClient) and returns its
// classified outcome; the response, whose body is the resumed stream, only
// when the outcome is Resumed (the caller closes it). Any other answer's
// body is read (at most wire.MaxRefusalBody bytes) and closed. It retries
// nothing: a user that judges a server's answers as they come (the probe)
// calls it directly. The error is that of a request that cannot be built
// (an invalid URL).
func Get(ctx context.Context, hc *http.Client, r Request) (*http.Response, Outcome, error) {
	return get(ctx, hc, r, time.Time{})
}

// get is Get whose answer must start before deadline (zero: none); the
// body of a resumed stream is then read without a deadline.
func get(ctx context.Context, hc *http.Client, r Request, deadline time.Time) (*http.Response, Outcome, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	rctx, cancel := context.WithCancel(ctx)
	req, err := r.newRequest(rctx)
	if err != nil {
		cancel()
		return nil, Outcome{}, err
	}
	var timer *time.Timer
	if !deadline.IsZero() {
		timer = time.AfterFunc(time.Until(deadline), cancel)
	}
	resp, err := hc.Do(req)
	if timer != nil && !timer.Stop() {
		// The deadline passed before, or just as, the answer came.
		if err == nil {
			wire.Drain(resp)
		}
		err = ErrDeadline
	}
	if err != nil {
		cancel()
		return nil, Classify(Answer{Err: err}, time.Now()), nil
	}
	a := Answer{Status: resp.StatusCode, MediaType: wire.MediaType(resp), RetryAfter: resp.Header.Get("Retry-After"), Session: r.Session != ""}
	if o := Classify(a, time.Now()); o.Kind == Resumed {
		resp.Body = wire.CancelOnClose(resp.Body, cancel)
		return resp, o, nil
	}
	a.Body, _ = io.ReadAll(io.LimitReader(resp.Body, wire.MaxRefusalBody))
	resp.Body.Close()
	cancel()
	return nil, Classify(a, time.Now()), nil
}

// Backoff returns Delay with a random jitter: the wait before attempt
// number attempt (from 0) of any retry loop of the user's under policy p,
// never sooner than retry (the server's SSE retry field; 0 none).
func Backoff(p Policy, attempt int, retry time.Duration) time.Duration {
	return Delay(p, attempt, retry, 0, rand.Float64())
}

// Stream is one SSE stream as its reader resumes it: the policy and
// client it is resumed with, the server's retry, and the GETs made since
// its last new event. Its reader sets Retry from the events it reads and
// calls Progressed on each new event; it calls Resume when the stream
// breaks. A Stream is used by one goroutine at a time.
type Stream struct {
	// HTTP sends the GETs. Nil: http.DefaultClient.
	HTTP *http.Client
	// Policy says how long to wait and when to give up.
	Policy Policy
	// OnAnswer, when set, is called with the outcome of each GET, before
	// Next decides on it (for logs, or to learn that a first GET has its
	// answer).
	OnAnswer func(Outcome)
	// Retry is the server's latest SSE retry field on the stream (WHATWG
	// HTML, "Server-sent events"); 0 none.
	Retry time.Duration

	attempts int       // GETs since the last new event
	since    time.Time // when the stream broke after its last new event; zero while events flow
}

// Progressed records a new event on the stream: the waits and the
// deadline start over at its next break.
func (s *Stream) Progressed() {
	s.attempts, s.since = 0, time.Time{}
}

// Result is how a resume ended.
type Result struct {
	// Outcome is the last GET's; the stream's break (Kind RetryLater, Err
	// the cause given to Resume) when no GET was made.
	Outcome
	// Response is the resumed stream (Kind Resumed), which the caller
	// reads and closes; nil otherwise.
	Response *http.Response
	// Expired reports that the resume gave up because Policy.Timeout
	// passed, or would have before the next GET was allowed; Outcome is
	// then the last one that was to be retried, not counting a GET the
	// deadline cut after one the server answered.
	Expired bool
}

// Resume resumes the stream after it broke (cause says how; nil: the
// server ended it): it waits as Next decides, sends r, and repeats until
// an answer ends the resume (Resumed, SessionLost, GenerationLost,
// Refused) or it expires. The error is ctx's, when ctx ends first (the
// Result then holds the last outcome), or that of a request that cannot
// be built.
func (s *Stream) Resume(ctx context.Context, r Request, cause error) (Result, error) {
	last := Outcome{Kind: RetryLater, Err: cause}
	return s.run(ctx, r, last, s.next(last))
}

// Open is Resume whose first GET goes at once: a stream's first
// connection (the standalone stream; r without a cursor), or a new one
// after the server refused to resume.
func (s *Stream) Open(ctx context.Context, r Request) (Result, error) {
	if s.since.IsZero() {
		s.since = time.Now()
	}
	return s.run(ctx, r, Outcome{Kind: RetryLater}, Action{Do: Retry})
}

// next applies Next to the stream's state and o.
func (s *Stream) next(o Outcome) Action {
	if s.since.IsZero() {
		s.since = time.Now()
	}
	st := State{Attempt: s.attempts, Retry: s.Retry, Elapsed: time.Since(s.since)}
	return Next(s.Policy, st, o, rand.Float64())
}

// run carries out a, the action decided on last, and the actions of the
// answers that follow.
func (s *Stream) run(ctx context.Context, r Request, last Outcome, a Action) (Result, error) {
	for {
		switch a.Do {
		case Stop:
			return Result{Outcome: last}, nil
		case Expire:
			if !Sleep(ctx, a.Wait) {
				return Result{Outcome: last}, ctx.Err()
			}
			return Result{Outcome: last, Expired: true}, nil
		}
		if !Sleep(ctx, a.Wait) {
			return Result{Outcome: last}, ctx.Err()
		}
		var deadline time.Time
		if s.Policy.Timeout > 0 {
			deadline = s.since.Add(s.Policy.Timeout)
		}
		resp, o, err := get(ctx, s.HTTP, r, deadline)
		if err != nil {
			return Result{Outcome: last}, err
		}
		s.attempts++
		if s.OnAnswer != nil {
			s.OnAnswer(o)
		}
		if ctx.Err() != nil {
			if resp != nil {
				resp.Body.Close()
			}
			return Result{Outcome: o}, ctx.Err()
		}
		if a = s.next(o); a.Do == Continue {
			return Result{Outcome: o, Response: resp}, nil
		}
		// A GET that our own deadline cut tells nothing of the server:
		// an expired resume reports the answer before it, when a GET had
		// one (a server that refused every resume is not one that could
		// not be reached).
		if !errors.Is(o.Err, ErrDeadline) || last.Status == 0 {
			last = o
		}
	}
}

// Sleep waits d (nothing when d <= 0) and reports whether ctx is still
// live: the wait between two tries of a loop that backs off.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
