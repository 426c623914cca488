package main

// This file holds workload (t), the Tasks extension
// (io.modelcontextprotocol/tasks, SEP-2663, protocol 2026-07-28) of
// `tidemark serve` with each store that keeps tasks (the rows whose
// serverSpec.tasks is set: memory, --data-dir, one Redis), and its section
// of the report. Its requests are of the sessionless era: no initialize, no
// session; each carries the headers MCP-Protocol-Version, Mcp-Method and
// Mcp-Name, and its client capabilities in
// params._meta["io.modelcontextprotocol/clientCapabilities"], where a
// request that wants a task declares the extension (DESIGN.md, "Tasks: the
// executor rule").

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// tasksVersion is the protocol version of (t)'s requests: the first
	// of the sessionless era, where the Tasks extension is served.
	tasksVersion = "2026-07-28"
	// tasksExtension is the extension's ID, declared under
	// clientCapabilities.extensions.
	tasksExtension = "io.modelcontextprotocol/tasks"
	// taskPoll is the --task-poll (t) starts the server with: it suggests
	// pollIntervalMs 1, the smallest interval a server can suggest in whole
	// milliseconds, and the client waits what the server suggests before
	// each tasks/get, as a client of the extension does. With the default
	// of 1 s a task's time would be the poll interval's.
	taskPoll = "1ms"
	// countdownDone is the text of the answer to countdown {n: 1}.
	countdownDone = "countdown of 1 finished"
	// taskPatience bounds the time (t) waits for one task to complete.
	taskPatience = 30 * time.Second
)

// resultT is workload (t) on one server: four windows at conc clients.
type resultT struct {
	conc int
	// create: tools/call of countdown {n: 1} declaring the extension,
	// answered with CreateTaskResult; calls are tasks created.
	create resultA
	// get: tasks/get of the tasks create made, each read completed with
	// the countdown's result.
	get resultA
	// asTask: countdown {n: 1} run as a task: created, then polled with
	// tasks/get until it reads completed; the latency is from the
	// tools/call to the tasks/get that reads it completed.
	asTask resultA
	// plain: the same tools/call without the declaration, answered at
	// once.
	plain resultA
	// pollMs is the pollIntervalMs the server suggested (its first
	// CreateTaskResult's).
	pollMs int
	// polls is the mean number of tasks/get per task of asTask.
	polls float64
	// atOnce counts create's calls answered at once rather than with a
	// task (the server runs --task-max tasks already): not counted as
	// tasks created.
	atOnce int
	na     string
}

// taskClient sends the sessionless requests of (t).
type taskClient struct {
	hc     *http.Client
	url    string
	nextID atomic.Int64
}

// taskAnswer is what (t) reads of an answer: a CreateTaskResult, a
// tasks/get result, or a CallToolResult.
type taskAnswer struct {
	Result struct {
		ResultType     string          `json:"resultType"`
		TaskID         string          `json:"taskId"`
		Status         string          `json:"status"`
		PollIntervalMs *int            `json:"pollIntervalMs"`
		Result         json.RawMessage `json:"result"`
		Error          json.RawMessage `json:"error"`
	} `json:"result"`
	Error json.RawMessage `json:"error"`
	raw   []byte          // the whole JSON-RPC response
}

// send posts one request of method with the members of params (a JSON
// object's members, without braces), declaring the Tasks extension when
// declare is set; name is the header Mcp-Name (the tool or the task ID).
// It returns the decoded answer and the time from sending to reading it.
func (c *taskClient) send(ctx context.Context, method, name, params string, declare bool) (taskAnswer, time.Duration, error) {
	var a taskAnswer
	var b []byte
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, c.nextID.Add(1), 10)
	b = append(b, `,"method":"`...)
	b = append(b, method...)
	b = append(b, `","params":{`...)
	b = append(b, params...)
	b = append(b, `,"_meta":{"io.modelcontextprotocol/protocolVersion":"`+tasksVersion+`","io.modelcontextprotocol/clientCapabilities":{`...)
	if declare {
		b = append(b, `"extensions":{"`+tasksExtension+`":{}}`...)
	}
	b = append(b, `},"io.modelcontextprotocol/clientInfo":{"name":"tidemark-bench","version":"1.0.0"}}}}`...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(b))
	if err != nil {
		return a, 0, err
	}
	h := req.Header
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json, text/event-stream"}
	h["Mcp-Protocol-Version"] = []string{tasksVersion}
	h["Mcp-Method"] = []string{method}
	h["Mcp-Name"] = []string{name}
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return a, 0, err
	}
	res := readCall(resp, 0, false)
	elapsed := time.Since(start)
	if res.status != http.StatusOK || res.response == nil {
		return a, elapsed, fmt.Errorf("%s: status %d: %s", method, res.status, trim(res.errBody))
	}
	a.raw = res.response
	if err := json.Unmarshal(res.response, &a); err != nil {
		return a, elapsed, fmt.Errorf("%s: %v: %s", method, err, trim(res.response))
	}
	if len(a.Error) > 0 {
		return a, elapsed, fmt.Errorf("%s: error %s", method, trim(a.Error))
	}
	return a, elapsed, nil
}

// errAtOnce is a declared countdown answered at once instead of with a
// task.
var errAtOnce = errors.New("tools/call declaring the Tasks extension was answered at once, not with a task (the server runs --task-max tasks)")

// countdownParams are the params of countdown {n: 1}, no delay, no
// progress token.
const countdownParams = `"name":"countdown","arguments":{"n":1}`

// createTask calls countdown {n: 1} declaring the extension and returns
// the task's ID and the poll interval the server suggests.
func (c *taskClient) createTask(ctx context.Context) (id string, poll time.Duration, lat time.Duration, err error) {
	a, lat, err := c.send(ctx, "tools/call", "countdown", countdownParams, true)
	if err != nil {
		return "", 0, lat, err
	}
	r := a.Result
	if r.ResultType != "task" {
		return "", 0, lat, errAtOnce
	}
	if r.TaskID == "" || (r.Status != "working" && r.Status != "completed") {
		return "", 0, lat, fmt.Errorf("CreateTaskResult with taskId %q status %q, want an ID and working or completed", r.TaskID, r.Status)
	}
	if r.PollIntervalMs != nil {
		poll = time.Duration(*r.PollIntervalMs) * time.Millisecond
	}
	return r.TaskID, poll, lat, nil
}

// getTask reads task id and reports whether it has completed with the
// countdown's result; a task that failed or was cancelled is an error.
func (c *taskClient) getTask(ctx context.Context, id string) (done bool, lat time.Duration, err error) {
	a, lat, err := c.send(ctx, "tasks/get", id, `"taskId":"`+id+`"`, true)
	if err != nil {
		return false, lat, err
	}
	switch r := a.Result; r.Status {
	case "completed":
		if !bytes.Contains(r.Result, []byte(countdownDone)) || bytes.Contains(r.Result, []byte(`"isError":true`)) {
			return false, lat, fmt.Errorf("task %s completed with %s, want the text %q", id, trim(r.Result), countdownDone)
		}
		return true, lat, nil
	case "working":
		return false, lat, nil
	default:
		return false, lat, fmt.Errorf("task %s reads %q: %s", id, r.Status, trim(r.Error))
	}
}

// plainCall calls countdown {n: 1} without the declaration: answered at
// once, as the call without tasks.
func (c *taskClient) plainCall(ctx context.Context) (time.Duration, error) {
	a, lat, err := c.send(ctx, "tools/call", "countdown", countdownParams, false)
	if err != nil {
		return lat, err
	}
	if a.Result.ResultType == "task" {
		return lat, fmt.Errorf("tools/call without the Tasks extension was answered with task %s", a.Result.TaskID)
	}
	if !bytes.Contains(a.raw, []byte(countdownDone)) || isErrorResponse(a.raw) {
		return lat, fmt.Errorf("tools/call answered %s, want the text %q", trim(a.raw), countdownDone)
	}
	return lat, nil
}

// runTask runs countdown {n: 1} as a task: the call, then tasks/get after
// each poll interval the server suggested until the task reads completed.
// It returns the time from the call to that read, and the tasks/get sent.
func (c *taskClient) runTask(ctx context.Context) (time.Duration, int, error) {
	start := time.Now()
	id, poll, _, err := c.createTask(ctx)
	if err != nil {
		return 0, 0, err
	}
	for polls := 1; ; polls++ {
		time.Sleep(poll)
		done, _, err := c.getTask(ctx, id)
		if err != nil {
			return 0, polls, err
		}
		if done {
			return time.Since(start), polls, nil
		}
		if time.Since(start) > taskPatience {
			return 0, polls, fmt.Errorf("task %s still working after %s", id, taskPatience)
		}
	}
}

// taskLoop runs op on each of conc workers until d has passed, and returns
// the count, rate and latency of the ops that succeeded. op returns its
// latency, or an error; errAtOnce is counted in atOnce, not in errors.
func taskLoop(ctx context.Context, conc int, d time.Duration, op func(worker int) (time.Duration, error)) (r resultA, atOnce int) {
	lats := make([][]time.Duration, conc)
	errs := make([]int, conc)
	onces := make([]int, conc)
	var firstErr atomic.Value
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				lat, err := op(i)
				switch {
				case errors.Is(err, errAtOnce):
					onces[i]++
				case err != nil:
					errs[i]++
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(10 * time.Millisecond)
				default:
					l = append(l, lat)
				}
			}
			lats[i] = l
		}()
	}
	wg.Wait()
	r = resultA{conc: conc, elapsed: time.Since(start)}
	var all []time.Duration
	for i := range lats {
		all = append(all, lats[i]...)
		r.errors += errs[i]
		atOnce += onces[i]
	}
	if fe, ok := firstErr.Load().(string); ok {
		r.firstErr = fe
	}
	r.calls = len(all)
	r.rate = float64(r.calls) / r.elapsed.Seconds()
	slices.Sort(all)
	r.p50, r.p99 = percentile(all, 0.50), percentile(all, 0.99)
	return r, atOnce
}

// measured runs taskLoop inside a window of s and fills in the server's
// and its helpers' costs per op.
func measured(ctx context.Context, s *server, conc int, d time.Duration, op func(worker int) (time.Duration, error)) (resultA, int) {
	w := openWindow(s.pid, s.helperPids()...)
	r, atOnce := taskLoop(ctx, conc, d, op)
	delta, helpers, foreign := w.close()
	r.foreign = foreign
	if r.calls > 0 {
		r.cpuPerCall = delta.cpu / time.Duration(r.calls)
		r.helperPerCall = helpers / time.Duration(r.calls)
		r.writesPerCall = float64(delta.writes) / float64(r.calls)
	}
	return r, atOnce
}

// runT measures (t) on s, a `tidemark serve` started with --task-poll
// taskPoll: tasks created per second; tasks/get per second of those
// tasks, once they have completed; and countdown {n: 1} run as a task
// until it reads completed against the same call without the declaration.
// Every window runs cfg.tConc clients for cfg.tDur after a warm-up.
func runT(ctx context.Context, s *server, cfg config) (resultT, error) {
	conc := cfg.tConc
	r := resultT{conc: conc}
	hc := &http.Client{Transport: newTransport(conc)}
	defer hc.CloseIdleConnections()
	clients := make([]*taskClient, conc)
	for i := range clients {
		clients[i] = &taskClient{hc: hc, url: s.url}
	}
	// The first task says which poll interval the server suggests, and
	// whether it serves tasks at all.
	_, poll, _, err := clients[0].createTask(ctx)
	if err != nil {
		r.na = "no task for a declared tools/call: " + err.Error()
		return r, nil
	}
	r.pollMs = int(poll / time.Millisecond)
	// Warm-up: the three kinds of request, for the code paths and the
	// connections.
	var warmErr atomic.Value
	taskLoop(ctx, conc, cfg.tWarm, func(i int) (time.Duration, error) {
		var err error
		switch i % 3 {
		case 0:
			_, err = clients[i].plainCall(ctx)
		case 1:
			_, _, err = clients[i].runTask(ctx)
		default:
			_, _, _, err = clients[i].createTask(ctx)
		}
		if err != nil {
			warmErr.CompareAndSwap(nil, err)
		}
		return 0, err
	})
	if err, ok := warmErr.Load().(error); ok && !errors.Is(err, errAtOnce) {
		return r, fmt.Errorf("warm-up: %w", err)
	}

	ids := make([][]string, conc)
	r.create, r.atOnce = measured(ctx, s, conc, cfg.tDur, func(i int) (time.Duration, error) {
		id, _, lat, err := clients[i].createTask(ctx)
		if err == nil {
			ids[i] = append(ids[i], id)
		}
		return lat, err
	})
	// The tasks/get window reads tasks that have completed: wait for the
	// last task of each client.
	for i, own := range ids {
		if len(own) == 0 {
			continue
		}
		last, start := own[len(own)-1], time.Now()
		for {
			done, _, err := clients[i].getTask(ctx, last)
			if err != nil {
				return r, fmt.Errorf("waiting for the last tasks created: %w", err)
			}
			if done {
				break
			}
			if time.Since(start) > taskPatience {
				return r, fmt.Errorf("task %s still working %s after the window that created it", last, taskPatience)
			}
			time.Sleep(poll)
		}
	}
	var all []string
	for _, own := range ids {
		all = append(all, own...)
	}
	if len(all) == 0 {
		return r, fmt.Errorf("no task created: %s", r.create.firstErr)
	}
	next := make([]int, conc)
	r.get, _ = measured(ctx, s, conc, cfg.tDur, func(i int) (time.Duration, error) {
		// Each client reads its own tasks in turn (any task when it made
		// none), from the oldest.
		own := ids[i]
		if len(own) == 0 {
			own = all
		}
		id := own[next[i]%len(own)]
		next[i]++
		done, lat, err := clients[i].getTask(ctx, id)
		if err == nil && !done {
			err = fmt.Errorf("task %s reads working after the last task of its client completed", id)
		}
		return lat, err
	})

	r.plain, _ = measured(ctx, s, conc, cfg.tDur, func(i int) (time.Duration, error) { return clients[i].plainCall(ctx) })
	polls := make([]int, conc)
	r.asTask, _ = measured(ctx, s, conc, cfg.tDur, func(i int) (time.Duration, error) {
		lat, n, err := clients[i].runTask(ctx)
		if err == nil {
			polls[i] += n
		}
		return lat, err
	})
	if r.asTask.calls > 0 {
		sum := 0
		for _, n := range polls {
			sum += n
		}
		r.polls = float64(sum) / float64(r.asTask.calls)
	}
	return r, nil
}

// taskRatio is the quotient of (t)'s run as a task to the plain call: of
// rates, of p50 latencies or of CPU per call; ok is false when a figure is
// missing.
func taskRatio(t resultT, f func(resultA) float64) (float64, bool) {
	a, b := f(t.asTask), f(t.plain)
	if t.asTask.calls == 0 || t.plain.calls == 0 || b == 0 {
		return 0, false
	}
	return a / b, true
}

func quotientCell(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// failCell renders a window's failed ops, with the first error.
func failCell(a resultA) string {
	s := fmt.Sprint(a.errors)
	if a.errors > 0 {
		s += " (" + mdEscape(trimString(a.firstErr)) + ")"
	}
	return s
}

// tableT writes section (t).
func (r *report) tableT(b *strings.Builder) {
	rows := r.rowsWith(func(row *row) bool { return row.hasT })
	if len(rows) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## (t) tasks\n\n")
	p("The Tasks extension (`io.modelcontextprotocol/tasks`, protocol %s) of `tidemark serve` on each store that keeps tasks, %d concurrent clients, %s measured per window after %s of warm-up, each store in its own process started with `--task-poll %s`. Every request is sessionless: `MCP-Protocol-Version: %s`, `Mcp-Method`, `Mcp-Name`, and the client capabilities in `params._meta`. ",
		tasksVersion, r.cfg.tConc, r.cfg.tDur, r.cfg.tWarm, taskPoll, tasksVersion)
	p("Created: `tools/call` of `countdown {n: 1}` (no delay) declaring the extension, answered with CreateTaskResult (the record is stored before the answer, and the countdown runs in the background). Read: `tasks/get` of the tasks created in that window, each client its own in turn, once all have completed (each answer carries the result). CPU is the server's and its helpers' (Redis) over the window, per task created or read: the tasks created count the countdowns that run in the background during the window. Answered at once: declared calls answered without a task (the server runs `--task-max` tasks already), not counted as created.\n\n")
	p("| server | tasks created/s | p50 | p99 | server CPU per task | helper CPU per task | writes per task | failed | answered at once | tasks/get/s | p50 | p99 | server CPU per get | helper CPU per get | failed | other load (created / get) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, row := range rows {
		t := row.t
		if t.na != "" {
			p("| %s | N/A | – | – | – | – | – | – | – | – | – | – | – | – | – | %s |\n", row.spec.name, mdEscape(trimString(t.na)))
			continue
		}
		c, g := t.create, t.get
		p("| %s | %.0f | %s | %s | %s | %s | %.2f | %s | %d | %.0f | %s | %s | %s | %s | %s | %s / %s |\n", row.spec.name,
			c.rate, ms(c.p50), ms(c.p99), cpuCell(c.cpuPerCall), helperCell(row, c.helperPerCall), c.writesPerCall, failCell(c), t.atOnce,
			g.rate, ms(g.p50), ms(g.p99), cpuCell(g.cpuPerCall), helperCell(row, g.helperPerCall), failCell(g), loadCell(c.foreign), loadCell(g.foreign))
	}
	p("\n### A countdown run as a task ÷ the same call without one\n\n")
	p("As a task: `tools/call` of `countdown {n: 1}` declaring the extension, then `tasks/get` after each `pollIntervalMs` the server suggests (%s here: the client waits it before every read, as a client of the extension does) until the task reads completed; its latency runs from sending the `tools/call` to reading `completed`, and its CPU counts every request of the run. Without: the same `tools/call` without the declaration, answered at once. Each store's quotients divide its own two windows (runs/s ÷ calls/s; p50 ÷ p50; CPU ÷ CPU, server and helpers).\n\n", taskPoll)
	p("| server | as a task: runs/s | p50 | p99 | tasks/get per run | CPU per run | without: calls/s | p50 | p99 | CPU per call | task ÷ without: rate ↑ | p50 ↓ | CPU ↓ | failed (task / without) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, row := range rows {
		t := row.t
		if t.na != "" {
			p("| %s | N/A | – | – | – | – | – | – | – | – | – | – | – | %s |\n", row.spec.name, mdEscape(trimString(t.na)))
			continue
		}
		a, x := t.asTask, t.plain
		rate := quotientCell(taskRatio(t, func(a resultA) float64 { return a.rate }))
		p50 := quotientCell(taskRatio(t, func(a resultA) float64 { return float64(a.p50) }))
		cpu := quotientCell(taskRatio(t, func(a resultA) float64 { return float64(a.cpuPerCall + a.helperPerCall) }))
		p("| %s | %.0f | %s | %s | %.2f | %s | %.0f | %s | %s | %s | %s | %s | %s | %s / %s |\n", row.spec.name,
			a.rate, ms(a.p50), ms(a.p99), t.polls, cpuCell(a.cpuPerCall+a.helperPerCall),
			x.rate, ms(x.p50), ms(x.p99), cpuCell(x.cpuPerCall+x.helperPerCall),
			rate, p50, cpu, failCell(a), failCell(x))
	}
	p("\n")
}

// taskMetrics are (t)'s figures in the ratio tables of Tidemark's
// configurations (each store ÷ the memory store).
func (r *report) taskMetrics() []metric {
	has := func(x *row, a resultA) bool { return x.hasT && x.t.na == "" && a.calls > 0 }
	conc := r.cfg.tConc
	return []metric{
		{name: fmt.Sprintf("(t) tasks created/s, %d clients", conc), higher: true, value: func(x *row) (float64, bool) {
			return x.t.create.rate, has(x, x.t.create)
		}},
		{name: "(t) CPU per task created", value: func(x *row) (float64, bool) {
			return float64(x.t.create.cpuPerCall + x.t.create.helperPerCall), has(x, x.t.create) && x.t.create.cpuPerCall > 0
		}},
		{name: fmt.Sprintf("(t) tasks/get/s, %d clients", conc), higher: true, value: func(x *row) (float64, bool) {
			return x.t.get.rate, has(x, x.t.get)
		}},
		{name: fmt.Sprintf("(t) countdowns run as tasks/s, %d clients", conc), higher: true, value: func(x *row) (float64, bool) {
			return x.t.asTask.rate, has(x, x.t.asTask)
		}},
	}
}

// mergeT merges (t) of several rounds: each window's figures are medians
// (mergeA), the poll count a median, calls answered at once the worst
// round's.
func mergeT(rows []*row) resultT {
	m := rows[0].t
	for _, r := range rows {
		if m.na == "" && r.t.na != "" {
			m.na = r.t.na
		}
		m.atOnce = max(m.atOnce, r.t.atOnce)
	}
	window := func(get func(resultT) resultA) resultA {
		as := make([]resultA, 0, len(rows))
		for _, r := range rows {
			if a := get(r.t); a.calls > 0 {
				as = append(as, a)
			}
		}
		if len(as) == 0 {
			return get(m)
		}
		return mergeA(as)
	}
	m.create = window(func(t resultT) resultA { return t.create })
	m.get = window(func(t resultT) resultA { return t.get })
	m.asTask = window(func(t resultT) resultA { return t.asTask })
	m.plain = window(func(t resultT) resultA { return t.plain })
	m.polls = median(rows, func(r *row) float64 { return r.t.polls })
	return m
}
