// Package metrics holds the interfaces through which Tidemark's layers
// record what happens to sessions, streams, event logs, stores and gateway
// subprocesses, at the place where it happens: no package-level registry;
// each layer is given a recorder (DESIGN.md, "Layers").
//
// Each layer takes the small interface of its own events (Transport,
// Sessions, Log, Store, Processes, Tasks); Recorder is all of them, which an
// implementation such as metrics/prom provides. Discard records nothing
// and is what a layer uses when given nil: its methods are empty, so an
// unobserved layer pays one indirect call per event.
//
// Labels are bounded by construction: a reason is a word of the catalogue
// in replay/reason.go (replay.Reason), a method name outside the MCP
// specification's is recorded as Other (see Method), and no method takes
// a session token, a cursor, a tool name or any other value a client
// chooses freely.
package metrics

import (
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
)

// Recorder records every event of every layer.
type Recorder interface {
	Transport
	Sessions
	Log
	Store
	Processes
	Tasks
}

// Transport records what the HTTP transport decides and serves.
type Transport interface {
	// Refused records one refusal by the reason of its JSON-RPC error
	// body, whose HTTP status is reason.Status() (the catalogue,
	// replay/reason.go).
	Refused(reason replay.Reason)
	// Resumed records one GET with Last-Event-ID answered by this
	// process: replay.ReasonReplay when the replay decision accepted it,
	// else the reason it was refused with (which Refused records too).
	Resumed(reason replay.Reason)
	// StreamOpened records an SSE stream starting to write to a
	// connection; StreamClosed, the same stream's connection ending.
	StreamOpened(kind StreamKind)
	StreamClosed(kind StreamKind)
	// Replayed records one accepted resume's replay: n events of its
	// stream up to the high-water mark the resume found, written in d,
	// from the decision until the reader passed that mark.
	Replayed(n int, d time.Duration)
	Operations
}

// Operations records the JSON-RPC messages served: the transport records
// notifications, the session registry the requests it answers.
type Operations interface {
	// Operation records one JSON-RPC request or notification served,
	// from its arrival to its response (or, for a notification, its
	// acceptance): method as Method bounds it, errorType "" when it
	// succeeded, else ErrorType's value or ErrorTool (OpenTelemetry MCP
	// semantic conventions, mcp.server.operation.duration).
	Operation(method, errorType string, d time.Duration)
}

// Sessions records what the session registry does.
type Sessions interface {
	// SessionStarted records a session created at generation 1 in this
	// process; SessionEnded, a session ending (evicted, deleted,
	// superseded, shut down, or its initialize failed) after lived, with
	// the reason its tombstone keeps (mcp.server.session.duration).
	SessionStarted()
	SessionEnded(reason replay.Reason, lived time.Duration)
	// GenerationCreated records a session's live state re-created at
	// generation+1, and why: replay.ReasonOwnerGone (restart),
	// ReasonLeaseExpired (takeover), ReasonEngineEnded (the engine
	// session ended, a gateway's subprocess exited),
	// ReasonGenerationLost (this process ended the generation, whose
	// events were not stored), ReasonHibernated.
	GenerationCreated(cause replay.Reason)
	// SessionHibernated records a session hibernated (DESIGN.md,
	// "Hibernation"); SessionWoke, one woken by a request, at the same
	// generation (sameGeneration) or at generation+1.
	SessionHibernated()
	SessionWoke(sameGeneration bool)
	Operations
}

// Log records what the event log appends and trims.
type Log interface {
	// Appended records n events appended to session logs.
	Appended(n int)
	// Trimmed records retention removing n events from one session's
	// log, raising its replay floor once.
	Trimmed(n int)
}

// Store records the calls a backend serves.
type Store interface {
	// StoreOperation records one call of backend store (StoreMemory,
	// StoreDurable, StoreRedis) for operation op (the Op constants)
	// that took d; failed says it returned an error other than the
	// answers the contract defines (not found, ended, exists, fenced).
	StoreOperation(store, op string, d time.Duration, failed bool)
	// Fenced records a store write refused because it carried a
	// generation the record has moved past; op is the store operation.
	Fenced(op string)
	// StoreOpened records that backend store (StoreMemory, StoreDurable,
	// StoreRedis) serves this process's calls, before the first of them:
	// a recorder that exports counts shows that store's failures per
	// operation at zero from then on, so that a rate or an increase over
	// them counts the first failure (a series that appears already at 1
	// shows no increase).
	StoreOpened(store string)
}

// Processes records the gateway's subprocesses.
type Processes interface {
	// ProcessStarted records a subprocess started; ProcessExited, one
	// that exited, and why: replay.ReasonClosed when its session ended
	// it, ReasonFenced, ReasonInitializeTimeout, ReasonServerExited when
	// it exited on its own.
	ProcessStarted()
	ProcessExited(reason replay.Reason)
}

// Tasks records what happens to tasks of the Tasks extension (DESIGN.md,
// "Tasks: the executor rule") in this process.
type Tasks interface {
	// TaskCreated records a task created here, running here.
	TaskCreated()
	// TaskSettled records a task this process stored as terminal: status
	// is its word ("completed", "failed", "cancelled"); reason is why
	// Tidemark settled it (replay.ReasonExecutorLost, ReasonTaskExpired,
	// ...), or "" when the call's own outcome settled it; lived is the
	// time from its creation.
	TaskSettled(status string, reason replay.Reason, lived time.Duration)
	// TaskCancelRequested records a tasks/cancel that asked a working or
	// input_required task to stop.
	TaskCancelRequested()
	// TaskRerun records a call run again after its executor was lost.
	TaskRerun()
	// TaskRunning records a round of a task starting (+1) or ending (-1)
	// in this process.
	TaskRunning(delta int)
}

// StreamKind is the kind of an SSE stream, a label value.
type StreamKind string

// Stream kinds (DESIGN.md, "Vocabulary").
const (
	// StreamPost is the response stream of a POST.
	StreamPost StreamKind = "post"
	// StreamStandalone is the standalone GET stream, opened without
	// Last-Event-ID.
	StreamStandalone StreamKind = "standalone"
	// StreamResumed is a stream resumed by a GET with Last-Event-ID.
	StreamResumed StreamKind = "resumed"
	// StreamListen is a subscriptions/listen stream of the sessionless
	// revision (MCP 2026-07-28), from its POST's arrival to its end.
	StreamListen StreamKind = "listen"
)

// Store backends, the values of StoreOperation's store.
const (
	StoreMemory  = "memory"
	StoreDurable = "durable"
	StoreRedis   = "redis"
)

// Store operations, the values of StoreOperation's and Fenced's op: the
// methods of store.Sessions and store.Log.
const (
	OpCreate    = "create"
	OpGet       = "get"
	OpClaim     = "claim"
	OpRenew     = "renew"
	OpSaveState = "save_state"
	OpHibernate = "hibernate"
	OpWake      = "wake"
	OpTouch     = "touch"
	OpEnd       = "end"
	OpAppend    = "append"
	OpRead      = "read"
	OpTrim      = "trim"
	OpBounds    = "bounds"
	OpSync      = "sync"
)

// Ops returns every store operation, the values of StoreOperation's and
// Fenced's op, in the order the constants are declared.
func Ops() []string {
	return []string{OpCreate, OpGet, OpClaim, OpRenew, OpSaveState, OpHibernate, OpWake, OpTouch,
		OpEnd, OpAppend, OpRead, OpTrim, OpBounds, OpSync}
}

// Discard is a Recorder that records nothing.
var Discard Recorder = discard{}

type discard struct{}

func (discard) Refused(replay.Reason)                              {}
func (discard) Resumed(replay.Reason)                              {}
func (discard) StreamOpened(StreamKind)                            {}
func (discard) StreamClosed(StreamKind)                            {}
func (discard) Operation(string, string, time.Duration)            {}
func (discard) SessionStarted()                                    {}
func (discard) SessionEnded(replay.Reason, time.Duration)          {}
func (discard) GenerationCreated(replay.Reason)                    {}
func (discard) SessionHibernated()                                 {}
func (discard) SessionWoke(bool)                                   {}
func (discard) Fenced(string)                                      {}
func (discard) StoreOpened(string)                                 {}
func (discard) Appended(int)                                       {}
func (discard) Replayed(int, time.Duration)                        {}
func (discard) Trimmed(int)                                        {}
func (discard) StoreOperation(string, string, time.Duration, bool) {}
func (discard) ProcessStarted()                                    {}
func (discard) ProcessExited(replay.Reason)                        {}
func (discard) TaskCreated()                                       {}
func (discard) TaskSettled(string, replay.Reason, time.Duration)   {}
func (discard) TaskCancelRequested()                               {}
func (discard) TaskRerun()                                         {}
func (discard) TaskRunning(int)                                    {}
