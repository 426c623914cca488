// run.go holds the executor: the table of tasks this process runs, one
// round of a task as an ordinary call through the wrapped handler, the
// outcome that settles the round, and the sweep and lease renewal of
// Start (DESIGN.md, "Tasks: the executor rule").

package taskrun

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// job is one task this process runs: one round at a time.
type job struct {
	id      string
	gen     uint64
	tool    string
	started time.Time // when the round started
	cancel  context.CancelFunc

	mu         sync.Mutex
	cancelReq  bool          // a tasks/cancel asked to stop the call
	abandoned  bool          // the task changed hands, or the process shuts down: write nothing
	why        replay.Reason // why it was abandoned, the first reason given
	leaseUntil time.Time     // the lease this process last stored; zero without leases
	window     *window
}

// window is the creation window of a task's first round (Tool.Window).
type window struct {
	open    bool          // guarded by job.mu
	handoff chan *answer  // an input_required answer within the window
	settled chan struct{} // closed once the first round is settled
}

// closeWindow ends the window; it reports whether the window was still
// open, so that the creator answers CreateTaskResult and the round
// settles as any other.
func (j *job) closeWindow() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	open := j.window.open
	j.window.open = false
	return open
}

// abandon stops the call without writing its outcome; why says what took
// the task from this process (the first reason given stands).
func (j *job) abandon(why replay.Reason) {
	j.mu.Lock()
	j.abandoned = true
	if j.why == "" {
		j.why = why
	}
	j.mu.Unlock()
	j.cancel()
}

// round is what one round of a task sends: the headers of the client's
// request that started it, the _meta without the tasks declaration, and
// the tools/call params.
type round struct {
	header http.Header
	meta   wire.Object
	params wire.Object
}

// start runs a round of the task rec in a goroutine of this process, at
// rec's executor generation; win > 0 opens its creation window. It
// returns nil when this process shuts down.
func (h *Handler) start(parent context.Context, rec tasks.Record, rd round, win time.Duration) *job {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	j := &job{
		id: rec.ID, gen: rec.Executor.Generation, tool: rec.Tool, started: h.opts.Now(), cancel: cancel,
		leaseUntil: rec.Executor.LeaseUntil,
	}
	if win > 0 {
		j.window = &window{open: true, handoff: make(chan *answer, 1), settled: make(chan struct{})}
	}
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		cancel()
		return nil
	}
	if old := h.jobs[rec.ID]; old != nil {
		old.abandon(replay.ReasonFenced)
	}
	h.waiting.take(rec.ID)
	h.jobs[rec.ID] = j
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer cancel()
		ctx, span := h.opts.Tracer.StartTaskRound(ctx, tracing.Task{ID: j.id, Generation: j.gen, Tool: j.tool})
		span.EndTaskRound(h.execute(ctx, j, rec, rd))
	}()
	return j
}

// cancelLocal cancels the call of task id if this process runs it: a
// client's cancel, whose call settles cancelled.
func (h *Handler) cancelLocal(id string) {
	h.mu.Lock()
	j := h.jobs[id]
	h.mu.Unlock()
	if j == nil {
		return
	}
	j.mu.Lock()
	j.cancelReq = true
	j.mu.Unlock()
	j.cancel()
}

// abandonLocal stops the call of task id, if this process runs it,
// without writing its outcome: why took the task from this process.
func (h *Handler) abandonLocal(id string, why replay.Reason) {
	h.mu.Lock()
	j := h.jobs[id]
	h.mu.Unlock()
	if j != nil {
		j.abandon(why)
	}
}

// drop removes j from the table of running tasks.
func (h *Handler) drop(j *job) {
	h.mu.Lock()
	if h.jobs[j.id] == j {
		delete(h.jobs, j.id)
	}
	h.mu.Unlock()
}

// keepSettled moves j from the table of running tasks to the settled
// ones when rec, the record its round stored or found, is settled: at
// once, so the inspector sees the task in one table or the other.
func (h *Handler) keepSettled(j *job, rec tasks.Record) {
	if !rec.Status.Terminal() {
		return
	}
	now := h.opts.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.jobs[j.id] != j {
		return // another round of the task runs here now
	}
	delete(h.jobs, j.id)
	h.done.add(SettledTask{
		ID: j.id, Tool: j.tool, Generation: j.gen, Started: j.started,
		Status: rec.Status, Settled: rec.Updated, Expires: rec.Expires(),
		CancelRequested: rec.CancelRequested,
	}, now)
}

// keepWaiting remembers j's round when rec, the record it stored, waits
// for input: the request that settles the task (a tasks/cancel, which
// needs no round) lists it as settled here then (settleWaiting), since
// its last round ran here.
func (h *Handler) keepWaiting(j *job, rec tasks.Record) {
	if rec.Status != tasks.InputRequired {
		return
	}
	now := h.opts.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.jobs[j.id] != j {
		return // another round of the task runs here now
	}
	h.waiting.add(SettledTask{ID: j.id, Tool: j.tool, Generation: j.gen, Started: j.started, Expires: rec.Expires()}, now)
}

// settleWaiting lists rec's task as settled here when it waited for the
// input its round, which ran here, asked for, and rec, the record just
// stored, is settled.
func (h *Handler) settleWaiting(rec tasks.Record) {
	if !rec.Status.Terminal() {
		return
	}
	now := h.opts.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.waiting.take(rec.ID)
	if !ok {
		return
	}
	t.Status, t.Settled, t.Expires, t.CancelRequested = rec.Status, rec.Updated, rec.Expires(), rec.CancelRequested
	h.done.add(t, now)
}

// execute runs one round of j and settles it. j stays in the table of
// running tasks until its outcome is stored: until then this process is
// the task's live executor to every reader. It returns what the round's
// span records (tracing.Span.EndTaskRound): the status the round stored,
// "" for none, and the reason when Tidemark decided the round's end.
func (h *Handler) execute(ctx context.Context, j *job, rec tasks.Record, rd round) (string, replay.Reason) {
	defer h.drop(j)
	h.opts.Metrics.TaskRunning(1)
	defer h.opts.Metrics.TaskRunning(-1)
	a := h.call(ctx, rd)
	ev, why := h.outcome(ctx, j, a)
	j.mu.Lock()
	abandoned := j.abandoned
	if w := j.window; w != nil && w.open {
		w.open = false
		if ev != nil && ev.Kind == tasks.NeedInput {
			j.mu.Unlock()
			w.handoff <- a
			return tasks.InputRequired.String(), ""
		}
	}
	j.mu.Unlock()
	if j.window != nil {
		defer close(j.window.settled)
	}
	wctx := context.WithoutCancel(ctx)
	if abandoned || ev == nil {
		h.release(wctx, j)
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.why == "" {
			return "", replay.ReasonFenced
		}
		return "", j.why
	}
	ev.Generation = j.gen
	stored, err := h.write(wctx, j.id, *ev)
	// A store that cannot be reached now does not make the outcome wrong:
	// the call ran and its outcome is known, so it is written again until
	// the store answers, the task's time to live ends, or the task is
	// taken from this process (a shutdown, a settle elsewhere). Dropping
	// it would let the next reader settle a finished task executor_lost.
	for delay := storeRetryFirst; errors.Is(err, store.ErrUnavailable) && h.retryWrite(j, rec, delay); delay = min(2*delay, storeRetryMax) {
		stored, err = h.write(wctx, j.id, *ev)
	}
	if err != nil {
		h.log.Log(ctx, dropLevel(err), "task write dropped", "task", tasks.Prefix(j.id), "generation", j.gen,
			"reason", writeReason(err), "event", ev.Kind.String(), "error", err)
	}
	switch {
	case err == nil:
		h.keepSettled(j, stored)
		h.keepWaiting(j, stored)
		return stored.Status.String(), why
	case stored.Cause != tasks.NoCause:
		h.keepSettled(j, stored)
		return stored.Status.String(), CauseReason(stored.Cause)
	case errors.Is(err, store.ErrTaskNotFound):
		return "", replay.ReasonTaskNotFound
	case errors.Is(err, tasks.ErrFenced) || errors.Is(err, tasks.ErrTerminal):
		return "", replay.ReasonFenced
	}
	return "", replay.ReasonUnavailable
}

// call sends one round to the wrapped handler as an ordinary tools/call,
// in memory, and returns its answer.
func (h *Handler) call(ctx context.Context, rd round) *answer {
	params := rd.params.Clone()
	if rd.meta != nil {
		params["_meta"] = mustJSON(rd.meta)
	}
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: taskCallID, Method: "tools/call", Params: mustJSON(params)})
	a := newAnswer()
	if err != nil {
		a.status = http.StatusInternalServerError
		return a
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader(string(body)))
	if err != nil {
		a.status = http.StatusInternalServerError
		return a
	}
	for k, vs := range rd.header {
		r.Header[k] = append([]string(nil), vs...)
	}
	r.Header.Del("Content-Length")
	r.Header.Set("Content-Type", mediaJSON)
	r.Header.Set("Accept", mediaJSON+", "+mediaSSE)
	r.Header.Set(wire.HeaderMethod, "tools/call")
	r.Header.Set(wire.HeaderName, rd.params.Str("name"))
	version := r.Header.Get(wire.HeaderProtocolVersion)
	if v := rd.meta.Str("io.modelcontextprotocol/protocolVersion"); v != "" {
		version = v
	}
	if version == "" {
		version = sessionlessVersion
	}
	r.Header.Set(wire.HeaderProtocolVersion, version)
	r.ContentLength = int64(len(body))
	defer func() {
		// A panic of the engine is the call's failure, not the process's.
		if p := recover(); p != nil {
			a.status, a.header = http.StatusInternalServerError, http.Header{}
			a.body.Reset()
		}
	}()
	h.inner.ServeHTTP(a, r)
	return a
}

// taskCallID is the JSON-RPC ID of a round's tools/call.
var taskCallID, _ = jsonrpc.MakeID("tidemark-task")

// outcome returns the event that settles j's round from its answer a, or
// nil when nothing is to be written (the process abandons the call), and
// the reason when Tidemark, not the call, decided the event
// (result_too_large).
func (h *Handler) outcome(ctx context.Context, j *job, a *answer) (*tasks.Event, replay.Reason) {
	j.mu.Lock()
	cancelReq, abandoned := j.cancelReq, j.abandoned
	j.mu.Unlock()
	if abandoned {
		return nil, ""
	}
	resp := a.response(taskCallID)
	// A call cut short by its context ends with no answer, a JSON-RPC
	// error or a tool error; a result that came anyway stands (SEP-2663,
	// "Task Cancellation": the task reports what the call did).
	cut := resp == nil || resp.Error != nil || string(wire.DecodeObject(resp.Result)["isError"]) == "true"
	if cut && cancelReq {
		return &tasks.Event{Kind: tasks.Stop}, ""
	}
	if cut && ctx.Err() != nil {
		return nil, ""
	}
	if resp == nil {
		msg := "the engine answered the task's call with HTTP " + itoa(a.status) + " and no JSON-RPC response"
		return &tasks.Event{Kind: tasks.Fail, Error: mustJSON(map[string]any{"code": jsonrpc.CodeInternalError, "message": msg})}, ""
	}
	if resp.Error != nil {
		var we *jsonrpc.Error
		if !errors.As(resp.Error, &we) {
			we = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: resp.Error.Error()}
		}
		return &tasks.Event{Kind: tasks.Fail, Error: mustJSON(we)}, ""
	}
	result := wire.DecodeObject(resp.Result)
	if result.Str("resultType") == "input_required" {
		var reqs map[string]json.RawMessage
		json.Unmarshal(result["inputRequests"], &reqs)
		if len(reqs) > 0 {
			byKey := make(map[string][]byte, len(reqs))
			for k, v := range reqs {
				byKey[k] = v
			}
			return &tasks.Event{Kind: tasks.NeedInput, Requests: byKey, State: []byte(result.Str("requestState"))}, ""
		}
	}
	out := []byte(resp.Result)
	if meta := wire.DecodeObject(result["_meta"]); meta != nil {
		if _, ok := meta[metaRelatedTask]; ok {
			delete(meta, metaRelatedTask)
			if len(meta) == 0 {
				delete(result, "_meta")
			} else {
				result["_meta"] = mustJSON(meta)
			}
			out = mustJSON(result)
		}
	}
	if len(out) > MaxResult {
		return &tasks.Event{Kind: tasks.Fail, Error: mustJSON(map[string]any{
			"code":    jsonrpc.CodeInternalError,
			"message": "the tool's result is " + itoa(len(out)) + " bytes, over the " + itoa(MaxResult) + " a task keeps: the tool ran; ask for less output",
			"data":    map[string]any{"reason": replay.ReasonResultTooLarge},
		})}, replay.ReasonResultTooLarge
	}
	return &tasks.Event{Kind: tasks.Complete, Result: out}, ""
}

// dropLevel is the level of a dropped write: WARN for a fenced or settled
// task (it changed hands), ERROR for a store failure.
// Bounds of the waits between writes of an outcome the store could not
// take (execute).
const (
	storeRetryFirst = 100 * time.Millisecond
	storeRetryMax   = 2 * time.Second
)

// retryWrite waits delay before the outcome of j's round is written again,
// and reports whether to write it: not once the task's time to live has
// ended (rec is the record the round started from) or j was taken from
// this process.
func (h *Handler) retryWrite(j *job, rec tasks.Record, delay time.Duration) bool {
	if !h.opts.Now().Add(delay).Before(rec.Expires()) {
		return false
	}
	time.Sleep(delay)
	j.mu.Lock()
	defer j.mu.Unlock()
	return !j.abandoned
}

// writeReason is the reason a dropped write is logged with.
func writeReason(err error) replay.Reason {
	switch {
	case errors.Is(err, tasks.ErrFenced), errors.Is(err, tasks.ErrTerminal):
		return replay.ReasonFenced
	case errors.Is(err, store.ErrTaskNotFound):
		return replay.ReasonTaskNotFound
	}
	return replay.ReasonUnavailable
}

func dropLevel(err error) slog.Level {
	if errors.Is(err, tasks.ErrFenced) || errors.Is(err, tasks.ErrTerminal) || errors.Is(err, store.ErrTaskNotFound) {
		return slog.LevelWarn
	}
	return slog.LevelError
}

// write stores the executor's event ev for task id: read, settle, apply,
// store conditioned on the revision read, again on ErrStale. It returns
// the record as stored, or as read when ev changed nothing. A settle that
// finds the task changed hands stores the settle and returns the settled
// record with ErrFenced.
func (h *Handler) write(ctx context.Context, id string, ev tasks.Event) (tasks.Record, error) {
	for {
		rec, rev, err := h.opts.Store.GetTask(ctx, id)
		if err != nil {
			return tasks.Record{}, err
		}
		now := h.opts.Now()
		rd := h.reader(id)
		rd.Runs = true // the writer is the round that just ended
		settled, verdict := h.rules.Settle(rec, now, rd)
		if verdict != tasks.Keep {
			if verdict == tasks.Delete {
				return tasks.Record{}, store.ErrTaskNotFound
			}
			if _, err := h.opts.Store.UpdateTask(ctx, settled, rev); errors.Is(err, store.ErrStale) {
				continue
			} else if err != nil {
				return tasks.Record{}, err
			}
			h.settled(ctx, rec, settled, verdict)
			return settled, tasks.ErrFenced
		}
		next, eff, err := h.rules.Apply(rec, ev, now)
		if err != nil {
			return tasks.Record{}, err
		}
		if eff == tasks.Unchanged {
			return rec, nil
		}
		if _, err := h.opts.Store.UpdateTask(ctx, next, rev); errors.Is(err, store.ErrStale) {
			continue
		} else if err != nil {
			return tasks.Record{}, err
		}
		if next.Status.Terminal() {
			h.opts.Metrics.TaskSettled(next.Status.String(), "", now.Sub(next.Created))
		}
		if next.Status.Terminal() || next.Status == tasks.InputRequired {
			h.log.Info("task settled", "task", tasks.Prefix(id), "generation", next.Executor.Generation,
				"status", next.Status.String(), "reason", "none")
		}
		return next, nil
	}
}

// release ends this process's lease on task j, which it stops running
// without an outcome (a shutdown): the next reader settles it at once.
// Without leases nothing is written: the next process knows this one is
// gone by its boot ID.
func (h *Handler) release(ctx context.Context, j *job) {
	if h.opts.Lease <= 0 {
		return
	}
	_, err := h.write(ctx, j.id, tasks.Event{Kind: tasks.Renew, Generation: j.gen, LeaseUntil: h.opts.Now()})
	if err != nil {
		h.log.Debug("task lease not released", "task", tasks.Prefix(j.id), "generation", j.gen, "error", err)
	}
}

// nextRound is the round a tasks/update r that completed the input of rec
// starts: the original call with the answers by the engine's keys and the
// round's requestState, under r's headers and _meta.
func (h *Handler) nextRound(r *http.Request, params wire.Object, rec tasks.Record) round {
	return round{header: r.Header, meta: withoutDeclaration(params), params: roundParams(rec)}
}

// rerunRound is the round of a re-run, which no client request carries.
func (h *Handler) rerunRound(rec tasks.Record) round {
	meta := wire.Object{
		"io.modelcontextprotocol/protocolVersion": mustJSON(sessionlessVersion),
		wire.MetaClientCapabilities:               json.RawMessage(`{}`),
	}
	return round{header: http.Header{}, meta: meta, params: roundParams(rec)}
}

// roundParams are the tools/call params of rec's current round.
func roundParams(rec tasks.Record) wire.Object {
	params := wire.DecodeObject(rec.Call)
	if params == nil {
		params = wire.Object{}
	}
	if len(rec.Input.Slots) > 0 {
		responses := map[string]json.RawMessage{}
		for _, s := range rec.Input.Slots {
			if s.Response != nil {
				responses[s.Key] = s.Response
			}
		}
		params["inputResponses"] = mustJSON(responses)
		if len(rec.Input.State) > 0 {
			params["requestState"] = mustJSON(string(rec.Input.State))
		} else {
			delete(params, "requestState")
		}
	}
	return params
}

// sweep settles every working task of the store whose executor is gone.
func (h *Handler) sweep(ctx context.Context) error {
	var ids []string
	err := h.opts.Store.WorkingTasks(ctx, func(rec tasks.Record, _ uint64) bool {
		ids = append(ids, rec.ID)
		return true
	})
	for _, id := range ids {
		rec, _, gerr := h.opts.Store.GetTask(ctx, id)
		if gerr != nil {
			continue
		}
		h.change(ctx, id, rec.Owner, nil)
	}
	return err
}

// renew renews the leases of the tasks this process runs, and reads their
// records back: a task that changed hands stops here, a cancel asked on
// another replica reaches its call.
func (h *Handler) renew(ctx context.Context) {
	h.mu.Lock()
	jobs := make([]*job, 0, len(h.jobs))
	for _, j := range h.jobs {
		jobs = append(jobs, j)
	}
	h.mu.Unlock()
	for _, j := range jobs {
		rec, _, err := h.opts.Store.GetTask(ctx, j.id)
		switch {
		case errors.Is(err, store.ErrTaskNotFound):
			j.abandon(replay.ReasonTaskNotFound)
			continue
		case err != nil:
			continue
		case rec.Executor.Boot != h.opts.Boot || rec.Executor.Generation != j.gen || rec.Status != tasks.Working:
			h.log.Warn("task changed hands", "task", tasks.Prefix(j.id), "generation", j.gen, "reason", replay.ReasonFenced)
			j.abandon(replay.ReasonFenced)
			continue
		case rec.CancelRequested:
			h.cancelLocal(j.id)
		}
		until := h.opts.Now().Add(h.opts.Lease)
		_, err = h.write(ctx, j.id, tasks.Event{Kind: tasks.Renew, Generation: j.gen, LeaseUntil: until})
		switch {
		case errors.Is(err, tasks.ErrFenced) || errors.Is(err, tasks.ErrTerminal):
			j.abandon(replay.ReasonFenced)
		case err == nil:
			j.mu.Lock()
			j.leaseUntil = until
			j.mu.Unlock()
		}
	}
}
