package stdio

// This file holds the routing of one subprocess's messages: which client
// call each message the subprocess writes relates to, and the IDs of the
// requests it sends the client. It is pure (no I/O, no lock, no clock);
// testdata/router lists its rules as cases.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// router relates the messages of one subprocess (one session generation)
// to the client calls they belong to (DESIGN.md, "Engines"):
//
//   - A client call (a request with an ID) is in flight from when it is
//     delivered until the subprocess answers it, the client cancels it
//     (notifications/cancelled), or its delivery fails (forget).
//   - A response relates to its own ID, in flight or not.
//   - notifications/progress relates to the call in flight whose request
//     carried its progressToken (params._meta.progressToken; MCP
//     2025-11-25, utilities/progress), else to none.
//   - Logging (notifications/message) and server-to-client requests
//     relate to the one call in flight when exactly one is: nothing else
//     says which call they belong to. With none or several, they relate to
//     none (the standalone stream). Other notifications relate to none.
//   - A server-to-client request gets the ID "tidemark-<generation>-<n>",
//     n counting from 1: a new subprocess numbers its requests from the
//     start again, and the client must never see an ID of the session
//     twice. The client's response is mapped back to the subprocess's ID;
//     a response to no such request in flight is dropped. A request whose
//     subprocess ID is still in flight replaces the older one.
//   - notifications/cancelled from the subprocess names one of its own
//     requests: it is renamed to the ID the client knows and relates to
//     what that request related to, which is then no longer in flight.
//
// A router is not safe for concurrent use; proc guards it with its mutex.
type router struct {
	gen      uint64                    // the generation, part of server request IDs
	calls    map[jsonrpc.ID]jsonrpc.ID // client call in flight → its progressToken (or zero)
	progress map[jsonrpc.ID]jsonrpc.ID // progressToken → the client call that carries it
	outCalls map[jsonrpc.ID]serverCall // session-unique ID → server-to-client request in flight
	outIDs   map[jsonrpc.ID]jsonrpc.ID // the subprocess's ID → session-unique ID
	nextOut  uint64                    // last n used in a session-unique ID
}

// serverCall is a server-to-client request in flight.
type serverCall struct {
	orig    jsonrpc.ID // the ID the subprocess gave it
	related jsonrpc.ID // the client call it was related to, or zero
}

func newRouter(gen uint64) *router {
	return &router{
		gen:      gen,
		calls:    make(map[jsonrpc.ID]jsonrpc.ID),
		progress: make(map[jsonrpc.ID]jsonrpc.ID),
		outCalls: make(map[jsonrpc.ID]serverCall),
		outIDs:   make(map[jsonrpc.ID]jsonrpc.ID),
	}
}

// fromClient records what a message from the client changes and returns
// the message to write to the subprocess. ok is false for a response to no
// server-to-client request in flight: it is dropped.
func (r *router) fromClient(msg jsonrpc.Message) (out jsonrpc.Message, ok bool) {
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
			if id, ok := requestID(m.Params); ok {
				r.forget(id)
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

// forget ends client call id, whose delivery failed or which the client
// cancelled: it no longer counts as in flight.
func (r *router) forget(id jsonrpc.ID) {
	if tok, ok := r.calls[id]; ok {
		delete(r.calls, id)
		if tok.IsValid() && r.progress[tok] == id {
			delete(r.progress, tok)
		}
	}
}

// fromServer returns a message from the subprocess as the client sees it,
// and the client call it relates to (the zero ID: none).
func (r *router) fromServer(msg jsonrpc.Message) (out jsonrpc.Message, related jsonrpc.ID) {
	switch m := msg.(type) {
	case *jsonrpc.Response:
		r.forget(m.ID)
		return m, m.ID
	case *jsonrpc.Request:
		switch {
		case m.IsCall():
			return r.serverRequest(m)
		case m.Method == "notifications/progress":
			if tok := progressToken(m.Params, false); tok.IsValid() {
				related = r.progress[tok]
			}
		case m.Method == "notifications/message":
			related = r.soleCall()
		case m.Method == "notifications/cancelled":
			return r.serverCancel(m)
		}
	}
	return msg, related
}

// serverRequest renames a server-to-client request to a session-unique ID
// and relates it to the sole call in flight.
func (r *router) serverRequest(m *jsonrpc.Request) (jsonrpc.Message, jsonrpc.ID) {
	related := r.soleCall()
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
// subprocess names to the ID the client knows.
func (r *router) serverCancel(m *jsonrpc.Request) (jsonrpc.Message, jsonrpc.ID) {
	orig, ok := requestID(m.Params)
	if !ok {
		return m, jsonrpc.ID{}
	}
	id, ok := r.outIDs[orig]
	if !ok {
		return m, jsonrpc.ID{}
	}
	related := r.outCalls[id].related
	delete(r.outCalls, id)
	delete(r.outIDs, orig)
	if p, err := withRequestID(m.Params, id); err == nil {
		return &jsonrpc.Request{Method: m.Method, Params: p}, related
	}
	return m, related
}

// soleCall returns the ID of the client call in flight when exactly one
// is, else the zero ID (the standalone stream).
func (r *router) soleCall() jsonrpc.ID {
	if len(r.calls) != 1 {
		return jsonrpc.ID{}
	}
	for id := range r.calls {
		return id
	}
	return jsonrpc.ID{}
}

// endAll returns the client calls in flight, in the order of their IDs'
// text, and forgets them: the subprocess ended without answering them.
func (r *router) endAll() []jsonrpc.ID {
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

// requestID returns params.requestId of notifications/cancelled.
func requestID(params json.RawMessage) (jsonrpc.ID, bool) {
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
