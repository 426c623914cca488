// taskdiscover.go holds the TaskTransport's sending of the SDK's
// server/discover: a discover that gets no answer is sent again, so that
// one cut at Connect does not make the SDK fall back to initialize.

package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/url"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/resume"
)

// probe is a server/discover of the SDK awaiting its answer.
type probe struct {
	req     *jsonrpc.Request
	since   time.Time // the first failure; zero before it
	attempt int       // the sends that failed
}

// writeDiscover sends the SDK's server/discover. The go-sdk falls back to
// initialize (the stateful era, where no call runs as a task) on any
// failure of its discover, a cut answer included; a discover has no side
// effects, so one that gets no answer is sent again instead (rediscover).
func (c *taskConn) writeDiscover(ctx context.Context, req *jsonrpc.Request) error {
	pr := &probe{req: req}
	c.mu.Lock()
	c.probes[req.ID] = pr
	c.mu.Unlock()
	err := c.inner.Write(markWholeAnswer(ctx), req)
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && unanswered(err) {
		// The SDK awaits the answer, which rediscover brings or gives up.
		c.mu.Lock()
		pr.since, pr.attempt = time.Now(), 1
		c.mu.Unlock()
		if c.spawn(func() { c.rediscover(pr, err) }) {
			return nil
		}
	}
	c.mu.Lock()
	delete(c.probes, req.ID)
	c.mu.Unlock()
	return err
}

// discoverAnswer handles r, the answer to the discover pr, and returns what
// the SDK gets: nil when the answer is an error the transport made (the
// SDK's own for a stream that ended without the response, say), not one
// the server sent, and pr is sent again instead.
func (c *taskConn) discoverAnswer(pr *probe, r *jsonrpc.Response) *jsonrpc.Response {
	var sent *jsonrpc.Error
	c.mu.Lock()
	if r.Error != nil && !errors.As(r.Error, &sent) {
		if pr.since.IsZero() {
			pr.since = time.Now()
		}
		pr.attempt++
		c.mu.Unlock()
		if c.spawn(func() { c.rediscover(pr, r.Error) }) {
			return nil
		}
		c.mu.Lock()
	}
	delete(c.probes, r.ID)
	if r.Error == nil && offersTasks(r.Result) {
		c.offered = true
	}
	c.mu.Unlock()
	return r
}

// rediscover sends pr again after the resume backoff, as long as sends fail
// without an answer, within ResumeTimeout of the first failure; then the
// SDK gets cause, the last failure, as the discover's answer, and falls
// back to initialize. An answer that comes goes through Read.
func (c *taskConn) rediscover(pr *probe, cause error) {
	p := resume.Policy{Base: c.opts.InitialBackoff, Cap: c.opts.MaxBackoff, Timeout: c.opts.ResumeTimeout}
	expired := false
	for {
		c.mu.Lock()
		s := resume.State{Attempt: pr.attempt - 1, Elapsed: time.Since(pr.since)}
		c.mu.Unlock()
		a := resume.Next(p, s, resume.Outcome{Kind: resume.RetryLater, Err: cause}, rand.Float64())
		if a.Do != resume.Retry {
			expired = true
			break
		}
		c.opts.Logger.Debug("client: server/discover got no answer; sending it again", "wait", a.Wait, "error", cause)
		if !resume.Sleep(c.ctx, a.Wait) {
			return
		}
		err := c.inner.Write(markWholeAnswer(c.ctx), pr.req)
		if err == nil || c.ctx.Err() != nil {
			return
		}
		cause = err
		if !unanswered(err) {
			break
		}
		c.mu.Lock()
		pr.attempt++
		c.mu.Unlock()
	}
	c.mu.Lock()
	delete(c.probes, pr.req.ID)
	c.lost = c.lost || expired
	c.mu.Unlock()
	c.push(&jsonrpc.Response{ID: pr.req.ID, Error: cause})
}

// unanswered reports whether err, from the wrapped transport's Write, is
// a request that was sent and got no answer: its connection broke before
// the answer's headers, or in its body (http.Client.Do failed, which
// *url.Error marks, but not in its dial). A discover that could not
// connect is not sent again: the SDK's initialize cannot connect either,
// and Connect fails at once, as it does without a TaskTransport. The
// go-sdk's other errors carry an answer: a refusal, or a status.
func unanswered(err error) bool {
	var ue *url.Error
	var oe *net.OpError
	if !errors.As(err, &ue) {
		return false
	}
	return !errors.As(err, &oe) || oe.Op != "dial"
}

// warnFallback logs, once, that the SDK sends initialize after its
// discover got no answer: the session is of the stateful era, where no
// call runs as a task.
func (c *taskConn) warnFallback() {
	c.mu.Lock()
	lost := c.lost
	c.lost = false
	c.mu.Unlock()
	if lost {
		c.opts.Logger.Warn("client: server/discover got no answer, and one more try would end past the resume timeout; the SDK falls back to initialize, and no call of this session runs as a task",
			"timeout", c.opts.ResumeTimeout)
	}
}
