// This file holds the generation's standalone stream: the upstream's GET
// stream of the messages that relate to no call (MCP 2025-11-25, "Listening
// for Messages from the Server"), kept open for the generation's life.

package upstream

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/resume"
)

// listen opens the upstream's standalone GET stream of the generation, once
// the upstream session is initialized; a stateless upstream (no session
// ID) has none.
func (c *conn) listen() {
	c.mu.Lock()
	if c.listening || c.ended || c.session == "" {
		c.mu.Unlock()
		return
	}
	c.listening = true
	c.mu.Unlock()
	c.wg.Go(c.listenLoop)
}

// listenLoop keeps the standalone GET stream open: its messages go to the
// outbox related to no call, and when it ends the loop opens it again
// (package resume), after the retry the upstream asked for and a wait
// that grows while the stream brings no message, with Last-Event-ID when
// its events carry IDs. An upstream that cannot be reached, or refuses the
// stream, is asked again with a growing wait (doubling to maxBackoff). The
// loop ends with the generation, when the upstream answers 405 (it offers
// no such stream), and when it answers 404: the upstream session is lost,
// and so is the generation.
func (c *conn) listenLoop() {
	rs := &resume.Stream{HTTP: c.e.streams, Policy: backoffPolicy(0)}
	var last string
	var cause error // what ended the stream's last connection
	for first := true; c.ctx.Err() == nil; first = false {
		req := c.e.resumeRequest(c.target(c.latestHeader()), last)
		var res resume.Result
		var err error
		if first {
			res, err = rs.Open(c.ctx, req)
		} else {
			res, err = rs.Resume(c.ctx, req, cause)
		}
		switch {
		case err != nil:
			if c.ctx.Err() == nil {
				c.logger.Warn("the standalone stream cannot be asked for", "error", err)
			}
			return
		case res.Kind == resume.SessionLost:
			c.lose(fmt.Errorf("GET: %w", errSessionLost))
			return
		case res.Kind == resume.Resumed:
			c.logger.Debug("the standalone stream is open")
			relayed := 0
			last, rs.Retry, _, cause = c.readStream(res.Response, last, rs.Retry, func(m jsonrpc.Message) bool {
				relayed++
				c.relay(c.ctx, m, jsonrpc.ID{})
				return false
			})
			if relayed > 0 {
				rs.Progressed() // a stream that ends at once is not asked again at once
			}
			if !errors.Is(cause, io.EOF) && c.ctx.Err() == nil {
				// The upstream cut the stream's connection: it may have
				// closed every other one too (it stopped or restarted).
				// A call written into an idle one it closed would be
				// handed over and then fail; dialed afresh while the
				// upstream is down, it is refused (engine.ErrUnreachable).
				c.e.base.CloseIdleConnections()
				c.logger.Debug("the standalone stream was cut; the idle connections to the upstream are closed", "error", cause)
			}
		case res.Status == http.StatusMethodNotAllowed:
			c.logger.Debug("the upstream offers no standalone stream (GET answered 405)")
			return
		default:
			c.logger.Debug("the upstream refused the standalone stream", "error", &statusError{method: "GET", status: res.Status, body: res.Body})
			cause = nil
		}
	}
}
