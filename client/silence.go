// silence.go holds the watch over a stream whose server has shown that it
// keeps idle streams alive: once it has, a stream silent for much longer
// than its keep-alives is a stopped server or a dead network path, not a
// slow tool, and the stream is resumed rather than waited on for ever.

package client

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// errSilent is why a stream whose keep-alives stopped was cut.
var errSilent = errors.New("client: the server's keep-alives stopped")

// silenceWatch closes a stream's body when, after the server has sent a
// keep-alive comment, nothing arrives for max(floor, 3 × the longest gap
// seen between keep-alives). Before the first keep-alive it never fires:
// a server that sends none may run a tool in silence for as long as it
// takes.
type silenceWatch struct {
	body  io.Closer
	floor time.Duration

	mu      sync.Mutex
	start   time.Time     // when the stream's body began
	lastAt  time.Time     // last keep-alive; zero: none yet
	gap     time.Duration // longest gap between keep-alives (the first: since start)
	timer   *time.Timer
	fired   bool
	stopped bool
}

// watchSilence starts a watch over body with the given floor (the
// transport's ResumeTimeout); a floor of zero watches nothing.
func watchSilence(body io.Closer, floor time.Duration) *silenceWatch {
	return &silenceWatch{body: body, floor: floor, start: time.Now()}
}

// bound is how long the stream may be silent once armed.
func (w *silenceWatch) bound() time.Duration {
	return max(w.floor, 3*w.gap)
}

// keepAlive notes a keep-alive comment, arming the watch.
func (w *silenceWatch) keepAlive() {
	if w == nil || w.floor <= 0 {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	since := w.start
	if !w.lastAt.IsZero() {
		since = w.lastAt
	}
	w.gap = max(w.gap, now.Sub(since))
	w.lastAt = now
	w.resetLocked()
}

// activity notes bytes other than a keep-alive: the stream lives.
func (w *silenceWatch) activity() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil && !w.stopped {
		w.resetLocked()
	}
}

func (w *silenceWatch) resetLocked() {
	if w.timer == nil {
		w.timer = time.AfterFunc(w.bound(), w.fire)
		return
	}
	w.timer.Reset(w.bound())
}

func (w *silenceWatch) fire() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.fired = true
	w.mu.Unlock()
	w.body.Close()
}

// stop ends the watch; it reports the silence that cut the stream, if
// one did.
func (w *silenceWatch) stop() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.fired {
		return fmt.Errorf("%w: nothing for %v, after keep-alives at most %v apart", errSilent, w.bound().Round(time.Millisecond), w.gap.Round(time.Millisecond))
	}
	return nil
}

// activityReader notes every read that brings bytes.
type activityReader struct {
	r io.Reader
	w *silenceWatch
}

func (a activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.w.activity()
	}
	return n, err
}
