// inspecttasks.go holds `tidemark inspect --tasks`: the task inspector of
// a running tidemark serve (/debug/tasks) printed for a person.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
)

// printTaskAnswer prints the body of /debug/tasks (detail false) or of
// /debug/tasks/{prefix} (detail true), read from u; it returns the exit
// code.
func printTaskAnswer(stdout, stderr io.Writer, u string, body []byte, detail bool) int {
	if detail {
		var d admin.TaskDetails
		if err := json.Unmarshal(body, &d); err != nil {
			fmt.Fprintf(stderr, "tidemark inspect: %s: %v\n", u, err)
			return 1
		}
		printTaskDetails(stdout, d)
		return 0
	}
	var l admin.TaskList
	if err := json.Unmarshal(body, &l); err != nil {
		fmt.Fprintf(stderr, "tidemark inspect: %s: %v\n", u, err)
		return 1
	}
	printTaskList(stdout, l)
	return 0
}

// printTaskList prints /debug/tasks as a table, times in UTC: the tasks
// the process runs, then the settled ones with their final status.
func printTaskList(w io.Writer, l admin.TaskList) {
	if l.Count == 1 {
		fmt.Fprint(w, "1 task runs in this process")
	} else {
		fmt.Fprintf(w, "%d tasks run in this process", l.Count)
	}
	if l.Settled > 0 {
		fmt.Fprintf(w, ", %d ran here and settled", l.Settled)
	}
	if len(l.Tasks) == 0 {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintln(w, ":")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tTOOL\tGENERATION\tSTATUS\tSTARTED\tLEASE UNTIL")
	for _, t := range l.Tasks {
		status := t.Status
		if t.CancelRequested {
			status += ", cancel requested"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", t.Task, t.Tool, t.Generation, status, utc(t.Started), leaseUntil(t.LeaseExpiry, "none"))
	}
	tw.Flush()
}

// printTaskDetails prints /debug/tasks/{prefix}, one block per task.
func printTaskDetails(w io.Writer, d admin.TaskDetails) {
	for i, t := range d.Tasks {
		if i > 0 {
			fmt.Fprintln(w)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "task\t%s\n", t.Task)
		fmt.Fprintf(tw, "tool\t%s\n", t.Tool)
		status := t.Status
		if t.StatusMessage != "" {
			status += " (" + t.StatusMessage + ")"
		}
		if t.Reason != "" {
			status += ", reason " + t.Reason
		}
		fmt.Fprintf(tw, "status\t%s\n", status)
		fmt.Fprintf(tw, "generation\t%d\n", t.Generation)
		fmt.Fprintf(tw, "executor\t%s, lease until %s\n", t.Executor, leaseUntil(t.LeaseExpiry, "none (held while the process lives)"))
		fmt.Fprintf(tw, "round here\tgeneration %d, started %s\n", t.RoundGeneration, utc(t.RoundStarted))
		fmt.Fprintf(tw, "created\t%s\n", utc(t.Created))
		fmt.Fprintf(tw, "updated\t%s\n", utc(t.Updated))
		fmt.Fprintf(tw, "expires\t%s\n", utc(t.Expires))
		fmt.Fprintf(tw, "cancel requested\t%s\n", yesNo(t.CancelRequested))
		fmt.Fprintf(tw, "input requests\t%d outstanding\n", t.InputRequests)
		fmt.Fprintf(tw, "idempotent\t%s, re-run %d times\n", yesNo(t.Idempotent), t.Reruns)
		tw.Flush()
	}
}

// utc formats t in RFC 3339, in UTC.
func utc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// leaseUntil formats a lease's expiry, or none for a claim that lasts as
// long as the process.
func leaseUntil(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return utc(*t)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
