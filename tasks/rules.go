// rules.go holds the task status state machine (Rules.Apply) and the
// executor rule (Rules.Settle) (DESIGN.md, "Tasks: the executor rule").
// testdata/rules and testdata/settle list every case.

package tasks

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Errors of Rules.Apply. Each leaves the record as it was.
var (
	// ErrTerminal: an executor's write to a task that is settled; the
	// executor stops the call, since nothing it reports can be stored.
	ErrTerminal = errors.New("tasks: the task is settled")
	// ErrFenced: an executor's write under a generation that is not the
	// record's, or to a task no executor holds (input required); the
	// executor stops the call: the task changed hands.
	ErrFenced = errors.New("tasks: the executor no longer holds the task")
	// ErrInvalid: the event is malformed or makes no sense for the task
	// (the caller's bug); its error says what is wrong.
	ErrInvalid = errors.New("tasks: invalid event")
)

func invalid(what string) error { return fmt.Errorf("%w: %s", ErrInvalid, what) }

// Kind is what happened to a task. Progress, Renew, NeedInput, Complete,
// Fail and Stop come from the executor and carry its generation; Cancel
// and Answer come from a client, through any process.
type Kind uint8

const (
	// Progress: the executor reports a new status message.
	Progress Kind = iota + 1
	// Renew: the executor renews its lease (Event.LeaseUntil).
	Renew
	// NeedInput: the round ended with an input-required result
	// (Event.Requests by the engine's keys, Event.State).
	NeedInput
	// Complete: the call returned a result (Event.Result).
	Complete
	// Fail: the call ended with a JSON-RPC error (Event.Error).
	Fail
	// Stop: the executor stopped the call because cancel was requested.
	Stop
	// Cancel: tasks/cancel.
	Cancel
	// Answer: tasks/update (Event.Responses by task key).
	Answer
)

var kindNames = [...]string{
	Progress: "progress", Renew: "renew", NeedInput: "need-input", Complete: "complete",
	Fail: "fail", Stop: "stop", Cancel: "cancel", Answer: "answer",
}

// String returns the kind's lowercase name.
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind returns the kind whose name is s.
func ParseKind(s string) (Kind, bool) {
	for k, name := range kindNames {
		if name != "" && name == s {
			return Kind(k), true
		}
	}
	return 0, false
}

// fromExecutor reports whether k is written by the executor, under its
// generation.
func (k Kind) fromExecutor() bool { return k >= Progress && k <= Stop }

// Event is one thing that happened to a task. Only the fields of its Kind
// are read.
type Event struct {
	Kind Kind
	// Generation is the executor's generation (executor events).
	Generation uint64
	// Message is the new status message (Progress; optional for the
	// other executor events).
	Message string
	// LeaseUntil is the renewed lease's expiry (Renew).
	LeaseUntil time.Time
	// Result is the call's result (Complete) and Error its JSON-RPC error
	// object (Fail), as JSON.
	Result, Error []byte
	// Requests are the input requests of the round by the engine's keys
	// (NeedInput), and State the round's requestState.
	Requests map[string][]byte
	State    []byte
	// Responses are the client's answers by task key (Answer).
	Responses map[string][]byte
	// Claimant is the process that received the answer (Answer): it runs
	// the next round when the answer completes the round. Its Generation
	// is ignored.
	Claimant Executor
}

// Effect says what the caller does with the record Rules.Apply returns.
type Effect uint8

const (
	// Unchanged: nothing to store (a cancel of a settled task, a cancel
	// already requested, answers to no outstanding request).
	Unchanged Effect = iota
	// Changed: store the record, conditioned on the revision the caller
	// read it at (DESIGN.md, "Tasks: the executor rule").
	Changed
	// Execute: store the record, conditioned on the revision read; then
	// the claimant runs the call's next round as its executor.
	Execute
)

// String returns the effect's lowercase name.
func (e Effect) String() string {
	switch e {
	case Changed:
		return "changed"
	case Execute:
		return "execute"
	}
	return "unchanged"
}

// Rules are the task rules of one deployment.
type Rules struct {
	// Keep is how long a task stays readable at least after it settles:
	// a settle later than Created+TTL-Keep raises TTL (SEP-2663 lets ttlMs
	// change over a task's life). 0: TTL never grows.
	Keep time.Duration
	// Reruns is how many times a task of an idempotent tool may run again
	// after its executor was lost: the operator's choice. 0, the default,
	// never.
	Reruns int
}

// Apply returns the record after ev happened to rec at now, and what the
// caller does with it; or rec and an error when the event is refused
// (ErrTerminal, ErrFenced, ErrInvalid). The caller settles a record it
// read (Settle) before it applies an event to it, and stores the result
// conditioned on the revision it read, so that a generation checked here
// is the one the store replaces.
//
// The transitions (SEP-2663, "Task Status"): working goes to
// input_required (NeedInput; cancelled instead once cancel was requested)
// or to a terminal status (Complete, Fail, Stop); input_required goes back to working when the answers complete
// the round (Answer), or to cancelled (Cancel); a terminal status never
// changes: a Cancel or an Answer to it is accepted and changes nothing
// (tasks/cancel and tasks/update acknowledge it all the same, with the
// empty result: SEP-2663, "Task Cancellation" and "Task Update
// Requests"; only an unknown taskId is an error there), an executor's
// write is refused. The -32602 that the 2025-11-25 tasks require for a
// cancel of a terminal task (MCP 2025-11-25, basic/utilities/tasks,
// "Task Cancellation") is not this extension's rule, and that era never
// reaches these tasks (Gate).
func (r Rules) Apply(rec Record, ev Event, now time.Time) (Record, Effect, error) {
	if ev.Kind.fromExecutor() {
		return r.applyExecutor(rec, ev, now)
	}
	switch ev.Kind {
	case Cancel:
		switch {
		case rec.Status.Terminal():
			return rec, Unchanged, nil
		case rec.Status == InputRequired:
			// No executor runs the task: nothing to stop.
			rec.CancelRequested = true
			return r.settle(rec, Cancelled, NoCause, "cancelled by the client while waiting for input", now, true), Changed, nil
		case rec.CancelRequested:
			return rec, Unchanged, nil
		}
		rec.CancelRequested = true
		return rec, Changed, nil
	case Answer:
		if ev.Claimant.Replica == "" || ev.Claimant.Boot == "" {
			return rec, Unchanged, invalid("an answer needs its claimant's replica and boot")
		}
		if rec.Status != InputRequired {
			return rec, Unchanged, nil
		}
		slots := make(map[string]Slot, len(rec.Input.Slots))
		accepted := 0
		for k, s := range rec.Input.Slots {
			if resp, ok := ev.Responses[k]; ok && s.Response == nil && resp != nil {
				s.Response = resp
				accepted++
			}
			slots[k] = s
		}
		if accepted == 0 {
			return rec, Unchanged, nil
		}
		rec.Input.Slots = slots
		rec.Updated = now
		if len(rec.Outstanding()) > 0 {
			return rec, Changed, nil
		}
		// The round is complete: the claimant takes the task and runs the
		// next round with the answers.
		rec.Status = Working
		rec.Message = ""
		rec.Executor = Executor{
			Replica: ev.Claimant.Replica, Boot: ev.Claimant.Boot,
			LeaseUntil: ev.Claimant.LeaseUntil, Generation: rec.Executor.Generation + 1,
		}
		return rec, Execute, nil
	}
	return rec, Unchanged, invalid("unknown event kind " + ev.Kind.String())
}

// applyExecutor applies an event the executor wrote under its generation.
func (r Rules) applyExecutor(rec Record, ev Event, now time.Time) (Record, Effect, error) {
	switch {
	case rec.Status.Terminal():
		return rec, Unchanged, ErrTerminal
	case ev.Generation != rec.Executor.Generation || rec.Status != Working:
		return rec, Unchanged, ErrFenced
	}
	switch ev.Kind {
	case Progress:
		rec.Message = ev.Message
		rec.Updated = now
		return rec, Changed, nil
	case Renew:
		if ev.LeaseUntil.IsZero() {
			return rec, Unchanged, invalid("a renewal needs a lease expiry")
		}
		rec.Executor.LeaseUntil = ev.LeaseUntil
		return rec, Changed, nil
	case NeedInput:
		if len(ev.Requests) == 0 {
			return rec, Unchanged, invalid("an input round needs at least one request")
		}
		if rec.CancelRequested {
			// The round ended before the executor saw the cancel: the
			// task does not wait for input nobody will run.
			return r.settle(rec, Cancelled, NoCause, "cancelled by the client", now, false), Changed, nil
		}
		round := rec.Input.Round + 1
		slots := make(map[string]Slot, len(ev.Requests))
		for k, req := range ev.Requests {
			slots[strconv.Itoa(round)+"-"+k] = Slot{Key: k, Request: req}
		}
		rec.Input = Input{Round: round, Slots: slots, State: ev.State}
		rec.Status = InputRequired
		rec.Message = ev.Message
		rec.Updated = now
		return rec, Changed, nil
	case Complete:
		if ev.Result == nil {
			return rec, Unchanged, invalid("a completed call needs its result")
		}
		// A cancel that came too late does not undo the work: the task
		// reports what the call did (SEP-2663, "Task Cancellation").
		rec.Result = ev.Result
		return r.settle(rec, Completed, NoCause, ev.Message, now, false), Changed, nil
	case Fail:
		if ev.Error == nil {
			return rec, Unchanged, invalid("a failed call needs its JSON-RPC error")
		}
		rec.Error = ev.Error
		return r.settle(rec, Failed, NoCause, ev.Message, now, false), Changed, nil
	case Stop:
		if !rec.CancelRequested {
			return rec, Unchanged, invalid("an executor stops a call only when cancel was requested")
		}
		msg := ev.Message
		if msg == "" {
			msg = "cancelled by the client"
		}
		return r.settle(rec, Cancelled, NoCause, msg, now, false), Changed, nil
	}
	return rec, Unchanged, invalid("unknown event kind " + ev.Kind.String())
}

// settle returns rec settled to status at now. takeover raises the
// generation: the task is settled by a process other than its executor,
// whose later writes the store must refuse. The TTL grows so the settled
// task stays readable at least Keep.
func (r Rules) settle(rec Record, status Status, cause Cause, msg string, now time.Time, takeover bool) Record {
	rec.Status = status
	rec.Cause = cause
	rec.Message = msg
	rec.Updated = now
	rec.Input = Input{Round: rec.Input.Round}
	if takeover {
		rec.Executor.Generation++
	}
	if keep := now.Sub(rec.Created) + r.Keep; keep > rec.TTL {
		rec.TTL = keep
	}
	return rec
}

// Reader is the process that reads a task record and settles it.
type Reader struct {
	// Replica and Boot name the reading process (Executor's fields).
	Replica, Boot string
	// Exclusive reports that the store admits one process at a time (the
	// memory store, the durable store's directory lock): a record another
	// process wrote belongs to a process that has ended.
	Exclusive bool
	// Runs reports that the reader runs the task itself now (it holds the
	// call in its table of running tasks).
	Runs bool
	// Lease is the lease the reader takes on a task it claims (a re-run or
	// a re-attach): LeaseUntil = now+Lease; 0 for a process without leases.
	Lease time.Duration
}

// Verdict is what Rules.Settle decided about a record.
type Verdict uint8

const (
	// Keep: the record stands as it is.
	Keep Verdict = iota
	// SettleLost: the executor is gone; the task is settled failed, cause
	// ExecutorLost, at generation+1. Store it conditioned on the
	// revision read.
	SettleLost
	// Rerun: the executor is gone and the call may run again (an
	// idempotent tool, re-runs allowed and left, no cancel requested);
	// the reader has claimed it at generation+1. Store it conditioned on
	// the revision read, then run the call's current round.
	Rerun
	// Reattach: the executor is gone while it watched the upstream's own
	// task; the reader has claimed it at generation+1. Store it
	// conditioned on the revision read, then watch the upstream task
	// again, forwarding a cancel the record holds (the call is not sent
	// again).
	Reattach
	// SettleExpired: the task's time to live ended before it settled; it
	// is settled failed, cause Expired, at generation+1. Store it
	// conditioned on the revision read; its executor, if any, stops.
	SettleExpired
	// Delete: the task's time to live ended and it is settled: remove it.
	Delete
)

// String returns the verdict's lowercase name.
func (v Verdict) String() string {
	switch v {
	case SettleLost:
		return "settle-lost"
	case Rerun:
		return "rerun"
	case Reattach:
		return "reattach"
	case SettleExpired:
		return "settle-expired"
	case Delete:
		return "delete"
	}
	return "keep"
}

// Settle applies the executor rule and the time to live to rec, read by
// rd at now, and returns the record as it must now be and the verdict.
// Checked in this order:
//
//  1. Past its expiry (now ≥ Created+TTL): a settled task is deleted; any
//     other is settled failed, cause Expired.
//  2. A settled task stands: settled once, it never changes.
//  3. An input_required task stands: no executor runs it.
//  4. A working task whose executor lives stands (Alive).
//  5. Otherwise its executor is lost: the reader re-attaches to the
//     upstream's task if the call runs as one; else it runs the call again
//     if the tool is idempotent, re-runs are allowed and left, and no
//     cancel was requested; else the task is settled failed, cause
//     ExecutorLost.
func (r Rules) Settle(rec Record, now time.Time, rd Reader) (Record, Verdict) {
	if !now.Before(rec.Expires()) {
		if rec.Status.Terminal() {
			return rec, Delete
		}
		return r.settle(rec, Failed, Expired, "the task's time to live ended before it finished", now, true), SettleExpired
	}
	if rec.Status != Working || Alive(rec, now, rd) {
		return rec, Keep
	}
	claimed := Executor{Replica: rd.Replica, Boot: rd.Boot, Generation: rec.Executor.Generation + 1}
	if rd.Lease > 0 {
		claimed.LeaseUntil = now.Add(rd.Lease)
	}
	switch {
	case rec.Upstream != "":
		rec.Executor = claimed
		rec.Message = "watching the upstream task again after its executor was lost"
		rec.Updated = now
		return rec, Reattach
	case rec.Idempotent && rec.Reruns < r.Reruns && !rec.CancelRequested:
		rec.Executor = claimed
		rec.Reruns++
		rec.Message = fmt.Sprintf("running again after its executor was lost (re-run %d of %d)", rec.Reruns, r.Reruns)
		rec.Updated = now
		return rec, Rerun
	}
	return r.settle(rec, Failed, ExecutorLost,
		"the task's executor was lost (replica "+rec.Executor.Replica+"): the tool may or may not have taken effect; check before calling it again",
		now, true), SettleLost
}

// Alive reports whether the executor of working task rec lives, as rd
// knows at now:
//
//   - rd is the executor's process (same Boot): alive exactly while rd
//     runs the task;
//   - rd is another process and the store admits one process at a time:
//     the executor's process has ended;
//   - rd is another process of the executor's replica (same Replica,
//     another Boot): the replica restarted, since two live processes never
//     share a replica ID;
//   - otherwise the lease decides: alive until LeaseUntil, exclusive (a
//     lease lapses exactly at its expiry); a record without a lease read
//     by another process of a shared store has no executor that can be
//     waited for.
func Alive(rec Record, now time.Time, rd Reader) bool {
	ex := rec.Executor
	switch {
	case ex.Boot == rd.Boot:
		return rd.Runs
	case rd.Exclusive, ex.Replica == rd.Replica, ex.LeaseUntil.IsZero():
		return false
	}
	return now.Before(ex.LeaseUntil)
}
