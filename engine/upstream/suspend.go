// This file holds hibernation (DESIGN.md, "Hibernation"): a generation
// gives up everything it holds in the process but keeps its upstream
// session, whose ID and protocol version go into the session's record,
// and the generation a wake starts reattaches to that upstream session
// instead of opening a new one.

package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
)

// Hibernation implements engine.Hibernator: lossy. A hibernated
// generation holds no standalone GET stream, so a message the upstream
// sends on it meanwhile reaches no event log, and the routing of the
// upstream's requests still waiting for the client's answer is not in the
// State: a wake starts generation+1 (old cursors answer 409), which
// reattaches to the kept upstream session (DESIGN.md, "Hibernation").
func (e *Engine) Hibernation() engine.Hibernation { return engine.HibernateLossy }

var (
	_ engine.Suspender = (*conn)(nil)
	_ engine.Releaser  = (*Engine)(nil)
)

// Release implements engine.Releaser: a session that ended while
// hibernated ends the upstream session it kept with DELETE, in the
// background, as Close does (Engine.Close waits for it). The DELETE
// carries Options.Header but no client's forwarded headers: no client
// request is at hand.
func (e *Engine) Release(suspended json.RawMessage) {
	s := keptOf(&engine.State{Suspended: suspended})
	if s.Session == "" {
		return
	}
	e.deleteSession(target{session: s.Session, version: s.Version}, e.opts.Logger.With("upstream_session", redact.Token(s.Session)))
}

// suspension is what a hibernated generation keeps of its upstream
// session, as engine.State.Suspended.
type suspension struct {
	// Session is the upstream's Mcp-Session-Id.
	Session string `json:"upstreamSession"`
	// Version is the protocol version the upstream session negotiated.
	Version string `json:"protocolVersion,omitempty"`
}

// Suspension implements engine.Suspender: the upstream session's ID and
// protocol version; nil when there is none to keep (a stateless upstream,
// one not opened yet, or one lost or ended).
func (c *conn) Suspension() json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := suspension{Session: c.session, Version: c.version}
	switch {
	case c.lost || c.ended:
		return nil
	case !c.restored && c.restoring == nil:
		s = c.kept // woken, and not reattached yet: keep it still
	case !c.restored:
		return nil
	}
	if s.Session == "" {
		return nil
	}
	b, _ := json.Marshal(s) // strings always encode
	return b
}

// Keep implements engine.Suspender: Close lets go of the upstream session
// without DELETE.
func (c *conn) Keep() {
	c.mu.Lock()
	c.keep = true
	c.mu.Unlock()
}

// keptOf returns the upstream session a re-created generation's State
// kept (zero: none, or a shape this engine does not know).
func keptOf(st *engine.State) suspension {
	var s suspension
	if st == nil || len(st.Suspended) == 0 || json.Unmarshal(st.Suspended, &s) != nil {
		return suspension{}
	}
	return s
}

// reattach takes the kept upstream session back, once a ping has shown
// the upstream still knows it, and reports whether it did. When the
// upstream answers 404 (it restarted, or ended or expired the session)
// the generation restores the State into a new upstream session instead,
// as the generation after a lost upstream session does (package doc):
// reattach reports false with no error. Any other failure is returned,
// and the next attempt pings the kept session again.
func (c *conn) reattach(ctx context.Context, hdr http.Header) (bool, error) {
	c.mu.Lock()
	c.session, c.version = c.kept.Session, c.kept.Version
	c.mu.Unlock()
	_, err := c.ping(ctx, hdr, c.e.opts.Timeout)
	if err == nil {
		c.logger.Info("reattached to the kept upstream session", "upstream_session", redact.Token(c.kept.Session))
		if c.state.Initialized {
			c.listen() // as the hibernated generation did once notifications/initialized was accepted
		}
		return true, nil
	}
	c.mu.Lock()
	c.session, c.version = "", ""
	c.mu.Unlock()
	if !errors.Is(err, errSessionLost) {
		return false, err
	}
	c.logger.Warn("the upstream no longer knows the kept upstream session; restoring the session into a new one",
		"reason", replay.ReasonUpstreamSessionLost, "upstream_session", redact.Token(c.kept.Session))
	c.mu.Lock()
	c.kept = suspension{}
	c.mu.Unlock()
	return false, nil
}
