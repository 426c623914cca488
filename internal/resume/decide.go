// decide.go holds the rules of resuming a stream, as pure functions (no
// I/O, no clock, no randomness: the loop in resume.go supplies the time and
// the jitter): what an answer to a resume GET means (Classify), how long to
// wait before the next GET (Delay), and what to do after each answer
// (Next). testdata/decide tables them, row by row.

package resume

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// Kind is what an answer to a resume GET means for the stream.
type Kind int

const (
	// Resumed: 200 with Content-Type text/event-stream; the stream goes on
	// from the cursor (MCP 2025-11-25, basic/transports, "Resumability and
	// Redelivery").
	Resumed Kind = iota + 1
	// SessionLost: 404 to a GET that carried Mcp-Session-Id: the server no
	// longer knows the session, and the client must initialize again (MCP
	// 2025-11-25, "Session Management"). Every call the session carried is
	// lost with it.
	SessionLost
	// GenerationLost: 409 to a GET that carried Mcp-Session-Id: the session
	// lives on, but the stream's generation does not (Tidemark sends
	// generation_mismatch or cursor_compacted; DESIGN.md, "The replay
	// decision"); the calls the stream carried are lost
	// (Outcome.LostRequests lists them when Outcome.LostKnown), and the
	// client initializes again (DESIGN.md, "Where the rule comes from").
	GenerationLost
	// RetryLater: no answer (a network error, or no headers before the
	// deadline), or 408, 429 or a 5xx other than 501, 505 and 508: the same
	// GET may succeed later, no sooner than Outcome.RetryAfter.
	RetryLater
	// Refused: any other answer (400 cursor_malformed or cursor_ahead, 403,
	// 405, a 404 or 409 to a GET without a session, a 200 that is not an
	// SSE stream, 501, 505, 508 Loop Detected...): sending the same GET
	// again would get the same answer.
	Refused
)

var kindNames = [...]string{Resumed: "resumed", SessionLost: "session-lost", GenerationLost: "generation-lost",
	RetryLater: "retry-later", Refused: "refused"}

// String returns the kind's name in the words of the table: "resumed",
// "session-lost", "generation-lost", "retry-later" or "refused".
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Answer is what a resume GET got back, as Classify reads it.
type Answer struct {
	// Err is the error of a GET that got no answer; Status and the rest
	// are then ignored.
	Err error
	// Status is the HTTP status code.
	Status int
	// MediaType is the answer's Content-Type without parameters, in lower
	// case (wire.MediaType).
	MediaType string
	// RetryAfter is the answer's Retry-After header, "" when absent.
	RetryAfter string
	// Body is the start of the body of an answer that is not a resumed
	// stream, at most wire.MaxRefusalBody bytes.
	Body []byte
	// Session reports whether the GET carried Mcp-Session-Id: 404 and 409
	// speak of a session only then.
	Session bool
}

// Outcome is an answer to a resume GET, classified.
type Outcome struct {
	Kind Kind
	// Refusal is the answer's status and, for an answer that is not
	// Resumed, what its body says: error.data.reason, error.message (or
	// the start of a body that is not a JSON-RPC error) and
	// error.data.lostRequests. Status is 0 when no answer came.
	wire.Refusal
	// Body is the start of the body of an answer that is not Resumed, at
	// most wire.MaxRefusalBody bytes, for a caller that reports it as is.
	Body []byte
	// RetryAfter is the answer's Retry-After (RFC 9110, section 10.2.3):
	// no GET comes sooner. 0 when absent, invalid or past.
	RetryAfter time.Duration
	// Err is why no answer came (Kind RetryLater), or what ended the
	// stream when no GET has been made yet; nil otherwise.
	Err error
}

// String renders o for logs and tests: the kind, then the status, reason
// and message when there was an answer, or the error when there was none;
// a 409's lost requests and a Retry-After when present.
func (o Outcome) String() string {
	var b strings.Builder
	b.WriteString(o.Kind.String())
	if o.Status == 0 {
		if o.Err != nil {
			b.WriteString(" error: " + o.Err.Error())
		}
		return b.String()
	}
	fmt.Fprintf(&b, " %d", o.Status)
	if o.Reason != "" {
		b.WriteString(" " + o.Reason)
	}
	if o.Message != "" {
		b.WriteString(": " + o.Message)
	}
	if o.Kind == GenerationLost {
		if o.LostKnown {
			ids := make([]string, len(o.LostRequests))
			for i, id := range o.LostRequests {
				ids[i] = fmt.Sprintf("%#v", id.Raw())
			}
			b.WriteString(" lost=[" + strings.Join(ids, " ") + "]")
		} else {
			b.WriteString(" lost=unknown")
		}
	}
	if o.RetryAfter > 0 {
		b.WriteString(" after=" + o.RetryAfter.String())
	}
	return b.String()
}

// Classify returns what answer a means for the stream; now is the time it
// came, against which a Retry-After date is read. The rules, in order:
// no answer is RetryLater; 200 text/event-stream is Resumed; with a
// session, 404 is SessionLost and 409 GenerationLost, whatever their
// bodies say; 408, 429 and 5xx but 501, 505 and 508 are RetryLater; the
// rest is Refused.
func Classify(a Answer, now time.Time) Outcome {
	if a.Err != nil {
		return Outcome{Kind: RetryLater, Err: a.Err}
	}
	o := Outcome{Refusal: wire.Refusal{Status: a.Status}, RetryAfter: RetryAfter(a.RetryAfter, now)}
	if a.Status == http.StatusOK && a.MediaType == wire.MediaSSE {
		o.Kind = Resumed
		return o
	}
	o.Refusal, o.Body = wire.ParseRefusal(a.Status, a.Body), a.Body
	switch {
	case a.Status == http.StatusNotFound && a.Session:
		o.Kind = SessionLost
	case a.Status == http.StatusConflict && a.Session:
		o.Kind = GenerationLost
	case transient(a.Status):
		o.Kind = RetryLater
	default:
		o.Kind = Refused
	}
	return o
}

// transient reports whether an answer of status may change if the same
// request comes again later: 408 Request Timeout, 429 Too Many Requests
// and the 5xx server errors (RFC 9110, section 15.6), except those that
// say the request itself cannot be served: 501 Not Implemented, 505 HTTP
// Version Not Supported and 508 Loop Detected (RFC 5842, section 7.2).
func transient(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests:
		return true
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported, http.StatusLoopDetected:
		return false
	}
	return status >= 500 && status <= 599
}

// maxRetryAfter bounds a Retry-After so that it fits a time.Duration.
const maxRetryAfter = math.MaxInt64 / time.Second

// RetryAfter returns the wait a Retry-After header value v asks for (RFC
// 9110, section 10.2.3): delay-seconds (digits only) or an HTTP-date,
// read against now. 0 when v is empty, invalid, negative or a date not
// after now; a number of seconds too large for a time.Duration gives the
// largest one.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(maxRetryAfter) {
			return time.Duration(maxRetryAfter) * time.Second
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil || !t.After(now) {
		return 0
	}
	return t.Sub(now)
}

// Defaults of Policy's fields.
const (
	// DefaultBase is the default of Policy.Base.
	DefaultBase = 500 * time.Millisecond
	// DefaultCap is the default of Policy.Cap.
	DefaultCap = 30 * time.Second
)

// Policy is how a user resumes a stream.
type Policy struct {
	// Base is the first wait when the server sent no SSE retry field.
	// Zero: DefaultBase (500 ms).
	Base time.Duration
	// Cap bounds the exponential growth of the waits (a server's retry
	// above it is honoured as is; the jitter adds up to half again). Zero:
	// DefaultCap (30 s).
	Cap time.Duration
	// Timeout bounds how long a stream is resumed without a new event:
	// from the break (Stream.Progressed starts it over), each GET's answer
	// must start within it, and after it the resume gives up (Expire).
	// Zero: no bound (a standalone stream that is kept open).
	Timeout time.Duration
	// RetryBareConflict, when set, retries a 409 whose body has neither
	// error.data.reason nor error.data.lostRequests, as RetryLater, until
	// Timeout: the go-sdk answers a resume 409 "stream ID conflicts with
	// ongoing stream" while it still counts the cut connection as the
	// stream's reader, and the conflict ends when it notices the cut. Unset,
	// every 409 stops the resume at once.
	RetryBareConflict bool
}

func (p Policy) base() time.Duration {
	if p.Base > 0 {
		return p.Base
	}
	return DefaultBase
}

func (p Policy) cap() time.Duration {
	if p.Cap > 0 {
		return p.Cap
	}
	return DefaultCap
}

// Delay returns the wait before GET number attempt (from 0) since the
// stream last progressed: base·2^attempt, capped at max(Cap, base), plus
// jitter·half of it, so that clients cut at the same moment do not return
// at the same moment; and never less than retryAfter (RFC 9110, section
// 10.2.3). base is the server's SSE retry when it sent one (the client
// never reconnects sooner than the server asked: WHATWG HTML, "Server-sent
// events", reconnection time; MCP 2025-11-25, "Resumability and
// Redelivery"), else Policy.Base. jitter is in [0, 1).
func Delay(p Policy, attempt int, retry, retryAfter time.Duration, jitter float64) time.Duration {
	base := p.base()
	if retry > 0 {
		base = retry
	}
	limit := max(p.cap(), base)
	d := base
	for i := 0; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	d += time.Duration(jitter * float64(d/2))
	return max(d, retryAfter)
}

// State is what Next knows of the stream being resumed.
type State struct {
	// Attempt is how many GETs were made since the stream last
	// progressed (0 before the first).
	Attempt int
	// Retry is the server's latest SSE retry field on the stream; 0 none.
	Retry time.Duration
	// Elapsed is the time since the stream broke after its last new event.
	Elapsed time.Duration
}

// Do is what a resumer does next.
type Do int

const (
	// Continue: read the resumed stream.
	Continue Do = iota + 1
	// Retry: wait Action.Wait, then GET again.
	Retry
	// Stop: give up now; the outcome says why.
	Stop
	// Expire: wait Action.Wait (to the deadline; 0: now), then give up:
	// Policy.Timeout passes before the next GET may be made.
	Expire
)

var doNames = [...]string{Continue: "continue", Retry: "retry", Stop: "stop", Expire: "expire"}

func (d Do) String() string {
	if d > 0 && int(d) < len(doNames) {
		return doNames[d]
	}
	return "do(" + strconv.Itoa(int(d)) + ")"
}

// Action is Next's decision.
type Action struct {
	Do   Do
	Wait time.Duration
}

// Next decides what follows outcome o of the stream in state s, under
// policy p, with jitter in [0, 1) for Delay. Resumed continues. SessionLost,
// GenerationLost and Refused stop at once, so that the user learns of a
// lost session or generation promptly; except a bare 409 under
// Policy.RetryBareConflict, which is retried as RetryLater is. RetryLater
// retries after Delay(p, s.Attempt, s.Retry, o.RetryAfter, jitter), within
// Policy.Timeout: once it has passed, or when the server's retry or
// Retry-After reaches past it (no GET may come sooner), the resume expires
// now; when the delay reaches past it, the resume waits to the deadline and
// expires then, so that it never gives up before its Timeout.
func Next(p Policy, s State, o Outcome, jitter float64) Action {
	switch o.Kind {
	case Resumed:
		return Action{Do: Continue}
	case GenerationLost:
		if !p.RetryBareConflict || o.Reason != "" || o.LostKnown {
			return Action{Do: Stop}
		}
	case RetryLater:
	default:
		return Action{Do: Stop}
	}
	d := Delay(p, s.Attempt, s.Retry, o.RetryAfter, jitter)
	if p.Timeout <= 0 {
		return Action{Do: Retry, Wait: d}
	}
	left := p.Timeout - s.Elapsed
	switch {
	case left <= 0, max(s.Retry, o.RetryAfter) >= left:
		return Action{Do: Expire}
	case d >= left:
		return Action{Do: Expire, Wait: left}
	}
	return Action{Do: Retry, Wait: d}
}
