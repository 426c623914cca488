// Package engine defines how Tidemark hosts MCP server logic. An engine turns
// the inbound JSON-RPC messages of one session into outbound messages, and
// tags each outbound message with the inbound request it relates to, or none
// (then it belongs on the standalone stream). Adapters live in sub-packages:
// gosdk hosts an *mcp.Server of the official Go SDK in process.
//
// An engine session is one generation of a session's live state: Start
// begins it, fresh or re-created from a saved State, and it ends with Close
// or on its own (Done). Which inbound messages change the State a
// re-created session needs, and the messages that restore it, is one rule
// that every adapter shares: State.Fold and State.Restore (state.go).
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// ErrCapacity is wrapped by Start's error when the engine cannot host
// another session now; the transport answers 503.
var ErrCapacity = errors.New("engine: at capacity")

// ErrUnreachable is wrapped by Start's or Deliver's error when the server
// the engine fronts (a gateway's upstream) cannot be reached now, so the
// message was not handed over; the transport answers 503 with Retry-After
// and reason upstream_unreachable, and the client sends it again later.
var ErrUnreachable = errors.New("engine: server unreachable")

// ErrClosed is returned by Session.Deliver after the session ended.
var ErrClosed = errors.New("engine: session closed")

// Errors of Outbox.Send; test with errors.Is. An Outbox wraps one of them
// with the error that explains it.
var (
	// ErrSessionEnded: the session ended (DELETE, idle or capacity
	// eviction, superseded), or the store no longer knows it: the message
	// was not stored and no later one of this generation will be. The
	// engine session should end. It is no fault: a session may end while
	// its engine still produces messages.
	ErrSessionEnded = errors.New("engine: session ended")
	// ErrFenced: a newer generation of the session is owned elsewhere (a
	// takeover; DESIGN.md, "Generations"): the message was not stored and no
	// later one of this generation will be. The engine session should end.
	ErrFenced = errors.New("engine: generation fenced by a newer one")
	// ErrUnavailable: the store could not take the message now (connection
	// lost, disk full); it was not stored, or whether it was is unknown.
	// Later messages may be stored (retry); the Outbox's owner decides
	// whether the generation goes on (Tidemark's session layer ends it, so
	// that a client sees 409 rather than a gap).
	ErrUnavailable = errors.New("engine: store unavailable")
)

// Engine starts the live state of sessions.
type Engine interface {
	// Start begins generation info.Generation of session info.Token. When
	// info.State is nil the session is fresh and its first message will be
	// initialize; otherwise the engine re-creates the session from the State
	// so that requests work without a new initialize. Outbound messages go
	// to out. Start fails if the engine cannot host another session (the
	// error should wrap ErrCapacity) or cannot restore the State.
	Start(ctx context.Context, info Info, out Outbox) (Session, error)
}

// Hibernation is what an engine says becomes of a session's live state
// when the session hibernates: idle, with nothing in flight, it gives up
// its engine session, and the next request starts a new one from the
// saved State (DESIGN.md, "Hibernation").
type Hibernation int

const (
	// HibernateNever: the engine keeps its sessions' live state; they do
	// not hibernate. An engine that does not implement Hibernator says
	// this: a gateway's upstream session, for one, is not in the State.
	HibernateNever Hibernation = iota
	// HibernateExact: a session started from the State, with nothing in
	// flight, is the session that hibernated: the State holds all of its
	// state, so it wakes at the same generation and every cursor of that
	// generation still resumes.
	HibernateExact
	// HibernateLossy: the session may hibernate, but the State does not
	// hold all of its state (a subprocess's memory, handlers keeping
	// per-session data): it wakes at generation+1, as after a restart.
	HibernateLossy
)

// Hibernator is implemented by an engine whose sessions may hibernate.
type Hibernator interface {
	// Hibernation says what hibernating a session of this engine keeps.
	// It must not change once the engine has started a session.
	Hibernation() Hibernation
}

// Suspender is implemented by an engine session that holds something
// outside the process which can outlive its live state: a gateway's
// upstream session. When the session hibernates (DESIGN.md,
// "Hibernation"), the registry stores what Suspension returns in the
// record's State (State.Suspended); once that is stored it calls Keep,
// then Close, which lets go of everything the session holds in the process
// without ending what it keeps outside. The engine session a wake starts
// from that State reattaches to it. When the store refuses the State,
// Keep is not called, and Close ends everything as always.
type Suspender interface {
	// Suspension returns what a later engine session needs to reattach to
	// what this one holds outside the process, as JSON; nil when it holds
	// nothing worth keeping. It is called with nothing in flight.
	Suspension() json.RawMessage
	// Keep makes the next Close keep what Suspension described.
	Keep()
}

// Releaser is implemented by an engine whose sessions keep something
// outside the process across hibernation (Suspender). When a session
// ends while no process holds its live state (hibernated, then ended by
// its idle TTL or a DELETE), the registry hands Release what the session
// kept (State.Suspended), once the store has ended the record, and the
// engine ends it, as Close would have: a gateway's upstream session gets
// its DELETE. Release must not block.
type Releaser interface {
	Release(suspended json.RawMessage)
}

// HibernationOf returns what eng says of hibernation: HibernateNever when
// it does not implement Hibernator.
func HibernationOf(eng Engine) Hibernation {
	if h, ok := eng.(Hibernator); ok {
		return h.Hibernation()
	}
	return HibernateNever
}

// Info describes the session generation an engine starts.
type Info struct {
	Token      string
	Generation uint64
	State      *State // nil for a fresh session
	Logger     *slog.Logger
}

// Session is one generation of one session's live state inside an engine.
type Session interface {
	// Deliver hands an inbound message (request, notification or response)
	// to the engine. It must not block on the handling of the message.
	// For a request, req describes the HTTP request that carried it.
	Deliver(ctx context.Context, msg jsonrpc.Message, req Request) error
	// Close ends the session's live state. It is idempotent.
	Close() error
	// Done is closed when the live state has ended, by Close or on its own
	// (an engine whose state died answers no further message; the next
	// request re-creates the session at a new generation).
	Done() <-chan struct{}
}

// Outbox receives an engine session's outbound messages.
type Outbox interface {
	// Send emits msg. related is the ID of the inbound request msg belongs
	// to (responses: their own ID); the zero ID means none. Send returns
	// once msg is in the session's event log: a stream with no connection
	// attached is not an error (the client can resume it). An error means
	// msg was not stored. It wraps ErrSessionEnded when the session ended
	// and ErrFenced when a newer generation owns it: this generation is
	// over and the engine session should end. It wraps ErrUnavailable when
	// the store cannot take messages now. Other errors (msg cannot be
	// encoded, ctx ended) wrap none of them.
	Send(ctx context.Context, msg jsonrpc.Message, related jsonrpc.ID) error
}

// Request describes the HTTP request that carried an inbound message.
type Request struct {
	// Header is the HTTP request's header.
	Header http.Header
	// TokenInfo is the bearer token information that auth middleware put in
	// the request context (go-sdk auth.TokenInfoFromContext), or nil.
	TokenInfo *auth.TokenInfo
	// CloseStream, when non-nil, closes the SSE stream that carries the
	// responses to this request, telling the client to reconnect after
	// retry (SEP-1699). The client resumes with Last-Event-ID.
	CloseStream func(retry time.Duration)
}
