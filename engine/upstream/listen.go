// This file holds the generation's standalone stream: the upstream's GET
// stream of the messages that relate to no call (MCP 2025-11-25, "Listening
// for Messages from the Server"), kept open for the generation's life.

package upstream

import (
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
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
// outbox related to no call, and when it ends the loop opens it again,
// after the retry the upstream asked for, with Last-Event-ID when its
// events carry IDs. An upstream that cannot be reached is asked again with
// a growing wait (at most maxBackoff). The loop ends with the generation,
// when the upstream answers 405 (it offers no such stream), and when it
// answers 404: the upstream session is lost, and so is the generation.
func (c *conn) listenLoop() {
	var last string
	var retry, wait time.Duration
	for c.ctx.Err() == nil {
		t := c.target(c.latestHeader())
		t.lastEvent = last
		req, err := c.e.newRequest(c.ctx, http.MethodGet, nil, t)
		if err != nil {
			return
		}
		resp, err := c.e.do(req, nil)
		if err != nil {
			wait = nextBackoff(wait)
			sleep(c.ctx, wait)
			continue
		}
		switch kindOf(resp, true) {
		case answerLost:
			wire.Drain(resp)
			c.lose(fmt.Errorf("GET: %w", errSessionLost))
			return
		case answerSSE:
			relayed := 0
			last, retry, _, _ = c.readStream(resp, last, retry, func(m jsonrpc.Message) bool {
				relayed++
				c.relay(c.ctx, m, jsonrpc.ID{})
				return false
			})
			if relayed > 0 {
				wait = 0
			} else {
				wait = nextBackoff(wait) // a stream that ends at once is not asked again at once
			}
			sleep(c.ctx, max(retry, wait))
			continue
		}
		se := readStatusError("GET", resp)
		if se.status == http.StatusMethodNotAllowed {
			c.logger.Debug("the upstream offers no standalone stream (GET answered 405)")
			return
		}
		c.logger.Debug("the upstream refused the standalone stream", "error", se)
		wait = nextBackoff(wait)
		sleep(c.ctx, wait)
	}
}
