// serve.go holds the requests a Handler answers: server/discover, the
// tools/call that becomes a task, tasks/get, tasks/update, tasks/cancel,
// and the refusals of tasks.Gate (DESIGN.md, "Tasks: the executor rule").

package taskrun

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// maxBody bounds the request body taskrun reads to decide; a larger one
// goes to the wrapped handler, which refuses it by its own limit.
const maxBody = 16 << 20

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		h.inner.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || len(body) > maxBody {
		h.inner.ServeHTTP(w, r)
		return
	}
	msg, err := jsonrpc.DecodeMessage(body)
	req, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok || !req.IsCall() {
		h.inner.ServeHTTP(w, r)
		return
	}
	params := wire.DecodeObject(req.Params)
	switch req.Method {
	case "server/discover":
		h.discover(w, r, req)
		return
	case "tasks/get", "tasks/update", "tasks/cancel":
		if !h.headersMatch(w, r, req, "taskId", params.Str("taskId")) {
			return
		}
	}
	var tool Tool
	name := params.Str("name")
	if req.Method == "tools/call" {
		tool = h.opts.Tools(name)
	}
	admission := tasks.Gate(req.Method, tool.Support, declared(params))
	// A tools/call this layer answers itself gets the header checks the
	// wrapped handler would have made (SEP-2243, "Server Behavior").
	if req.Method == "tools/call" && admission != tasks.Pass && !h.headersMatch(w, r, req, "name", name) {
		return
	}
	switch admission {
	case tasks.Create:
		h.create(w, r, req, params, name, tool)
	case tasks.Serve:
		h.serveTask(w, r, req, params)
	case tasks.MissingCapability:
		what := req.Method
		if req.Method == "tools/call" {
			what = "tool " + name + " runs only as a task: it"
		}
		missingCapability(w, req, what)
	case tasks.MethodNotFound:
		writeError(w, req, http.StatusOK, jsonrpc.CodeMethodNotFound,
			req.Method+" does not exist in the Tasks extension: tasks/get answers a task with its result", "", nil)
	default:
		h.inner.ServeHTTP(w, r)
	}
}

// headersMatch checks a request's Mcp-Method and Mcp-Name headers against
// its method and the param that names it (params.taskId of a task
// request, params.name of a tools/call), whose value is name (SEP-2663,
// "Streamable HTTP: Routing Headers"; SEP-2243): a missing or disagreeing
// one is refused 400 with -32020, and headersMatch reports false. A
// header sent twice is refused too: a proxy that routes on the first and
// a server that reads the last would act on different names.
func (h *Handler) headersMatch(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request, param, name string) bool {
	method, got := r.Header.Get(wire.HeaderMethod), r.Header.Get(wire.HeaderName)
	var msg string
	switch {
	case len(r.Header.Values(wire.HeaderMethod)) > 1:
		msg = "the Mcp-Method header is sent more than once: send it once"
	case len(r.Header.Values(wire.HeaderName)) > 1:
		msg = "the Mcp-Name header is sent more than once: send it once"
	case method == "":
		msg = "the Mcp-Method header is missing: send Mcp-Method: " + req.Method
	case method != req.Method:
		msg = "the Mcp-Method header says " + method + ", the body " + req.Method
	case got == "":
		msg = "the Mcp-Name header is missing: send Mcp-Name with params." + param
	case got != name:
		msg = "the Mcp-Name header names another " + param + " than params." + param
	default:
		return true
	}
	h.log.Debug("request refused", "reason", replay.ReasonHeaderMismatch, "method", req.Method, "error", msg)
	writeError(w, req, http.StatusBadRequest, codeHeaderMismatch, msg, replay.ReasonHeaderMismatch, nil)
	return false
}

// discover passes server/discover on and adds the extension under
// capabilities.extensions of the answer, keeping its form (SEP-2663,
// "Capability Negotiation"). An answer without a result goes back as it
// is.
func (h *Handler) discover(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
	a := newAnswer()
	h.inner.ServeHTTP(a, r)
	resp := a.response(req.ID)
	result := wire.DecodeObject(func() json.RawMessage {
		if resp == nil || resp.Error != nil {
			return nil
		}
		return resp.Result
	}())
	if result == nil {
		a.copyTo(w, nil)
		return
	}
	caps := wire.DecodeObject(result["capabilities"])
	if caps == nil {
		caps = wire.Object{}
	}
	ext := wire.DecodeObject(caps["extensions"])
	if ext == nil {
		ext = wire.Object{}
	}
	ext[tasks.ExtensionID] = json.RawMessage(`{}`)
	caps["extensions"] = mustJSON(ext)
	result["capabilities"] = mustJSON(caps)
	body, err := a.replaceResponse(req.ID, &jsonrpc.Response{ID: req.ID, Result: mustJSON(result)})
	if err != nil {
		a.copyTo(w, nil)
		return
	}
	a.copyTo(w, body)
}

// create makes a task of a tools/call: the record is stored before the
// call runs and before the answer (SEP-2663: a tasks/get of the ID the
// client holds resolves), then the call runs in this process.
func (h *Handler) create(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request, params wire.Object, name string, tool Tool) {
	h.mu.Lock()
	full := h.closing || len(h.jobs) >= h.opts.Max
	h.mu.Unlock()
	if full {
		if tool.Support == tasks.Optional {
			h.inner.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, req, replay.ReasonCapacity.Status(), jsonrpc.CodeInternalError,
			"this server runs as many tasks as it may ("+itoa(h.opts.Max)+"): try again shortly", replay.ReasonCapacity, nil)
		return
	}
	call := params.Clone()
	delete(call, "_meta")
	now := h.opts.Now()
	rec, err := tasks.New(tasks.Spec{
		ID: rand.Text(), Owner: h.opts.Subject(r), Tool: name, Call: mustJSON(call),
		Idempotent: tool.Idempotent || h.idempotent(r, params, name),
		Executor:   h.self(now), Now: now, TTL: h.opts.TTL, PollInterval: h.opts.Poll,
	})
	if err != nil {
		writeError(w, req, http.StatusInternalServerError, jsonrpc.CodeInternalError, err.Error(), "", nil)
		return
	}
	if err := h.opts.Store.CreateTask(r.Context(), rec); err != nil {
		h.log.Warn("task not created", "task", tasks.Prefix(rec.ID), "tool", name, "reason", replay.ReasonUnavailable, "error", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, req, replay.ReasonUnavailable.Status(), jsonrpc.CodeInternalError,
			"the task store cannot take the task now: try again shortly", replay.ReasonUnavailable, nil)
		return
	}
	h.opts.Metrics.TaskCreated()
	h.log.Info("task created", "task", tasks.Prefix(rec.ID), "generation", rec.Executor.Generation, "tool", name)
	origin := h.opts.Tracer.Incoming(r.Context(), r.Header, params["_meta"])
	j := h.start(origin, rec, round{header: r.Header, meta: withoutDeclaration(params), params: call}, tool.Window)
	if j == nil || j.window == nil {
		writeResult(w, req, createResult(rec))
		return
	}
	timer := time.NewTimer(tool.Window)
	defer timer.Stop()
	var a *answer
	select {
	case <-timer.C:
		if j.closeWindow() {
			writeResult(w, req, createResult(rec))
			return
		}
		select {
		case a = <-j.window.handoff:
		case <-j.window.settled:
		}
	case a = <-j.window.handoff:
	case <-j.window.settled:
	}
	if a != nil {
		// An input round before any task: the answer goes as it is, and
		// the record that no client holds goes away.
		if err := h.deleteTask(context.WithoutCancel(r.Context()), rec.ID); err != nil {
			h.log.Warn("task record of an input round not deleted", "task", tasks.Prefix(rec.ID), "error", err)
		}
		resp := a.response(taskCallID)
		resp.ID = req.ID
		body, err := a.replaceResponse(taskCallID, resp)
		if err != nil {
			body = nil
		}
		a.copyTo(w, body)
		return
	}
	if cur, _, err := h.opts.Store.GetTask(r.Context(), rec.ID); err == nil {
		rec = cur
	}
	writeResult(w, req, createResult(rec))
}

// deleteTask removes the record of id at whatever revision it has.
func (h *Handler) deleteTask(ctx context.Context, id string) error {
	for {
		_, rev, err := h.opts.Store.GetTask(ctx, id)
		if err != nil {
			return err
		}
		if err := h.opts.Store.DeleteTask(ctx, id, rev); !errors.Is(err, store.ErrStale) {
			return err
		}
	}
}

// serveTask answers tasks/get, tasks/update and tasks/cancel.
func (h *Handler) serveTask(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request, params wire.Object) {
	id := params.Str("taskId")
	subject := h.opts.Subject(r)
	var ev *tasks.Event
	switch req.Method {
	case "tasks/update":
		var responses map[string]json.RawMessage
		if err := json.Unmarshal(params["inputResponses"], &responses); err != nil && len(params["inputResponses"]) > 0 {
			writeError(w, req, http.StatusOK, jsonrpc.CodeInvalidParams, "params.inputResponses must be an object of answers by input request key", "", nil)
			return
		}
		byKey := make(map[string][]byte, len(responses))
		for k, v := range responses {
			if string(v) != "null" {
				byKey[k] = v
			}
		}
		ev = &tasks.Event{Kind: tasks.Answer, Responses: byKey, Claimant: h.self(h.opts.Now())}
	case "tasks/cancel":
		ev = &tasks.Event{Kind: tasks.Cancel}
	}
	if id == "" {
		notFound(w, req, id)
		return
	}
	// The request's trace context parents the settle spans of the read
	// and links the round it starts.
	ctx := h.opts.Tracer.Incoming(r.Context(), r.Header, params["_meta"])
	out, err := h.change(ctx, id, subject, ev)
	switch {
	case errors.Is(err, store.ErrTaskNotFound):
		notFound(w, req, id)
		return
	case err != nil:
		h.log.Warn("task not read", "task", tasks.Prefix(id), "method", req.Method, "reason", replay.ReasonUnavailable, "error", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, req, replay.ReasonUnavailable.Status(), jsonrpc.CodeInternalError,
			"the task store cannot be read now: try again shortly", replay.ReasonUnavailable, nil)
		return
	}
	switch req.Method {
	case "tasks/get":
		writeResult(w, req, detailed(out.rec))
		return
	case "tasks/update":
		if out.effect == tasks.Execute {
			h.start(ctx, out.rec, h.nextRound(r, params, out.rec), 0)
		}
	case "tasks/cancel":
		h.cancelLocal(id)
	}
	writeResult(w, req, map[string]any{"resultType": "complete"})
}

// changed is what change did to a record.
type changed struct {
	rec     tasks.Record
	verdict tasks.Verdict
	effect  tasks.Effect
}

// change reads the record of id as subject sees it, settles it, applies
// ev (nil: none) and stores what changed, conditioned on the revision
// read, again from the read when another writer came first. A record of
// another subject, or one that the settle deletes, is ErrTaskNotFound. A
// verdict that claims the task here (a re-run) starts its round.
func (h *Handler) change(ctx context.Context, id, subject string, ev *tasks.Event) (changed, error) {
	for {
		rec, rev, err := h.opts.Store.GetTask(ctx, id)
		if err != nil {
			return changed{}, err
		}
		if !rec.VisibleTo(subject) {
			return changed{}, store.ErrTaskNotFound
		}
		now := h.opts.Now()
		settled, verdict := h.rules.Settle(rec, now, h.reader(id))
		if verdict == tasks.Delete {
			if err := h.opts.Store.DeleteTask(ctx, id, rev); errors.Is(err, store.ErrStale) {
				continue
			}
			return changed{}, store.ErrTaskNotFound
		}
		out := changed{rec: settled, verdict: verdict, effect: tasks.Unchanged}
		if verdict != tasks.Keep {
			out.effect = tasks.Changed
		}
		if ev != nil {
			next, eff, err := h.rules.Apply(settled, *ev, now)
			if err != nil {
				return changed{}, err
			}
			if eff != tasks.Unchanged {
				out.rec, out.effect = next, eff
			}
		}
		if out.effect == tasks.Unchanged {
			return out, nil
		}
		if _, err := h.opts.Store.UpdateTask(ctx, out.rec, rev); errors.Is(err, store.ErrStale) {
			continue
		} else if err != nil {
			return changed{}, err
		}
		h.settled(ctx, rec, out.rec, verdict)
		h.settleWaiting(out.rec)
		if ev != nil && ev.Kind == tasks.Cancel && !settled.Status.Terminal() && !settled.CancelRequested {
			h.opts.Metrics.TaskCancelRequested()
			if out.rec.Status.Terminal() {
				h.opts.Metrics.TaskSettled(out.rec.Status.String(), "", now.Sub(out.rec.Created))
			}
		}
		return out, nil
	}
}

// settled logs and carries out a verdict of Rules.Settle that was stored:
// an expired task's call here is cancelled, a re-run runs here.
func (h *Handler) settled(ctx context.Context, before, rec tasks.Record, v tasks.Verdict) {
	switch v {
	case tasks.SettleLost, tasks.SettleExpired:
		h.opts.Metrics.TaskSettled(rec.Status.String(), CauseReason(rec.Cause), rec.Updated.Sub(rec.Created))
		h.log.Warn("task settled", "task", tasks.Prefix(rec.ID), "generation", rec.Executor.Generation,
			"reason", CauseReason(rec.Cause), "executor", before.Executor.Replica)
		h.opts.Tracer.TaskSettled(ctx, tracing.Task{ID: rec.ID, Generation: rec.Executor.Generation, Tool: rec.Tool},
			rec.Status.String(), CauseReason(rec.Cause))
		h.abandonLocal(rec.ID, CauseReason(rec.Cause))
	case tasks.Rerun:
		h.opts.Metrics.TaskRerun()
		h.log.Warn("task re-run", "task", tasks.Prefix(rec.ID), "generation", rec.Executor.Generation,
			"reason", replay.ReasonExecutorLost, "reruns", rec.Reruns, "executor", before.Executor.Replica)
		h.start(ctx, rec, h.rerunRound(rec), 0)
	case tasks.Reattach:
		// No upstream task is mirrored yet: nothing to watch again.
		h.log.Warn("task re-attach not served", "task", tasks.Prefix(rec.ID), "generation", rec.Executor.Generation)
	}
}

// itoa renders n in decimal.
func itoa(n int) string { return string(mustJSON(n)) }
