// Package tasks holds what Tidemark keeps of a task of the MCP Tasks
// extension (io.modelcontextprotocol/tasks, SEP-2663; protocol 2026-07-28)
// and the rules that move it: the status state machine, the executor rule
// and which requests take part in tasks (DESIGN.md, "Tasks: the executor
// rule").
//
// The rule is the generation rule applied to work instead of events: a
// task's state is valid only for the executor that produced it. A task
// whose executor is gone says so (it settles failed, cause ExecutorLost),
// is never run again silently, and never stays working.
//
// Everything here is pure: no I/O and no clock. Time is a parameter, and
// the callers (the stores, the transport) read and write records and carry
// out what the rules decide. The package imports nothing of the project.
// It names why Tidemark settled a task with a Cause; the layer that renders
// a task or logs a settle maps each Cause to its word of the reason
// catalogue (DESIGN.md, "Reasons").
package tasks

import (
	"errors"
	"sort"
	"time"
)

// Status is the status of a task (SEP-2663, "Task Status"). The zero value
// is no status: a Record always has one of the five below.
type Status uint8

const (
	// Working: the call is being processed by the record's executor.
	Working Status = iota + 1
	// InputRequired: the last round of the call ended asking the client
	// for input (Record.Input); no executor runs the task until the
	// answers are complete.
	InputRequired
	// Completed: the call returned a result (Record.Result), including a
	// tool result with isError true.
	Completed
	// Failed: the call ended with a JSON-RPC error (Record.Error), or
	// Tidemark settled it (Record.Cause).
	Failed
	// Cancelled: the call was stopped, or never resumed, because the
	// client cancelled the task.
	Cancelled
)

// String returns the status's word on the wire ("working",
// "input_required", "completed", "failed", "cancelled"), or "" for the
// zero value.
func (s Status) String() string {
	switch s {
	case Working:
		return "working"
	case InputRequired:
		return "input_required"
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	}
	return ""
}

// Terminal reports whether s is completed, failed or cancelled: a task in
// one of them never changes again (SEP-2663, "Task Status").
func (s Status) Terminal() bool { return s == Completed || s == Failed || s == Cancelled }

// ParseStatus returns the status whose wire word is w.
func ParseStatus(w string) (Status, bool) {
	for s := Working; s <= Cancelled; s++ {
		if s.String() == w {
			return s, true
		}
	}
	return 0, false
}

// Cause says why Tidemark, not the call, settled a task. The call's own
// outcomes (a result, a JSON-RPC error, a cancel the executor honoured)
// have none.
type Cause uint8

const (
	// NoCause: the task is not settled, or the call settled it.
	NoCause Cause = iota
	// ExecutorLost: the task was working and its executor is gone (its
	// process ended, or its lease lapsed); the call may or may not have
	// taken effect, and it is not run again.
	ExecutorLost
	// Expired: the task was not terminal when its time to live ended.
	Expired
)

// String returns the constant's name (the catalogue word is the caller's
// to give; see the package comment).
func (c Cause) String() string {
	switch c {
	case ExecutorLost:
		return "ExecutorLost"
	case Expired:
		return "Expired"
	}
	return "NoCause"
}

// Executor names the process that runs a working task, and the generation
// under which it runs it.
type Executor struct {
	// Replica is the replica ID (--replica-id) of the process; without a
	// fleet, the process's own name.
	Replica string
	// Boot is the ID of the process, new at every start: a replica that
	// restarts with the same Replica has another Boot.
	Boot string
	// LeaseUntil is when the executor's claim lapses unless renewed; the
	// zero time for a process without leases (one process on a memory or
	// durable store).
	LeaseUntil time.Time
	// Generation is the task's fencing token: 1 at creation, raised by one
	// each time the task changes hands (see Rules.Settle and Rules.Apply).
	// Every write of an executor carries it, and is refused once the
	// record's differs.
	Generation uint64
}

// Slot is one request of an input round and its answer.
type Slot struct {
	// Key is the request's key in the engine's own input-required result,
	// under which its answer goes back to the engine.
	Key string
	// Request is the server-to-client request (JSON: method and params),
	// as tasks/get shows it under its task key.
	Request []byte
	// Response is the client's answer (JSON), nil while outstanding.
	Response []byte
}

// Input is the input state of a task: the requests of its latest round,
// by task key, and what the engine needs to run the next round.
type Input struct {
	// Round counts the input rounds of the task; the keys of round n all
	// start with n and a hyphen, so no key is used twice in a task's life
	// (SEP-2663, "Task Update Requests").
	Round int
	// Slots holds the requests of round Round by task key.
	Slots map[string]Slot
	// State is the engine's requestState of the round (opaque, sealed by
	// the engine), handed back with the answers; never shown on the task.
	State []byte
}

// Record is what a store keeps of one task (DESIGN.md, "Tasks: the
// executor rule").
type Record struct {
	// ID is the task ID (taskId): a bearer handle, unguessable.
	ID string
	// Owner is the subject that created the task (the authenticated user
	// ID, or "" without authentication); only it sees the task.
	Owner string
	// Tool is the name of the tool the call invoked.
	Tool string
	// Call is the call's params (JSON, without _meta), which each round,
	// re-run or re-attach delivers again.
	Call []byte
	// Idempotent records that the tool declared idempotentHint true when
	// the task was created.
	Idempotent bool
	// Upstream is the task ID the upstream server gave the call when the
	// upstream runs it as a task of its own; "" otherwise.
	Upstream string
	// Status and Message are the task's status and statusMessage.
	Status  Status
	Message string
	// Cause says why Tidemark settled the task, if it did.
	Cause Cause
	// Executor names the process that runs the task while it is working.
	Executor Executor
	// Created and Updated are createdAt and lastUpdatedAt.
	Created, Updated time.Time
	// TTL is ttlMs: the task is kept until Created+TTL, then deleted. It
	// grows when the task settles late (Rules.Keep).
	TTL time.Duration
	// PollInterval is pollIntervalMs, the polling interval the server
	// suggests.
	PollInterval time.Duration
	// CancelRequested records a tasks/cancel the executor has to honour.
	CancelRequested bool
	// Result is the call's result (JSON) once Completed.
	Result []byte
	// Error is the call's JSON-RPC error object (JSON) once Failed by the
	// call; nil when Tidemark settled the task (Cause).
	Error []byte
	// Input is the input state while InputRequired, and the answers of
	// the round being run while Working after one.
	Input Input
	// Reruns counts the times the call ran again after its executor was
	// lost.
	Reruns int
}

// Expires returns when the task's time to live ends: Created+TTL. A
// reader then settles it (Rules.Settle): a settled task is deleted, any
// other is settled failed, cause Expired, and stays readable Rules.Keep.
func (r Record) Expires() time.Time { return r.Created.Add(r.TTL) }

// Linger is how long a store keeps a record past its expiry. A task that
// expires unsettled must be read once more, by a reader or a sweep, to be
// settled failed (cause Expired) and its call cancelled; a store that
// dropped it at its expiry would make it vanish instead (-32602 where
// failed, task_expired is due). One minute covers many sweeps.
const Linger = time.Minute

// KeepUntil returns when a store may drop the record: Expires()+Linger.
// What a record past its expiry shows is the readers' to decide
// (Rules.Settle), never the store's.
func (r Record) KeepUntil() time.Time { return r.Expires().Add(Linger) }

// VisibleTo reports whether subject may see the task: only its owner does;
// to anyone else it is unknown, as an ID never issued (SEP-2663, "Security
// Implications": auth binding).
func (r Record) VisibleTo(subject string) bool { return r.Owner == subject }

// Outstanding returns the task keys of the requests not answered yet, in
// order: what tasks/get shows in inputRequests.
func (r Record) Outstanding() []string {
	var keys []string
	for k, s := range r.Input.Slots {
		if s.Response == nil {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// Spec is what a new task is made of.
type Spec struct {
	ID, Owner, Tool string
	Call            []byte
	Idempotent      bool
	// Executor is the process that creates the task and runs it; its
	// Generation is ignored (a new task is at generation 1).
	Executor Executor
	// Now is the creation time.
	Now time.Time
	// TTL and PollInterval are the task's ttlMs and pollIntervalMs, both
	// positive: Tidemark always bounds a task's life.
	TTL, PollInterval time.Duration
}

// New returns the record of a new working task at generation 1, or an
// error naming what is missing from s.
func New(s Spec) (Record, error) {
	switch {
	case s.ID == "":
		return Record{}, specError("a task needs an ID")
	case s.Tool == "":
		return Record{}, specError("a task needs a tool")
	case s.Executor.Replica == "" || s.Executor.Boot == "":
		return Record{}, specError("a task needs an executor's replica and boot")
	case s.TTL <= 0:
		return Record{}, specError("a task needs a positive time to live")
	case s.PollInterval <= 0:
		return Record{}, specError("a task needs a positive poll interval")
	}
	ex := s.Executor
	ex.Generation = 1
	return Record{
		ID: s.ID, Owner: s.Owner, Tool: s.Tool, Call: s.Call, Idempotent: s.Idempotent,
		Status: Working, Executor: ex,
		Created: s.Now, Updated: s.Now,
		TTL: s.TTL, PollInterval: s.PollInterval,
	}, nil
}

func specError(what string) error { return errors.New("tasks: " + what) }
