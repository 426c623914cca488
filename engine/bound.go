// This file holds the bounds on what a session's State keeps of its
// client's input (State.Admit): a session keeps it for its whole life, in
// the Live, its record and the engine's own session, so that without them
// one unauthenticated client could make one session hold as much as its
// request bodies carry.

package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// MaxInitializeParams is the most bytes the params of an initialize may
// take, as sent: a session keeps them for its life (State.InitializeParams,
// and the engine's decoded copy). Real clients send a few hundred bytes:
// the go-sdk's client (v1.8.0) 135, the TypeScript SDK's (1.32.2) 166 with
// sampling, elicitation and roots. 16 KiB, a hundred times that, leaves
// room for a clientInfo with a title, a description and icons, and for
// experimental capabilities, while bounding what 10,000 sessions hold.
const MaxInitializeParams = 16 << 10

// MaxSubscriptions is the most resources/subscribe URIs a session holds at
// once (State.Subscriptions), and MaxSubscriptionBytes the most bytes
// those URIs take together. A host subscribes to the resources it shows,
// a handful; the engine keeps each URI beside the State's copy.
const (
	MaxSubscriptions     = 64
	MaxSubscriptionBytes = 16 << 10
)

// logLevels are the levels of logging/setLevel (MCP 2025-11-25 schema,
// LoggingLevel: the syslog severities of RFC 5424).
var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// ErrBound is Admit's error: errors.Is(err, ErrBound) holds for it.
var ErrBound = errors.New("engine: session state bound")

// Admit returns an error wrapping ErrBound when the calls of one request
// (requests with an id, not answered yet), answered with results after
// the calls in flight (pending, whose params are known), would make st
// hold more than its bounds allow: more than MaxSubscriptions subscribed
// URIs, or URIs of more than MaxSubscriptionBytes together (counting each
// URI once, and no unsubscribe in flight as done), an initialize whose
// params are over MaxInitializeParams bytes, or a logging/setLevel whose
// level is not one of MCP's eight. It returns nil for every other call.
// Params that do not decode are left to the engine, which answers them
// with an error: Fold then records nothing.
func (st State) Admit(pending, calls []*jsonrpc.Request) error {
	subscribing := false
	for _, c := range calls {
		switch c.Method {
		case methodInitialize:
			if len(c.Params) > MaxInitializeParams {
				return fmt.Errorf("%w: initialize params of %d bytes exceed %d bytes", ErrBound, len(c.Params), MaxInitializeParams)
			}
		case methodSetLevel:
			if lvl, ok := paramsLevel(c.Params); ok && !slices.Contains(logLevels, lvl) {
				return fmt.Errorf("%w: logging/setLevel: level %.40q is not one of %v (MCP 2025-11-25, LoggingLevel)", ErrBound, lvl, logLevels)
			}
		case methodSubscribe:
			subscribing = true
		}
	}
	if !subscribing {
		return nil
	}
	uris := slices.Clone(st.Subscriptions)
	size := 0
	for _, u := range uris {
		size += len(u)
	}
	for _, c := range slices.Concat(pending, calls) {
		if c.Method != methodSubscribe {
			continue
		}
		if u := paramsURI(c.Params); u != "" && !slices.Contains(uris, u) {
			uris = append(uris, u)
			size += len(u)
		}
	}
	if len(uris) > MaxSubscriptions || size > MaxSubscriptionBytes {
		return fmt.Errorf("%w: resources/subscribe would make the session hold %d subscriptions of %d bytes of URIs, over its bound of %d subscriptions and %d bytes: unsubscribe first",
			ErrBound, len(uris), size, MaxSubscriptions, MaxSubscriptionBytes)
	}
	return nil
}

// MaxListenParams is the most bytes the params of a 2026-07-28
// subscriptions/listen may take, as sent: its stream keeps them, decoded,
// for its life, with no session to bound it (the go-sdk's listen handler
// holds the params and subscribes each URI). 32 KiB holds the
// MaxSubscriptionBytes of URIs a session may subscribe, their quoting, the
// notification flags and a _meta as large as MaxInitializeParams allows.
const MaxListenParams = 32 << 10

// AdmitListen returns an error wrapping ErrBound when the params of a
// subscriptions/listen would make its stream hold more than a session may
// (MCP 2026-07-28, basic/patterns/subscriptions: notifications.
// resourceSubscriptions replaces resources/subscribe): params over
// MaxListenParams bytes, or more than MaxSubscriptions resource URIs, or
// URIs of more than MaxSubscriptionBytes together. It returns nil for
// every other listen; params that do not decode are left to the engine,
// which answers them with an error.
func AdmitListen(params []byte) error {
	if len(params) > MaxListenParams {
		return fmt.Errorf("%w: subscriptions/listen params of %d bytes exceed %d bytes", ErrBound, len(params), MaxListenParams)
	}
	var p struct {
		Notifications *struct {
			ResourceSubscriptions []string `json:"resourceSubscriptions"`
		} `json:"notifications"`
	}
	if json.Unmarshal(params, &p) != nil || p.Notifications == nil {
		return nil
	}
	uris := p.Notifications.ResourceSubscriptions
	size := 0
	for _, u := range uris {
		size += len(u)
	}
	if len(uris) > MaxSubscriptions || size > MaxSubscriptionBytes {
		return fmt.Errorf("%w: subscriptions/listen names %d resource URIs of %d bytes, over the bound of %d URIs and %d bytes a stream may hold",
			ErrBound, len(uris), size, MaxSubscriptions, MaxSubscriptionBytes)
	}
	return nil
}

// paramsLevel returns params.level, and false when params do not decode
// or have no string level.
func paramsLevel(params []byte) (string, bool) {
	var p struct {
		Level *string `json:"level"`
	}
	if json.Unmarshal(params, &p) != nil || p.Level == nil {
		return "", false
	}
	return *p.Level, true
}
