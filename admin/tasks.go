// The task inspector's answers: what /debug/tasks and /debug/tasks/{task
// ID prefix} return as JSON, and tidemark inspect --tasks prints
// (DESIGN.md, "Tasks: the executor rule").

package admin

import (
	"context"
	"time"
)

// TaskInspector answers the task inspector about the tasks this process
// runs, and those it ran that settled while their records are kept. A
// task ID is a bearer handle: no answer carries a whole one.
type TaskInspector interface {
	// RunningTasks returns the tasks this process runs, the longest
	// running first.
	RunningTasks() []Task
	// SettledTasks returns the tasks whose last round this process ran
	// and that settled, while their records are kept (until createdAt +
	// ttlMs), the most recently settled first.
	SettledTasks() []Task
	// LookupTasks returns the stored state of every task this process
	// runs, or ran and settled while its record is kept, whose ID starts
	// with prefix. A task of another process is not looked up: not every
	// store can be searched by ID prefix. It fails when the store cannot
	// be read.
	LookupTasks(ctx context.Context, prefix string) ([]TaskDetail, error)
}

// TaskList is the answer of /debug/tasks.
type TaskList struct {
	// Count is the number of tasks this process runs.
	Count int `json:"count"`
	// Settled is the number of tasks this process ran that settled and
	// whose records are kept.
	Settled int `json:"settled"`
	// Tasks are the tasks this process runs, the longest running first,
	// then the settled ones, the most recently settled first.
	Tasks []Task `json:"tasks"`
}

// TaskDetails is the answer of /debug/tasks/{task ID prefix}.
type TaskDetails struct {
	Tasks []TaskDetail `json:"tasks"`
}

// Task is one task in /debug/tasks: what this process knows of a round it
// runs, or ran to the task's settle, without reading the store.
type Task struct {
	// Task is the task ID's first 8 characters (never the whole ID).
	Task string `json:"task"`
	// Tool is the name of the tool the task calls.
	Tool string `json:"tool"`
	// Generation is the executor generation the round runs at (the
	// task's fencing token).
	Generation uint64 `json:"generation"`
	// Status is the task's status: working while this process runs it;
	// completed, failed or cancelled once it settled, which never changes
	// again.
	Status string `json:"status"`
	// Started is when this process started the round.
	Started time.Time `json:"started"`
	// Settled is when the task settled (its lastUpdatedAt); absent while
	// it runs.
	Settled *time.Time `json:"settled,omitempty"`
	// LeaseExpiry is when this process's lease on the task lapses unless
	// renewed, as it last stored it; absent without leases (the claim
	// lasts as long as the process).
	LeaseExpiry *time.Time `json:"lease_expiry,omitempty"`
	// CancelRequested reports that a tasks/cancel reached the round's
	// call, or, once the task settled, that one asked it to stop before
	// (as a cancel of a task waiting for input does, which settles it
	// cancelled with no round running).
	CancelRequested bool `json:"cancel_requested"`
}

// TaskDetail is one task in /debug/tasks/{task ID prefix}: its record as
// the store holds it, beside what this process knows of the round.
type TaskDetail struct {
	// Task is the task ID's first 8 characters (never the whole ID).
	Task string `json:"task"`
	// Tool is the name of the tool the task calls.
	Tool string `json:"tool"`
	// Generation is the record's executor generation; it differs from
	// RoundGeneration once the task changed hands.
	Generation uint64 `json:"generation"`
	// Status and StatusMessage are the record's status and statusMessage.
	Status        string `json:"status"`
	StatusMessage string `json:"status_message,omitempty"`
	// Reason says why Tidemark settled the task (executor_lost,
	// task_expired); absent when it did not.
	Reason string `json:"reason,omitempty"`
	// Executor is the replica the record names as the task's executor,
	// and LeaseExpiry when its lease lapses unless renewed (absent without
	// leases).
	Executor    string     `json:"executor"`
	LeaseExpiry *time.Time `json:"lease_expiry,omitempty"`
	// Created and Updated are the task's createdAt and lastUpdatedAt;
	// Expires is when the record is deleted (createdAt + ttlMs).
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	Expires time.Time `json:"expires"`
	// CancelRequested reports that a tasks/cancel asked the task to stop.
	CancelRequested bool `json:"cancel_requested"`
	// InputRequests is the number of input requests not answered yet.
	InputRequests int `json:"input_requests"`
	// Idempotent reports that the tool declared itself idempotent; Reruns
	// counts the times the call ran again after its executor was lost.
	Idempotent bool `json:"idempotent"`
	Reruns     int  `json:"reruns"`
	// RoundGeneration and RoundStarted are the generation and start of
	// the round this process runs.
	RoundGeneration uint64    `json:"round_generation"`
	RoundStarted    time.Time `json:"round_started"`
}
