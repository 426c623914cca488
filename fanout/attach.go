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
// returns or the stream is cut. Every notification for the stream goes
// through its queue (queue.go).
type listener struct {
	cancel context.CancelFunc // ends the listen handler, and so the stream

	// Set before the listener is registered, then read only.
	ctx     context.Context // the listen handler's; ends with the stream
	session *mcp.ServerSession
	id      any // the listen request's JSON-RPC ID, the subscriptionId
	filter  mcp.NotificationSubscriptions
	send    mcp.MethodHandler // the server's sending chain below the Bus
	key     streamKey         // in Bus.streams, unless its session is nil

	mu    sync.Mutex
	queue []pending // at most queueLen
	ended bool
	// acked says the acknowledgment is sent, so the queue may be written
	// (the acknowledgment is the stream's first message).
	acked bool
	// writing says a goroutine writes the queue (Bus.write); there is one
	// at most, which ends when the queue is empty.
	writing bool
}

// newListener returns the listener of a listen handler that cancel ends.
func newListener(cancel context.CancelFunc) *listener {
	return &listener{cancel: cancel}
}

// streamKey identifies a listen stream among the notifications the
// go-sdk sends: its session and the subscriptionId in their _meta.
type streamKey struct {
	session *mcp.ServerSession
	id      any // string or int64, as the go-sdk's request IDs are
}

// keyOf returns the key of the stream req is sent on, and false when req
// names none (no subscriptionId, or one of no comparable kind).
func keyOf(req mcp.Request) (streamKey, bool) {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	p := req.GetParams()
	if ss == nil || p == nil {
		return streamKey{}, false
	}
	switch id := p.GetMeta()[mcp.MetaKeySubscriptionID].(type) {
	case string, int64, float64:
		return streamKey{ss, id}, true
	}
	return streamKey{}, false
}

// listenKey is the context key under which the Bus's receiving middleware
// hands a subscriptions/listen handler the listener it fills in.
type listenKey struct{}

// Attach makes s's subscriptions/listen streams and sessions receive the
// notifications raised through b, on this replica and (with Redis) on any
// other. It adds one sending and one receiving middleware to s; attaching
// s again does nothing. Attach s before serving it: a stream opened before
// is not seen. The sending middleware puts every list change and resource
// update sent to a subscriptions/listen stream, by the Bus or by s itself
// (Server.ResourceUpdated, AddTool and the like), into the stream's queue;
// a goroutine of the stream's, while its queue holds any, sends them below
// it.
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
			switch method {
			case methodAcknowledge:
				return b.acknowledge(ctx, req, next)
			case ResourceUpdated, ToolsListChanged, PromptsListChanged, ResourcesListChanged:
				if l, ok := b.stream(req); ok {
					if l != nil {
						b.enqueue(l, method, req)
					}
					return nil, nil
				}
			}
			return next(ctx, method, req)
		}
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != methodListen {
				return next(ctx, method, req)
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			l := newListener(cancel)
			defer b.forget(l)
			return next(context.WithValue(ctx, listenKey{}, l), method, req)
		}
	})
}

// acknowledge sends the acknowledgment req of the listen handler whose
// context is ctx through send, and registers that handler's listener with
// the filter acknowledged. The listener is registered before the
// acknowledgment goes out, so a notification raised once the client has
// it reaches the stream; one raised while it is being sent waits in the
// queue, which is written once the acknowledgment is sent. A listener
// whose acknowledgment fails is forgotten.
func (b *Bus) acknowledge(ctx context.Context, req mcp.Request, send mcp.MethodHandler) (mcp.Result, error) {
	l, _ := ctx.Value(listenKey{}).(*listener)
	ss, _ := req.GetSession().(*mcp.ServerSession)
	p, _ := req.GetParams().(*mcp.SubscriptionsAcknowledgedParams)
	if l == nil || ss == nil || p == nil {
		return send(ctx, methodAcknowledge, req)
	}
	l.ctx, l.session, l.id, l.filter, l.send = ctx, ss, p.Meta[mcp.MetaKeySubscriptionID], p.Notifications, send
	b.mu.Lock()
	b.listeners[l] = struct{}{}
	if k, ok := keyOf(req); ok {
		l.key = k
		b.streams[k] = l
	}
	b.mu.Unlock()
	res, err := send(ctx, methodAcknowledge, req)
	if err != nil {
		b.forget(l)
		return res, err
	}
	if l.acknowledged() {
		go b.write(l)
	}
	return res, err
}

// stream returns the listener of the stream req is sent on, and whether
// the Bus takes req: it takes every notification for a session of the
// sessionless revision, whose notifications go on listen streams only, and
// drops (l nil) one for a stream that is not acknowledged yet, or ended or
// was cut (the go-sdk's subscriptions outlive the stream until its handler
// returns, and a write to a stream that was cut waits on a client that
// does not read). It takes nothing for a session of a stateful revision or
// once the Bus is closed.
func (b *Bus) stream(req mcp.Request) (l *listener, ok bool) {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if ss == nil {
		return nil, false
	}
	if p := ss.InitializeParams(); p == nil || p.ProtocolVersion < sessionlessVersion {
		return nil, false
	}
	k, keyed := keyOf(req)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, false
	}
	if !keyed {
		return nil, true
	}
	return b.streams[k], true
}

// forget removes a listener whose handler returned or that is cut, and
// ends it; it reports whether l was registered until now.
func (b *Bus) forget(l *listener) bool {
	b.mu.Lock()
	_, ok := b.listeners[l]
	delete(b.listeners, l)
	if l.key.session != nil && b.streams[l.key] == l {
		delete(b.streams, l.key)
	}
	b.mu.Unlock()
	l.end()
	return ok
}

// deliver gives n to this process's attached servers: resources/updated
// through each server's own ResourceUpdated (it knows which stream and
// session subscribed to which URI), a list change to every listener that
// asked for it and to every session of a stateful revision. What goes to a
// listener is queued (enqueue), never written here; a session's
// notification goes to its event log, which does not wait on the network.
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
		b.enqueue(l, n.Method, listChanged(l.session, n.Method, l.id))
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
