package stdio

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
)

// restore brings a new subprocess to the state of a re-created session
// (DESIGN.md, "Generations"): it replays the stored initialize params, then
// notifications/initialized if the client had sent it, then
// logging/setLevel if a level was set, then resources/subscribe for each
// subscription. The engine consumes the responses; none reaches the client.
// Messages the subprocess sends meanwhile go to the standalone stream. A
// state without initialize params (the client never completed initialize)
// has nothing to replay.
func (s *proc) restore(ctx context.Context, st *engine.State) error {
	if len(st.InitializeParams) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.e.opts.StartTimeout)
	defer cancel()
	res, err := s.call(ctx, "initialize", st.InitializeParams)
	if err != nil {
		return err
	}
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	json.Unmarshal(res, &init)
	if init.ProtocolVersion != st.ProtocolVersion {
		// The client keeps speaking the version it negotiated; a server that
		// now answers another one may reject what it sends.
		s.logger.Warn("re-created subprocess negotiated another protocol version than the session",
			"reason", "protocol_version_changed", "session_version", st.ProtocolVersion, "server_version", init.ProtocolVersion)
	}
	if st.Initialized {
		if err := s.write(ctx, &jsonrpc.Request{Method: "notifications/initialized"}); err != nil {
			return fmt.Errorf("notifications/initialized: %w", err)
		}
	}
	if st.LogLevel != "" {
		p, _ := json.Marshal(map[string]string{"level": st.LogLevel})
		if _, err := s.call(ctx, "logging/setLevel", p); err != nil {
			return err
		}
	}
	for _, uri := range st.Subscriptions {
		p, _ := json.Marshal(map[string]string{"uri": uri})
		if _, err := s.call(ctx, "resources/subscribe", p); err != nil {
			return fmt.Errorf("%w (uri %s)", err, uri)
		}
	}
	s.logger.Info("subprocess restored", "pid", s.pid, "subscriptions", len(st.Subscriptions),
		"latency_ms", float64(time.Since(s.started).Microseconds())/1000)
	return nil
}

// call sends a request of the engine's own to the subprocess and waits for
// its result. Its ID ("tidemark-restore-<n>") is never one the client has in
// flight: restore runs before Start returns, so before any client call.
func (s *proc) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	s.mu.Lock()
	s.nextInternal++
	id := stringID(fmt.Sprintf("tidemark-restore-%d", s.nextInternal))
	ch := make(chan *jsonrpc.Response, 1)
	s.internal[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.internal, id)
		s.mu.Unlock()
	}()
	if err := s.write(ctx, &jsonrpc.Request{ID: id, Method: method, Params: params}); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case resp := <-ch:
		if resp.Error != nil {
			return nil, fmt.Errorf("%s: the server answered: %w", method, resp.Error)
		}
		return resp.Result, nil
	case <-s.done:
		return nil, fmt.Errorf("%s: %w", method, s.closedErr())
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: no answer: %w", method, ctx.Err())
	}
}
