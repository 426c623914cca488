// Package routing holds the routing of the messages of one engine session
// (one session generation) of Tidemark's gateways, the stdio engine and
// the upstream engine: which client call each message the server sends
// relates to, and the IDs of the requests it sends the client. It is pure
// (no I/O, no lock, no clock); testdata/router lists its rules as cases.
package routing

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Router relates the messages of one server session (a subprocess, or an
// upstream session: one session generation) to the client calls they
// belong to (DESIGN.md, "Engines"):
//
//   - A client call (a request with an ID) is in flight from when it is
//     delivered until the server answers it, the client cancels it
//     (notifications/cancelled), or its delivery fails (Forget).
//   - A response relates to its own ID, in flight or not.
//   - A message that came on a stream of a client call's own (via: the
//     answer to the HTTP request that carried that call) relates to that
//     call, whatever it is; the rules below are for messages that came on
//     no call's stream (a subprocess's stdout, an upstream's standalone
//     stream).
//   - notifications/progress relates to the call in flight whose request
//     carried its progressToken (params._meta.progressToken; MCP
//     2025-11-25, utilities/progress), else to none.
//   - Logging (notifications/message) and server-to-client requests
//     relate to the one call in flight when exactly one is: nothing else
//     says which call they belong to. With none or several, they relate to
//     none (the standalone stream). Other notifications relate to none.
//   - A server-to-client request gets the ID "tidemark-<generation>-<n>",
//     n counting from 1: a new server session numbers its requests from
//     the start again, and the client must never see an ID of the session
//     twice. The client's response is mapped back to the server's ID; a
//     response to no such request in flight is dropped. A request whose
//     server ID is still in flight replaces the older one.
//   - notifications/cancelled from the server names one of its own
//     requests: it is renamed to the ID the client knows and relates to
//     what that request related to, which is then no longer in flight.
//
// A Router is not safe for concurrent use; its engine session guards it
// with a mutex.
type Router struct {
	gen      uint64                    // the generation, part of server request IDs
	calls    map[jsonrpc.ID]jsonrpc.ID // client call in flight → its progressToken (or zero)
	progress map[jsonrpc.ID]jsonrpc.ID // progressToken → the client call that carries it
	outCalls map[jsonrpc.ID]serverCall // session-unique ID → server-to-client request in flight
	outIDs   map[jsonrpc.ID]jsonrpc.ID // the server's ID → session-unique ID
	nextOut  uint64                    // last n used in a session-unique ID
}

// serverCall is a server-to-client request in flight.
type serverCall struct {
	orig    jsonrpc.ID // the ID the server gave it
	related jsonrpc.ID // the client call it was related to, or zero
}

// New returns the Router of generation gen of a session.
func New(gen uint64) *Router {
	return &Router{
		gen:      gen,
		calls:    make(map[jsonrpc.ID]jsonrpc.ID),
		progress: make(map[jsonrpc.ID]jsonrpc.ID),
		outCalls: make(map[jsonrpc.ID]serverCall),
		outIDs:   make(map[jsonrpc.ID]jsonrpc.ID),
	}
}

// FromClient records what a message from the client changes and returns
// the message to send the server: a call is in flight from now on, a
// notifications/cancelled ends the call it names, and a response to a
// server-to-client request gets the server's ID back. ok is false for a
// response to no server-to-client request in flight: it is dropped.
func (r *Router) FromClient(msg jsonrpc.Message) (out jsonrpc.Message, ok bool) {
	switch m := msg.(type) {
	case *jsonrpc.Request:
		switch {
		case m.IsCall():
			tok := progressToken(m.Params, true)
			r.calls[m.ID] = tok
			if tok.IsValid() {
				r.progress[tok] = m.ID
			}
		case m.Method == "notifications/cancelled":
			// Its response, should one come, still relates by its ID.
			if id, ok := RequestID(m.Params); ok {
				r.Forget(id)
			}
		}
		return m, true
	case *jsonrpc.Response:
		sc, ok := r.outCalls[m.ID]
		if !ok {
			return nil, false
		}
		delete(r.outCalls, m.ID)
		if r.outIDs[sc.orig] == m.ID {
			delete(r.outIDs, sc.orig)
		}
		return &jsonrpc.Response{ID: sc.orig, Result: m.Result, Error: m.Error}, true
	}
	return msg, true
}

// InFlight reports whether client call id is in flight: delivered, and
// not yet answered, cancelled or forgotten.
func (r *Router) InFlight(id jsonrpc.ID) bool {
	_, ok := r.calls[id]
	return ok
}

// Forget ends client call id, whose delivery failed or which the client
// cancelled or the server answered: it no longer counts as in flight.
func (r *Router) Forget(id jsonrpc.ID) {
	if tok, ok := r.calls[id]; ok {
		delete(r.calls, id)
		if tok.IsValid() && r.progress[tok] == id {
			delete(r.progress, tok)
		}
	}
}

// FromServer returns a message from the server as the client sees it, and
// the client call it relates to (the zero ID: none). via is the client
// call whose stream carried the message (the zero ID: none, or not known,
// as on a subprocess's stdout); a message on a call's stream relates to
// that call.
func (r *Router) FromServer(msg jsonrpc.Message, via jsonrpc.ID) (out jsonrpc.Message, related jsonrpc.ID) {
	switch m := msg.(type) {
	case *jsonrpc.Response:
		r.Forget(m.ID)
		return m, m.ID
	case *jsonrpc.Request:
		switch {
		case m.IsCall():
			if !via.IsValid() {
				via = r.soleCall()
			}
			return r.serverRequest(m, via)
		case m.Method == "notifications/cancelled":
			if out, related, ok := r.serverCancel(m); ok {
				return out, related
			}
			return msg, via
		case via.IsValid():
			return msg, via
		case m.Method == "notifications/progress":
			if tok := progressToken(m.Params, false); tok.IsValid() {
				related = r.progress[tok]
			}
		case m.Method == "notifications/message":
			related = r.soleCall()
		}
	}
	return msg, related
}

// serverRequest renames a server-to-client request to a session-unique ID
// and relates it to related.
func (r *Router) serverRequest(m *jsonrpc.Request, related jsonrpc.ID) (jsonrpc.Message, jsonrpc.ID) {
	r.nextOut++
	id := stringID(fmt.Sprintf("tidemark-%d-%d", r.gen, r.nextOut))
	if prev, ok := r.outIDs[m.ID]; ok {
		delete(r.outCalls, prev)
	}
	r.outCalls[id] = serverCall{orig: m.ID, related: related}
	r.outIDs[m.ID] = id
	return &jsonrpc.Request{ID: id, Method: m.Method, Params: m.Params}, related
}

// serverCancel renames the request a notifications/cancelled of the
// server names to the ID the client knows, and relates it to what that
// request related to; ok is false when it names no server-to-client
// request in flight.
func (r *Router) serverCancel(m *jsonrpc.Request) (out jsonrpc.Message, related jsonrpc.ID, ok bool) {
	orig, ok := RequestID(m.Params)
	if !ok {
		return m, jsonrpc.ID{}, false
	}
	id, ok := r.outIDs[orig]
	if !ok {
		return m, jsonrpc.ID{}, false
	}
	related = r.outCalls[id].related
	delete(r.outCalls, id)
	delete(r.outIDs, orig)
	if p, err := withRequestID(m.Params, id); err == nil {
		return &jsonrpc.Request{Method: m.Method, Params: p}, related, true
	}
	return m, related, true
}

// soleCall returns the ID of the client call in flight when exactly one
// is, else the zero ID (the standalone stream).
func (r *Router) soleCall() jsonrpc.ID {
	if len(r.calls) != 1 {
		return jsonrpc.ID{}
	}
	for id := range r.calls {
		return id
	}
	return jsonrpc.ID{}
}

// EndAll returns the client calls in flight, in the order of their IDs'
// text, and forgets them: the server session ended without answering them.
func (r *Router) EndAll() []jsonrpc.ID {
	ids := make([]jsonrpc.ID, 0, len(r.calls))
	for id := range r.calls {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b jsonrpc.ID) int {
		return cmp.Compare(fmt.Sprint(a.Raw()), fmt.Sprint(b.Raw()))
	})
	clear(r.calls)
	clear(r.progress)
	return ids
}

// progressToken returns params._meta.progressToken (inbound: where a
// request carries it) or params.progressToken (outbound:
// notifications/progress), or the zero ID when absent. Tokens are strings
// or integers (MCP 2025-11-25, utilities/progress), as request IDs are.
func progressToken(params json.RawMessage, inMeta bool) jsonrpc.ID {
	if len(params) == 0 {
		return jsonrpc.ID{}
	}
	var raw any
	if inMeta {
		var p struct {
			Meta struct {
				ProgressToken any `json:"progressToken"`
			} `json:"_meta"`
		}
		if json.Unmarshal(params, &p) != nil {
			return jsonrpc.ID{}
		}
		raw = p.Meta.ProgressToken
	} else {
		var p struct {
			ProgressToken any `json:"progressToken"`
		}
		if json.Unmarshal(params, &p) != nil {
			return jsonrpc.ID{}
		}
		raw = p.ProgressToken
	}
	id, err := jsonrpc.MakeID(raw)
	if err != nil {
		return jsonrpc.ID{}
	}
	return id
}

// RequestID returns params.requestId of notifications/cancelled, and false
// when params hold none that is a valid request ID.
func RequestID(params json.RawMessage) (jsonrpc.ID, bool) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	return id, err == nil && id.IsValid()
}

// withRequestID returns params with requestId replaced by id.
func withRequestID(params json.RawMessage, id jsonrpc.ID) (json.RawMessage, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	v, err := json.Marshal(id.Raw())
	if err != nil {
		return nil, err
	}
	p["requestId"] = v
	return json.Marshal(p)
}

// stringID returns the string request ID v.
func stringID(v string) jsonrpc.ID {
	id, _ := jsonrpc.MakeID(v) // a string is always a valid ID
	return id
}
