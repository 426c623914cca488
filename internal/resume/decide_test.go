// decide_test.go holds the driver of testdata/decide, which tests the
// rules of decide.go on their own: each answer to a resume GET, how it is
// classified, and what follows it.

package resume_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/internal/resume"
)

// epoch is the time every answer of the table comes at: the time an
// HTTP-date Retry-After is read against.
var epoch = time.Date(2026, time.November, 30, 12, 0, 0, 0, time.UTC)

// TestDecide runs testdata/decide. Commands:
//
//	policy [base=D] [cap=D] [timeout=D] [bare-conflict=retry]
//	        the policy of the rows that follow (unset fields: zero)
//	answer [status=N | err=TEXT] [type=MEDIA] [retry-after=V] [no-session]
//	       [attempt=N] [retry=D] [elapsed=D]
//	<body>
//	        an answer (the input is its body) to GET number attempt+1 since
//	        the stream last progressed, on a stream whose server's SSE retry
//	        is retry, elapsed after the break; the output is its outcome,
//	        then the action, with the wait's bounds for jitter 0 and for
//	        jitter just under 1
//	delay [attempts=N] [retry=D] [retry-after=V]
//	        the waits before GETs 1..attempts, each as its bounds
//
// A Retry-After that is an HTTP-date is written in parentheses (its comma
// splits it into two values, joined again with ", ").
func TestDecide(t *testing.T) {
	var p resume.Policy
	datadriven.RunTest(t, "testdata/decide", func(t *testing.T, d *datadriven.TestData) string {
		dur := func(key string) time.Duration {
			if !d.HasArg(key) {
				return 0
			}
			var s string
			d.ScanArgs(t, key, &s)
			v, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("%s: %s=%q: %v", d.Pos, key, s, err)
			}
			return v
		}
		num := func(key string) int {
			if !d.HasArg(key) {
				return 0
			}
			var n int
			d.ScanArgs(t, key, &n)
			return n
		}
		retryAfter := func() string {
			for _, a := range d.CmdArgs {
				if a.Key == "retry-after" {
					return strings.Join(a.Vals, ", ")
				}
			}
			return ""
		}
		switch d.Cmd {
		case "policy":
			p = resume.Policy{Base: dur("base"), Cap: dur("cap"), Timeout: dur("timeout"), RetryBareConflict: d.HasArg("bare-conflict")}
			return ""
		case "answer":
			a := resume.Answer{Status: num("status"), RetryAfter: retryAfter(), Session: !d.HasArg("no-session")}
			if d.HasArg("type") {
				d.ScanArgs(t, "type", &a.MediaType)
			}
			if d.HasArg("err") {
				var s string
				d.ScanArgs(t, "err", &s)
				a.Err = errors.New(s)
			}
			if d.Input != "" {
				a.Body = []byte(d.Input)
			}
			o := resume.Classify(a, epoch)
			s := resume.State{Attempt: num("attempt"), Retry: dur("retry"), Elapsed: dur("elapsed")}
			return o.String() + "\n" + showAction(resume.Next(p, s, o, 0), resume.Next(p, s, o, almostOne)) + "\n"
		case "delay":
			var b strings.Builder
			after := resume.RetryAfter(retryAfter(), epoch)
			for i := range num("attempts") {
				lo, hi := resume.Delay(p, i, dur("retry"), after, 0), resume.Delay(p, i, dur("retry"), after, almostOne)
				fmt.Fprintf(&b, "%d: %s\n", i, span(lo, hi))
			}
			return b.String()
		default:
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		}
	})
}

// almostOne is the largest jitter: just under 1.
const almostOne = 1 - 1e-9

// showAction renders the actions of jitter 0 (lo) and almostOne (hi): the
// kind, then the wait or its bounds.
func showAction(lo, hi resume.Action) string {
	if lo.Do != hi.Do {
		return lo.Do.String() + " in " + lo.Wait.String() + " / " + hi.Do.String() + " in " + hi.Wait.String()
	}
	switch lo.Do {
	case resume.Retry:
		return "retry in " + span(lo.Wait, hi.Wait)
	case resume.Expire:
		if lo.Wait == 0 && hi.Wait == 0 {
			return "expire now"
		}
		return "expire in " + span(lo.Wait, hi.Wait)
	}
	return lo.Do.String()
}

// span renders a wait's bounds: "500ms..750ms", or one value when they
// are equal.
func span(lo, hi time.Duration) string {
	// Jitter just under 1 may land a nanosecond under the bound.
	hi = hi.Round(time.Microsecond)
	if lo == hi {
		return lo.String()
	}
	return lo.String() + ".." + hi.String()
}
