package fanout

// This file holds the Bus's side of an *mcp.Server: which
// subscriptions/listen streams are open on it, and the delivery of a
// notification to them and to the server's sessions.

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The methods the Bus's middleware watches.
const (
	methodListen      = "subscriptions/listen"
	methodAcknowledge = "notifications/subscriptions/acknowledged"
)

// sessionlessVersion is the first protocol revision whose clients receive
// notifications only on subscriptions/listen streams; sessions of earlier
// revisions receive list changes without opting in.
const sessionlessVersion = "2026-07-28"

// sendTimeout bounds one delivery to one stream or session.
const sendTimeout = 10 * time.Second

// listener is one subscriptions/listen stream open on an attached server,
// from the moment the server sends its acknowledgment until its handler
// returns.
type listener struct {
	// mu is held while the acknowledgment is sent and while each
	// notification is: the acknowledgment is the stream's first message
	// (basic/patterns/subscriptions, "Acknowledgment"), and a notification
	// raised meanwhile goes out after it.
	mu sync.Mutex

	ctx     context.Context // the listen handler's; ends with the stream
	session *mcp.ServerSession
	id      any // the listen request's JSON-RPC ID, the subscriptionId
	filter  mcp.NotificationSubscriptions
	send    mcp.MethodHandler // the server's sending chain below the Bus
}

// listenKey is the context key under which the Bus's receiving middleware
// hands a subscriptions/listen handler the listener it fills in.
type listenKey struct{}

// Attach makes s's subscriptions/listen streams and sessions receive the
// notifications raised through b, on this replica and (with Redis) on any
// other. It adds one sending and one receiving middleware to s; attaching
// s again does nothing. Attach s before serving it: a stream opened before
// is not seen.
func (b *Bus) Attach(s *mcp.Server) {
	b.mu.Lock()
	if _, ok := b.servers[s]; ok {
		b.mu.Unlock()
		return
	}
	b.servers[s] = nil
	b.mu.Unlock()
	s.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		b.mu.Lock()
		b.servers[s] = next
		b.mu.Unlock()
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != methodAcknowledge {
				return next(ctx, method, req)
			}
			return b.acknowledge(ctx, req, next)
		}
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != methodListen {
				return next(ctx, method, req)
			}
			l := &listener{}
			defer b.forget(l)
			return next(context.WithValue(ctx, listenKey{}, l), method, req)
		}
	})
}

// acknowledge sends the acknowledgment req of the listen handler whose
// context is ctx through send, and registers that handler's listener with
// the filter acknowledged. The listener is registered before the
// acknowledgment goes out, so a notification raised once the client has
// it reaches the stream; one raised while it is being sent waits for it.
// A listener whose acknowledgment fails is forgotten.
func (b *Bus) acknowledge(ctx context.Context, req mcp.Request, send mcp.MethodHandler) (mcp.Result, error) {
	l, _ := ctx.Value(listenKey{}).(*listener)
	ss, _ := req.GetSession().(*mcp.ServerSession)
	p, _ := req.GetParams().(*mcp.SubscriptionsAcknowledgedParams)
	if l == nil || ss == nil || p == nil {
		return send(ctx, methodAcknowledge, req)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b.mu.Lock()
	l.ctx, l.session, l.id, l.filter, l.send = ctx, ss, p.Meta[mcp.MetaKeySubscriptionID], p.Notifications, send
	b.listeners[l] = struct{}{}
	b.mu.Unlock()
	res, err := send(ctx, methodAcknowledge, req)
	if err != nil {
		b.forget(l)
	}
	return res, err
}

// forget removes a listener whose handler returned.
func (b *Bus) forget(l *listener) {
	b.mu.Lock()
	delete(b.listeners, l)
	b.mu.Unlock()
}

// deliver gives n to this process's attached servers: resources/updated
// through each server's own ResourceUpdated (it knows which stream and
// session subscribed to which URI), a list change to every listener that
// asked for it and to every session of a stateful revision.
func (b *Bus) deliver(ctx context.Context, n Notification) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
	defer cancel()
	b.mu.Lock()
	servers := make(map[*mcp.Server]mcp.MethodHandler, len(b.servers))
	for s, send := range b.servers {
		servers[s] = send
	}
	var ls []*listener
	for l := range b.listeners {
		if wants(l.filter, n.Method) {
			ls = append(ls, l)
		}
	}
	b.mu.Unlock()
	if n.Method == ResourceUpdated {
		for s := range servers {
			if err := s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: n.URI}); err != nil {
				b.logger.Warn("delivering a notification failed", "method", n.Method, "uri", n.URI, "error", err)
			}
		}
		return
	}
	for _, l := range ls {
		l.mu.Lock()
		lctx, cancel := context.WithTimeout(l.ctx, sendTimeout)
		_, err := l.send(lctx, n.Method, listChanged(l.session, n.Method, l.id))
		cancel()
		l.mu.Unlock()
		if err != nil && l.ctx.Err() == nil {
			b.logger.Warn("delivering a notification to a subscriptions/listen stream failed", "method", n.Method, "error", err)
		}
	}
	for s, send := range servers {
		for ss := range s.Sessions() {
			if p := ss.InitializeParams(); p == nil || p.ProtocolVersion >= sessionlessVersion {
				continue
			}
			if _, err := send(ctx, n.Method, listChanged(ss, n.Method, nil)); err != nil {
				b.logger.Warn("delivering a notification to a session failed", "method", n.Method, "error", err)
			}
		}
	}
}

// wants reports whether a stream acknowledged with filter receives
// list-change notifications of method.
func wants(filter mcp.NotificationSubscriptions, method string) bool {
	switch method {
	case ToolsListChanged:
		return filter.ToolsListChanged
	case PromptsListChanged:
		return filter.PromptsListChanged
	case ResourcesListChanged:
		return filter.ResourcesListChanged
	}
	return false
}

// listChanged returns the request that sends the list-change notification
// method on ss, with subscriptionID in _meta when it is not nil (basic/
// patterns/subscriptions, "Receiving Notifications").
func listChanged(ss *mcp.ServerSession, method string, subscriptionID any) mcp.Request {
	var meta mcp.Meta
	if subscriptionID != nil {
		meta = mcp.Meta{mcp.MetaKeySubscriptionID: subscriptionID}
	}
	switch method {
	case ToolsListChanged:
		return &mcp.ServerRequest[*mcp.ToolListChangedParams]{Session: ss, Params: &mcp.ToolListChangedParams{Meta: meta}}
	case PromptsListChanged:
		return &mcp.ServerRequest[*mcp.PromptListChangedParams]{Session: ss, Params: &mcp.PromptListChangedParams{Meta: meta}}
	default:
		return &mcp.ServerRequest[*mcp.ResourceListChangedParams]{Session: ss, Params: &mcp.ResourceListChangedParams{Meta: meta}}
	}
}

// Listeners returns how many subscriptions/listen streams are open on the
// servers attached to b in this process.
func (b *Bus) Listeners() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.listeners)
}
