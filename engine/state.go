// This file holds the session-state rule (DESIGN.md, "Engines"): which
// inbound messages change the state a re-created session needs, how they
// change it (State.Fold), and the messages that restore that state in a new
// engine session (State.Restore). It is pure: no I/O, no clock. The session
// registry records with it; every adapter replays with it; nothing else
// lists the methods. testdata/state lists every method and its effect.

package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// State is what an engine needs to re-create a session without a new
// initialize (DESIGN.md, "Generations"). It is engine-neutral; Tidemark
// records it from the messages it carries, with Fold.
//
// Of what a client sets on a session in MCP 2025-11-25, these are the parts
// a server keeps for the session's life: the lifecycle handshake
// (basic/lifecycle), the log level (server/utilities/logging) and resource
// subscriptions (server/resources). Everything else a client sends is either
// one request's business or, like tasks, held by the server itself and not
// restorable by sending messages again.
//
// A State's Subscriptions slice is never modified in place, by Fold or
// anyone else: a State and its copies may share it.
type State struct {
	// ProtocolVersion is the negotiated protocol version: the
	// protocolVersion of the server's initialize result.
	ProtocolVersion string `json:"protocolVersion"`
	// InitializeParams are the params of the client's initialize request
	// (client info and capabilities), as JSON. Empty: initialize has not
	// succeeded, and there is nothing to restore.
	InitializeParams json.RawMessage `json:"initializeParams,omitempty"`
	// Initialized reports that notifications/initialized was received.
	Initialized bool `json:"initialized,omitempty"`
	// LogLevel is the level set by logging/setLevel; empty if never set.
	LogLevel string `json:"logLevel,omitempty"`
	// Subscriptions are the resource URIs subscribed with resources/subscribe
	// and not unsubscribed since, in the order they were first subscribed.
	Subscriptions []string `json:"subscriptions,omitempty"`
	// Suspended is what an engine session that hibernated keeps outside
	// the process and a later engine session of the session reattaches to
	// (Suspender.Suspension): a gateway's upstream session. Only a
	// hibernated record's State carries it; Fold keeps it as it is, and
	// Restore ignores it. Its shape is the engine's own.
	Suspended json.RawMessage `json:"suspended,omitempty"`
}

// The methods that change a State (MCP 2025-11-25).
const (
	methodInitialize  = "initialize"
	methodInitialized = "notifications/initialized"
	methodSetLevel    = "logging/setLevel"
	methodSubscribe   = "resources/subscribe"
	methodUnsubscribe = "resources/unsubscribe"
)

// restoreIDPrefix starts the IDs of the calls Restore returns.
const restoreIDPrefix = "tidemark-restore-"

// effect is how one method changes a State.
type effect struct {
	// call: the method is a request with an ID, which changes the state
	// once answered with a result; otherwise it is a notification, which
	// changes it on arrival.
	call bool
	// apply changes st, a copy whose Subscriptions it may not modify in
	// place, by the message's params and, for a call, its result.
	apply func(st *State, params, result json.RawMessage)
}

// effectOf returns the effect of method, and false for a method that does
// not change the state.
func effectOf(method string) (effect, bool) {
	switch method {
	case methodInitialize:
		return effect{call: true, apply: applyInitialize}, true
	case methodInitialized:
		return effect{call: false, apply: applyInitialized}, true
	case methodSetLevel:
		return effect{call: true, apply: applySetLevel}, true
	case methodSubscribe:
		return effect{call: true, apply: applySubscribe}, true
	case methodUnsubscribe:
		return effect{call: true, apply: applyUnsubscribe}, true
	}
	return effect{}, false
}

// ChangesState reports whether the inbound message req can change a
// session's State: it is one of the state-changing calls (initialize,
// logging/setLevel, resources/subscribe, resources/unsubscribe) or
// notifications/initialized. A recorder keeps the params of such a call
// until the call is answered, then folds the two with Fold; a message for
// which it reports false leaves every State as it is.
func ChangesState(req *jsonrpc.Request) bool {
	e, ok := effectOf(req.Method)
	return ok && e.call == req.IsCall()
}

// Fold returns st changed by the inbound message req and, when req is a
// call, its response resp (nil: not answered yet), and whether the result
// differs from st. It never modifies st.
//
// A call changes the state only once answered with a result: an error
// response, or none yet, leaves it as it is. initialize records its params
// and the result's protocolVersion (initialize without params records
// nothing: there would be nothing to replay); notifications/initialized
// sets Initialized; logging/setLevel records params.level;
// resources/subscribe adds params.uri unless already subscribed, and
// resources/unsubscribe removes it when subscribed. Params that do not
// decode, or an empty URI, change nothing. A notification with a
// state-changing call's method, a call with a notification's method, and
// every other method change nothing.
func (st State) Fold(req *jsonrpc.Request, resp *jsonrpc.Response) (State, bool) {
	e, ok := effectOf(req.Method)
	if !ok || e.call != req.IsCall() {
		return st, false
	}
	var result json.RawMessage
	if e.call {
		if resp == nil || resp.Error != nil {
			return st, false
		}
		result = resp.Result
	}
	next := st
	e.apply(&next, req.Params, result)
	if next.Equal(st) {
		return st, false
	}
	return next, true
}

func applyInitialize(st *State, params, result json.RawMessage) {
	if len(params) == 0 {
		return
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	json.Unmarshal(result, &res) // a result without a version records ""
	st.InitializeParams = params
	st.ProtocolVersion = res.ProtocolVersion
}

func applyInitialized(st *State, _, _ json.RawMessage) {
	st.Initialized = true
}

func applySetLevel(st *State, params, _ json.RawMessage) {
	var p struct {
		Level string `json:"level"`
	}
	if json.Unmarshal(params, &p) == nil {
		st.LogLevel = p.Level
	}
}

func applySubscribe(st *State, params, _ json.RawMessage) {
	if uri := paramsURI(params); uri != "" && !slices.Contains(st.Subscriptions, uri) {
		st.Subscriptions = append(slices.Clip(st.Subscriptions), uri)
	}
}

func applyUnsubscribe(st *State, params, _ json.RawMessage) {
	if i := slices.Index(st.Subscriptions, paramsURI(params)); i >= 0 {
		st.Subscriptions = slices.Delete(slices.Clone(st.Subscriptions), i, i+1)
	}
}

// paramsURI returns params.uri, or "" when params do not decode.
func paramsURI(params json.RawMessage) string {
	var p struct {
		URI string `json:"uri"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	return p.URI
}

// Equal reports whether st and o hold the same state: the same fields, with
// InitializeParams and Suspended compared byte for byte and Subscriptions
// in order.
func (st State) Equal(o State) bool {
	return st.ProtocolVersion == o.ProtocolVersion &&
		bytes.Equal(st.InitializeParams, o.InitializeParams) &&
		st.Initialized == o.Initialized &&
		st.LogLevel == o.LogLevel &&
		slices.Equal(st.Subscriptions, o.Subscriptions) &&
		bytes.Equal(st.Suspended, o.Suspended)
}

// Restore returns the inbound messages that bring an engine session holding
// the state from to st, in the order a client sends them: initialize with
// st's params, notifications/initialized if st has it, logging/setLevel if
// st has a level, and resources/subscribe for each of st's subscriptions,
// each unless from has it already. A fresh engine session holds State{}; an
// adapter whose SDK restores part of the state by itself passes that part.
// A state without InitializeParams (initialize never succeeded) has nothing
// to restore, and nothing is undone: Restore sends no unsubscribe and no
// level from has and st lacks.
//
// Calls carry the string IDs "tidemark-restore-1", "tidemark-restore-2"
// and so on, in order; notifications carry none. No client call is in
// flight with such an ID: an adapter replays them before its session
// takes any client message. The adapter sends the messages in order,
// waits for each call's response before the next message, consumes the
// responses (none reaches the client), and gives up on the first error
// response. Folding the messages and their responses into State{} gives
// the state the engine acknowledged, whose ProtocolVersion the adapter can
// compare with st's.
func (st State) Restore(from State) []*jsonrpc.Request {
	if len(st.InitializeParams) == 0 {
		return nil
	}
	var msgs []*jsonrpc.Request
	calls := 0
	call := func(method string, params any) {
		calls++
		id, _ := jsonrpc.MakeID(fmt.Sprintf("%s%d", restoreIDPrefix, calls)) // a string is always a valid ID
		req := &jsonrpc.Request{ID: id, Method: method}
		if raw, ok := params.(json.RawMessage); ok {
			req.Params = raw
		} else {
			req.Params, _ = json.Marshal(params) // structs of strings always encode
		}
		msgs = append(msgs, req)
	}
	if len(from.InitializeParams) == 0 {
		call(methodInitialize, st.InitializeParams)
	}
	if st.Initialized && !from.Initialized {
		msgs = append(msgs, &jsonrpc.Request{Method: methodInitialized})
	}
	if st.LogLevel != "" && st.LogLevel != from.LogLevel {
		call(methodSetLevel, struct {
			Level string `json:"level"`
		}{st.LogLevel})
	}
	for _, uri := range st.Subscriptions {
		if !slices.Contains(from.Subscriptions, uri) {
			call(methodSubscribe, struct {
				URI string `json:"uri"`
			}{uri})
		}
	}
	return msgs
}
