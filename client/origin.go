// The requests of the server's (elicitation, sampling, roots/list, ping)
// as the SDK sees them: each under an id of the connection's own, its
// answer back to the session that asked, and a notifications/cancelled
// for each one whose session is gone.

package client

import (
	"encoding/json"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// origin is where a request of the server's that the SDK has not answered
// came from: the session that sent it and the server's id for it.
type origin struct {
	sess *session
	id   jsonrpc.ID
	seq  int64 // the request's number among the server's, from 1
}

// asked is a request of the server's as the server names it: its session
// and its id there.
type asked struct {
	sess *session
	id   jsonrpc.ID
}

// serverRequestID is the id under which the SDK gets the server's n-th
// request of the connection (n from 1).
func serverRequestID(n int64) jsonrpc.ID {
	id, _ := jsonrpc.MakeID("tidemark-" + strconv.FormatInt(n, 10)) // a string always makes an id
	return id
}

// noteOrigin returns msg, a message of the server's on s, as the SDK gets
// it. A request gets an id of the connection's own (serverRequestID),
// never given twice: each session numbers its requests as it likes, from
// 1 again after a re-initialization, and a retired session may still ask
// beside its successor, so that the server's ids alone would let the
// SDK's answer to one session's question reach another's. The origin of
// the request is kept until the SDK answers it (takeOrigin). The server's
// notifications/cancelled of such a request names the SDK's id, and the
// request is forgotten: an answer to it goes nowhere (MCP 2025-11-25,
// "Cancellation").
func (c *conn) noteOrigin(msg jsonrpc.Message, s *session) jsonrpc.Message {
	r, ok := msg.(*jsonrpc.Request)
	if !ok {
		return msg
	}
	if r.IsCall() {
		c.mu.Lock()
		c.serverRequests++
		n := c.serverRequests
		id := serverRequestID(n)
		c.origin[id] = origin{sess: s, id: r.ID, seq: n}
		c.asked[asked{s, r.ID}] = id
		c.mu.Unlock()
		return &jsonrpc.Request{ID: id, Method: r.Method, Params: r.Params}
	}
	if r.Method != "notifications/cancelled" {
		return msg
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(r.Params, &params) != nil {
		return msg
	}
	var raw any
	if json.Unmarshal(params["requestId"], &raw) != nil {
		return msg
	}
	sid, err := jsonrpc.MakeID(raw)
	if err != nil {
		return msg
	}
	c.mu.Lock()
	id, ok := c.asked[asked{s, sid}]
	if ok {
		delete(c.asked, asked{s, sid})
		delete(c.origin, id)
	}
	c.mu.Unlock()
	if !ok {
		return msg
	}
	params["requestId"], _ = json.Marshal(id.Raw()) // a string always encodes
	data, err := json.Marshal(params)
	if err != nil {
		return msg
	}
	return &jsonrpc.Request{Method: r.Method, Params: data}
}

// takeOrigin returns and forgets the origin of the server request that
// the SDK got under id; false when there is none: its session is lost or
// ended, the server cancelled it, or it was answered already.
func (c *conn) takeOrigin(id jsonrpc.ID) (origin, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.origin[id]
	if ok {
		delete(c.origin, id)
		delete(c.asked, asked{o.sess, o.id})
	}
	return o, ok
}

// cancelOrphans tells the SDK that the server requests it got under ids
// will never be answered by anyone, because their session is gone (why):
// one notifications/cancelled each (MCP 2025-11-25, "Cancellation"), so
// that a dialog open for one of them can close. An answer that still comes
// is dropped (Write).
func (c *conn) cancelOrphans(ids []jsonrpc.ID, why string) {
	for _, id := range ids {
		params, _ := json.Marshal(map[string]any{"requestId": id.Raw(), "reason": why}) // strings always encode
		c.logger.Info("client: a request of the server's will get no answer: its session is gone; notifications/cancelled sent to the SDK", "id", id.Raw(), "why", why)
		if !c.push(&jsonrpc.Request{Method: "notifications/cancelled", Params: params}) {
			return
		}
	}
}
