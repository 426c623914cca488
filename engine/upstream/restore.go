// This file holds the restore of a re-created session into a new upstream
// session: the messages of engine.State.Restore, sent and answered before
// the generation takes a client message.

package upstream

import (
	"context"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
)

// ready returns once the generation's upstream session holds the session's
// state. A fresh session holds it from the start; a re-created one is
// restored once, by the first caller, with the forwarded headers hdr. A
// restore that failed is tried again by the next caller: no event of the
// generation exists yet, so no generation needs to change for it.
func (c *conn) ready(ctx context.Context, hdr http.Header) error {
	c.mu.Lock()
	if c.restored {
		c.mu.Unlock()
		return nil
	}
	if c.ended {
		c.mu.Unlock()
		return c.closedErr()
	}
	a := c.restoring
	if a == nil {
		a = &attempt{done: make(chan struct{})}
		c.restoring = a
		c.wg.Go(func() { c.runRestore(a, hdr) })
	}
	c.mu.Unlock()
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// restoreInBackground starts the restore of a re-created session at once.
func (c *conn) restoreInBackground() {
	c.wg.Go(func() { c.ready(c.ctx, nil) })
}

// runRestore runs one restore attempt and publishes its outcome. A failed
// attempt ends the upstream session it may have opened.
func (c *conn) runRestore(a *attempt, hdr http.Header) {
	err := c.restore(c.ctx, hdr)
	c.mu.Lock()
	c.restoring = nil
	var opened target
	if err == nil {
		c.restored = true
	} else {
		opened = target{session: c.session, version: c.version, header: hdr}
		c.session, c.version = "", ""
	}
	c.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("upstream: restore session %s gen %d: %w", redact.Token(c.token), c.gen, err)
		c.logger.Warn("restoring the session into a new upstream session failed; the next request tries again", "error", err)
		if opened.session != "" {
			c.e.deleteSession(opened, c.logger)
		}
	}
	a.err = err
	close(a.done)
}

// restore brings a new upstream session to the state of the re-created
// session (DESIGN.md, "Generations"): it sends the messages
// engine.State.Restore gives for a fresh engine session (the stored
// initialize params, then notifications/initialized if the client had
// sent it, then logging/setLevel if a level was set, then
// resources/subscribe for each subscription), waiting for each request's
// response before the next message. The gateway consumes the responses;
// none reaches the client. A generation woken from hibernation first
// reattaches to the upstream session the State kept (reattach), and
// restores only when the upstream no longer knows it.
func (c *conn) restore(ctx context.Context, hdr http.Header) error {
	if c.kept.Session != "" {
		if ok, err := c.reattach(ctx, hdr); ok || err != nil {
			return err
		}
	}
	var acked engine.State // what the upstream acknowledged
	for _, m := range c.state.Restore(engine.State{}) {
		var resp *jsonrpc.Response
		if m.IsCall() {
			r, err := c.exchange(ctx, m, hdr, c.e.opts.Timeout)
			if err != nil {
				return fmt.Errorf("%s: %w", m.Method, err)
			}
			if r.Error != nil {
				return fmt.Errorf("%s: the upstream answered: %w", m.Method, r.Error)
			}
			resp = r
		} else if err := c.notify(ctx, m, hdr); err != nil {
			return fmt.Errorf("%s: %w", m.Method, err)
		}
		acked, _ = acked.Fold(m, resp)
		if m.Method == methodInitialize {
			c.noteVersion(resp.Result)
		}
	}
	if acked.ProtocolVersion != c.state.ProtocolVersion {
		// The client keeps speaking the version it negotiated; an upstream
		// that now answers another one may reject what it sends.
		c.logger.Warn("the new upstream session negotiated another protocol version than the session",
			"reason", replay.ReasonProtocolVersionChanged, "session_version", c.state.ProtocolVersion,
			"upstream_version", acked.ProtocolVersion)
	}
	c.logger.Info("session restored into a new upstream session", "subscriptions", len(c.state.Subscriptions))
	if acked.Initialized {
		c.listen()
	}
	return nil
}
