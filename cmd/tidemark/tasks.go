package main

// The Tasks extension of `tidemark serve` (io.modelcontextprotocol/tasks,
// protocol 2026-07-28; DESIGN.md, "Tasks: the executor rule"): which tools
// run as tasks, and the tasks' time to live, poll interval, re-runs and
// bound. The demo's countdown runs as a task for a request that declares
// the extension; a gateway's tools do when --task-tools or
// --task-required names them.

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// taskConfig holds the task flags of `tidemark serve`.
type taskConfig struct {
	ttl      time.Duration
	poll     time.Duration
	reruns   int
	max      int
	tools    string // --task-tools: NAME,... or all
	required string // --task-required: NAME,...
}

// taskFlags declares the task flags on fs.
func taskFlags(fs *flag.FlagSet, c *taskConfig) {
	fs.DurationVar(&c.ttl, "task-ttl", taskrun.DefaultTTL, "time to live of a task (ttlMs): a task not settled by then is settled failed with reason task_expired; at most 1h (duration)")
	fs.DurationVar(&c.poll, "task-poll", taskrun.DefaultPoll, "the poll interval tasks suggest to clients (pollIntervalMs) (duration)")
	fs.IntVar(&c.reruns, "task-rerun", 0, "how many times a task of a tool annotated idempotentHint may run again after its executor was lost; 0: never, the task is settled failed with reason executor_lost (runs)")
	fs.IntVar(&c.max, "task-max", taskrun.DefaultMax, "most tasks this process runs at once; beyond it an optional tool answers at once and a required one gets 503 capacity (tasks)")
	fs.StringVar(&c.tools, "task-tools", "", "gateway mode: tools that run as tasks for a request that declares the Tasks extension, and at once for any other: NAME,... or all (empty: none)")
	fs.StringVar(&c.required, "task-required", "", "gateway mode: tools that run only as tasks; a request that does not declare the Tasks extension is refused with -32021 (NAME,...; empty: none)")
}

// check validates the task flags. --task-tools and --task-required are
// refused without a gateway by checkOnlyWith.
func (c *taskConfig) check() error {
	switch {
	case c.ttl <= 0 || c.ttl > taskrun.DefaultTTL:
		return fmt.Errorf("--task-ttl %v: want a positive duration of at most %v", c.ttl, taskrun.DefaultTTL)
	case c.poll <= 0:
		return fmt.Errorf("--task-poll %v: want a positive duration", c.poll)
	case c.reruns < 0:
		return fmt.Errorf("--task-rerun %d: want 0 or a positive number of runs", c.reruns)
	case c.max <= 0:
		return fmt.Errorf("--task-max %d: want a positive number of tasks", c.max)
	}
	for _, name := range names(c.required) {
		if name == "all" {
			return errors.New("--task-required all: want the tools' names (NAME,...): a tool that runs only as a task refuses clients without the Tasks extension")
		}
	}
	return nil
}

// names returns the comma-separated names of list, spaces trimmed.
func names(list string) []string {
	var out []string
	for n := range strings.SplitSeq(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// options returns the Tasks options: the demo's countdown, or a gateway's
// named tools; nil for a gateway that names none.
func (c *taskConfig) options(gateway bool) *tidemark.TaskOptions {
	o := &tidemark.TaskOptions{TTL: c.ttl, Poll: c.poll, Reruns: c.reruns, Max: c.max, Tools: map[string]taskrun.Tool{}}
	if !gateway {
		o.Tools["countdown"] = taskrun.Tool{Support: tasks.Optional}
		return o
	}
	for _, n := range names(c.tools) {
		if n == "all" {
			o.Fallback = func(string) taskrun.Tool { return taskrun.Tool{Support: tasks.Optional} }
			continue
		}
		o.Tools[n] = taskrun.Tool{Support: tasks.Optional}
	}
	for _, n := range names(c.required) {
		o.Tools[n] = taskrun.Tool{Support: tasks.Required}
	}
	if len(o.Tools) == 0 && o.Fallback == nil {
		return nil
	}
	return o
}
