// observe.go holds what the transport records of a notification it hands
// to a session: its server span and its mcp.server.operation.duration. The
// session records the requests it answers (session.Live.OpenStream).

package transport

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// deliverMessage hands m to live's session as Live.Deliver does. A notification
// gets a server span, whose parent is the trace context of its
// params._meta or else of req.Header, and its operation duration is
// recorded, with error type -32000 when the delivery failed.
func (h *Handler) deliverMessage(ctx context.Context, live *session.Live, m jsonrpc.Message, req engine.Request) error {
	n, ok := m.(*jsonrpc.Request)
	if !ok || n.IsCall() {
		return live.Deliver(ctx, m, req)
	}
	start := time.Now()
	_, span := h.opts.Tracer.StartRequest(ctx, req.Header, tracing.Message{
		Method: n.Method, Params: n.Params, Session: live.Token(), ProtocolVersion: live.ProtocolVersion(),
	})
	err := live.Deliver(ctx, m, req)
	errType := ""
	if err != nil {
		errType = metrics.ErrorType(codeServerError)
	}
	h.opts.Metrics.Operation(n.Method, errType, time.Since(start))
	span.EndRequest(errType)
	return err
}
