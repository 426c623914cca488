// A way to test helpers that end tests (Need, redistest.Start): run them
// on a testing.TB that records how the test would have ended.

package testenv

import (
	"fmt"
	"runtime"
	"testing"
)

// Ended runs f on a testing.TB that forwards to t but, where f would end
// the test (Skip, Skipf, SkipNow, Fatal, Fatalf, FailNow), records how and
// ends only f's goroutine, as the real methods end theirs. It returns
// "skip" or "fatal" and the message, or "" and "" when f returned.
func Ended(t testing.TB, f func(tb testing.TB)) (how, msg string) {
	t.Helper()
	e := &ender{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(e)
	}()
	<-done
	return e.how, e.msg
}

// ender is the testing.TB of Ended.
type ender struct {
	testing.TB
	how, msg string
}

func (e *ender) end(how, msg string) {
	e.how, e.msg = how, msg
	runtime.Goexit()
}

func (e *ender) Skip(args ...any) { e.end("skip", fmt.Sprint(args...)) }

func (e *ender) Skipf(format string, args ...any) { e.end("skip", fmt.Sprintf(format, args...)) }

func (e *ender) SkipNow() { e.end("skip", "") }

func (e *ender) Fatal(args ...any) { e.end("fatal", fmt.Sprint(args...)) }

func (e *ender) Fatalf(format string, args ...any) { e.end("fatal", fmt.Sprintf(format, args...)) }

func (e *ender) FailNow() { e.end("fatal", "") }
