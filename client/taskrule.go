// taskrule.go holds the rule a TaskTransport follows after each answer
// that shows a task (a CreateTaskResult, or tasks/get's answer), as a pure
// function: poll again and when, deliver the result, fail the call with
// the task's error, report the cancel, or ask the SDK for input.
// testdata/taskrule tables it.

package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/tasks"
)

// Bounds of the wait between two polls of a task: the server's
// pollIntervalMs clamped to [MinPollInterval, MaxPollInterval], and
// DefaultPollInterval while the server has sent none (DESIGN.md, "Tasks:
// the executor rule").
const (
	MinPollInterval     = 50 * time.Millisecond
	MaxPollInterval     = 30 * time.Second
	DefaultPollInterval = time.Second
)

// taskDo is what the transport does after a task answer.
type taskDo int

const (
	// doPoll: send tasks/get again after taskStep.wait.
	doPoll taskDo = iota + 1
	// doComplete: the call's answer is taskStep.result.
	doComplete
	// doFail: the call fails with taskStep.err, the task's JSON-RPC error
	// as the server sent it.
	doFail
	// doCancelled: the call fails with ErrTaskCancelled.
	doCancelled
	// doAsk: the SDK answers taskStep.inputs (input_required), then
	// tasks/update sends the answers.
	doAsk
)

var taskDoNames = [...]string{doPoll: "poll", doComplete: "complete", doFail: "fail", doCancelled: "cancelled", doAsk: "ask"}

func (d taskDo) String() string {
	if d > 0 && int(d) < len(taskDoNames) {
		return taskDoNames[d]
	}
	return fmt.Sprintf("taskDo(%d)", int(d))
}

// taskStep is the decision of readTask.
type taskStep struct {
	do taskDo
	// id and status are the task's taskId and status; message its
	// statusMessage ("" when absent).
	id, status, message string
	// wait is the poll interval from now on: pollIntervalMs clamped, or
	// the previous one when the answer has none.
	wait time.Duration
	// result is the CallToolResult of a completed task, as sent.
	result json.RawMessage
	// err is the JSON-RPC error of a failed task, as sent.
	err *jsonrpc.Error
	// inputs is the inputRequests object of an input_required task, as
	// sent.
	inputs json.RawMessage
}

// errTaskAnswer is the cause of a task answer readTask cannot follow.
var errTaskAnswer = errors.New("client: the server's task answer does not follow the Tasks extension")

// readTask decides what follows a task answer, result (the JSON result of
// a CreateTaskResult or of tasks/get; SEP-2663, "Task", "DetailedTask"),
// with prev the poll interval so far. The rules: the interval becomes
// pollIntervalMs (integer milliseconds) clamped to [MinPollInterval,
// MaxPollInterval] when the answer has a positive one, else stays prev;
// working polls again; input_required asks for its inputRequests (polls
// again when it lists none); completed delivers result; failed fails with
// error (code, message, data as sent); cancelled fails the call. An
// answer without taskId or a known status, a completed one without a
// result and a failed one without an error are protocol errors, which
// fail the call.
func readTask(result json.RawMessage, prev time.Duration) (taskStep, error) {
	var t struct {
		TaskID         string          `json:"taskId"`
		Status         string          `json:"status"`
		StatusMessage  string          `json:"statusMessage"`
		PollIntervalMs *float64        `json:"pollIntervalMs"`
		Result         json.RawMessage `json:"result"`
		Error          json.RawMessage `json:"error"`
		InputRequests  json.RawMessage `json:"inputRequests"`
	}
	if err := json.Unmarshal(result, &t); err != nil {
		return taskStep{}, fmt.Errorf("%w: the result is not a task object", errTaskAnswer)
	}
	s := taskStep{id: t.TaskID, status: t.Status, message: t.StatusMessage, wait: prev}
	if s.wait <= 0 {
		s.wait = DefaultPollInterval
	}
	if p := t.PollIntervalMs; p != nil && *p > 0 {
		s.wait = min(max(time.Duration(*p*float64(time.Millisecond)), MinPollInterval), MaxPollInterval)
	}
	if t.TaskID == "" {
		return s, fmt.Errorf("%w: no taskId", errTaskAnswer)
	}
	status, ok := tasks.ParseStatus(t.Status)
	if !ok {
		return s, fmt.Errorf("%w: status %q", errTaskAnswer, t.Status)
	}
	switch status {
	case tasks.Working:
		s.do = doPoll
	case tasks.InputRequired:
		s.do = doPoll
		var reqs map[string]json.RawMessage
		if json.Unmarshal(t.InputRequests, &reqs) == nil && len(reqs) > 0 {
			s.do, s.inputs = doAsk, t.InputRequests
		}
	case tasks.Completed:
		if len(t.Result) == 0 || string(t.Result) == "null" {
			return s, fmt.Errorf("%w: a completed task without its result", errTaskAnswer)
		}
		s.do, s.result = doComplete, t.Result
	case tasks.Failed:
		var e jsonrpc.Error
		if len(t.Error) == 0 || json.Unmarshal(t.Error, &e) != nil || e.Code == 0 {
			return s, fmt.Errorf("%w: a failed task without a JSON-RPC error", errTaskAnswer)
		}
		s.do, s.err = doFail, &e
	case tasks.Cancelled:
		s.do = doCancelled
	}
	return s, nil
}
