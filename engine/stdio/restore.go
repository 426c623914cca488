// This file holds the restore of a re-created session into a new
// subprocess: the messages of engine.State.Restore, sent and answered
// before the session takes a client message.

package stdio

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/replay"
)

// restore brings a new subprocess to the state of a re-created session
// (DESIGN.md, "Generations"): it sends the messages engine.State.Restore
// gives for a fresh engine session (the stored initialize params, then
// notifications/initialized if the client had sent it, then
// logging/setLevel if a level was set, then resources/subscribe for each
// subscription), waiting for each call's response before the next. The
// engine consumes the responses; none reaches the client. Messages the
// subprocess sends meanwhile go to the standalone stream. A state without
// initialize params (the client never completed initialize) has nothing to
// replay.
func (s *proc) restore(ctx context.Context, st *engine.State) error {
	msgs := st.Restore(engine.State{})
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.e.opts.StartTimeout)
	defer cancel()
	var acked engine.State // what the subprocess acknowledged
	for _, m := range msgs {
		var resp *jsonrpc.Response
		if m.IsCall() {
			r, err := s.call(ctx, m)
			if err != nil {
				return fmt.Errorf("%w (params %s)", err, m.Params)
			}
			resp = r
		} else if err := s.write(ctx, m); err != nil {
			return fmt.Errorf("%s: %w", m.Method, err)
		}
		acked, _ = acked.Fold(m, resp)
	}
	if acked.ProtocolVersion != st.ProtocolVersion {
		// The client keeps speaking the version it negotiated; a server that
		// now answers another one may reject what it sends.
		s.logger.Warn("re-created subprocess negotiated another protocol version than the session",
			"reason", replay.ReasonProtocolVersionChanged, "session_version", st.ProtocolVersion, "server_version", acked.ProtocolVersion)
	}
	s.logger.Info("subprocess restored", "pid", s.pid, "subscriptions", len(st.Subscriptions),
		"latency_ms", float64(time.Since(s.started).Microseconds())/1000)
	return nil
}

// call sends req, a request of the engine's own, to the subprocess and
// waits for its successful response. Its ID is never one the client has in
// flight: restore runs before Start returns, so before any client call.
func (s *proc) call(ctx context.Context, req *jsonrpc.Request) (*jsonrpc.Response, error) {
	ch := make(chan *jsonrpc.Response, 1)
	s.mu.Lock()
	s.internal[req.ID] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.internal, req.ID)
		s.mu.Unlock()
	}()
	if err := s.write(ctx, req); err != nil {
		return nil, fmt.Errorf("%s: %w", req.Method, err)
	}
	select {
	case resp := <-ch:
		if resp.Error != nil {
			return nil, fmt.Errorf("%s: the server answered: %w", req.Method, resp.Error)
		}
		return resp, nil
	case <-s.done:
		return nil, fmt.Errorf("%s: %w", req.Method, s.closedErr())
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: no answer: %w", req.Method, ctx.Err())
	}
}
