// wire.go holds the JSON-RPC and HTTP forms taskrun reads and writes: the
// request's declaration, its own answers and refusals, the in-memory
// answer of the wrapped handler, and the task as tasks/get shows it
// (SEP-2663, "Task", "CreateTaskResult", "DetailedTask").

package taskrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// JSON-RPC error codes of the sessionless era that taskrun answers with.
const (
	// codeHeaderMismatch: a routing header disagrees with the body
	// (SEP-2243).
	codeHeaderMismatch = -32020
	// codeMissingCapability: the request lacks a client capability it
	// needs (SEP-2575, "Missing Required Capabilities").
	codeMissingCapability = -32021
)

// Names of the wire.
const (
	metaRelatedTask = "io.modelcontextprotocol/related-task"
	mediaJSON       = "application/json"
	mediaSSE        = "text/event-stream"
	// sessionlessVersion is the protocol version a round sent without a
	// client's request (a re-run) names.
	sessionlessVersion = "2026-07-28"
)

// mustJSON returns the encoding of v, which cannot fail for the values
// taskrun builds (maps, strings, numbers, raw JSON that was decoded).
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("taskrun: encoding " + fmt.Sprintf("%T", v) + ": " + err.Error())
	}
	return b
}

// declared reports whether params declare the Tasks extension in their
// own client capabilities (SEP-2663, "Capability Negotiation").
func declared(params wire.Object) bool {
	caps := wire.DecodeObject(wire.DecodeObject(params["_meta"])[wire.MetaClientCapabilities])
	ext := wire.DecodeObject(caps["extensions"])
	v, ok := ext[tasks.ExtensionID]
	return ok && string(v) != "null"
}

// withoutDeclaration returns the params' _meta without the Tasks extension
// in its client capabilities: the call's _meta as the engine gets it, so
// that an upstream runs it as a plain call. nil when params have no _meta.
func withoutDeclaration(params wire.Object) wire.Object {
	meta := wire.DecodeObject(params["_meta"])
	if meta == nil {
		return nil
	}
	meta = meta.Clone()
	if caps := wire.DecodeObject(meta[wire.MetaClientCapabilities]); caps != nil {
		caps = caps.Clone()
		if ext := wire.DecodeObject(caps["extensions"]); ext != nil {
			ext = ext.Clone()
			delete(ext, tasks.ExtensionID)
			if len(ext) == 0 {
				delete(caps, "extensions")
			} else {
				caps["extensions"] = mustJSON(ext)
			}
		}
		meta[wire.MetaClientCapabilities] = mustJSON(caps)
	}
	return meta
}

// writeJSON answers msg as one application/json body with status.
func writeJSON(w http.ResponseWriter, status int, msg jsonrpc.Message) {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		http.Error(w, "taskrun: encoding the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", mediaJSON)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	w.Write(data)
}

// writeResult answers req with result.
func writeResult(w http.ResponseWriter, req *jsonrpc.Request, result any) {
	writeJSON(w, http.StatusOK, &jsonrpc.Response{ID: req.ID, Result: mustJSON(result)})
}

// writeError answers req with the JSON-RPC error code and message, with
// data (nil: none) plus reason, if any, under status.
func writeError(w http.ResponseWriter, req *jsonrpc.Request, status int, code int64, message string, reason replay.Reason, data map[string]any) {
	if reason != "" {
		if data == nil {
			data = map[string]any{}
		}
		data["reason"] = reason
	}
	e := &jsonrpc.Error{Code: code, Message: message}
	if data != nil {
		e.Data = mustJSON(data)
	}
	var id jsonrpc.ID
	if req != nil {
		id = req.ID
	}
	writeJSON(w, status, &jsonrpc.Response{ID: id, Error: e})
}

// notFound answers the -32602 of a task ID unknown to the request's
// subject: never created, expired, or another subject's (SEP-2663, "Error
// Handling").
func notFound(w http.ResponseWriter, req *jsonrpc.Request, id string) {
	writeError(w, req, http.StatusOK, jsonrpc.CodeInvalidParams,
		"task "+tasks.Prefix(id)+"… not found: it never existed, expired, or belongs to another user; call the tool again to start a new task",
		replay.ReasonTaskNotFound, nil)
}

// missingCapability answers -32021 naming the extension.
func missingCapability(w http.ResponseWriter, req *jsonrpc.Request, what string) {
	writeError(w, req, http.StatusOK, codeMissingCapability,
		what+" needs the client capability "+tasks.ExtensionID+": declare it in params._meta[\""+wire.MetaClientCapabilities+"\"].extensions",
		replay.ReasonCapabilityMissing,
		map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasks.ExtensionID: map[string]any{}}}})
}

// answer is what the wrapped handler wrote, kept in memory.
type answer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newAnswer() *answer { return &answer{header: http.Header{}} }

// Header implements http.ResponseWriter.
func (a *answer) Header() http.Header { return a.header }

// WriteHeader implements http.ResponseWriter; only the first status counts.
func (a *answer) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
}

// Write implements http.ResponseWriter.
func (a *answer) Write(p []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	return a.body.Write(p)
}

// Flush implements http.Flusher: the answer is read once complete.
func (a *answer) Flush() {}

// sse reports whether the answer is an SSE stream.
func (a *answer) sse() bool {
	mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type"))
	return mt == mediaSSE
}

// response returns the JSON-RPC response to id the answer holds (a JSON
// body, or an event of an SSE stream), or nil.
func (a *answer) response(id jsonrpc.ID) *jsonrpc.Response {
	if !a.sse() {
		msg, err := jsonrpc.DecodeMessage(bytes.TrimSpace(a.body.Bytes()))
		if resp, ok := msg.(*jsonrpc.Response); err == nil && ok {
			return resp
		}
		return nil
	}
	rd := sse.NewReader(bytes.NewReader(a.body.Bytes()), 0)
	for {
		ev, err := rd.Next()
		if err != nil {
			return nil
		}
		msg, err := jsonrpc.DecodeMessage(ev.Data)
		if resp, ok := msg.(*jsonrpc.Response); err == nil && ok && resp.ID == id {
			return resp
		}
	}
}

// replaceResponse returns the answer's body with the response to id
// replaced by resp, in the answer's form (JSON, or the same SSE events).
func (a *answer) replaceResponse(id jsonrpc.ID, resp *jsonrpc.Response) ([]byte, error) {
	data, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		return nil, err
	}
	if !a.sse() {
		return data, nil
	}
	var out bytes.Buffer
	rd := sse.NewReader(bytes.NewReader(a.body.Bytes()), 0)
	for {
		ev, err := rd.Next()
		if err != nil {
			return out.Bytes(), nil
		}
		if msg, err := jsonrpc.DecodeMessage(ev.Data); err == nil {
			if r, ok := msg.(*jsonrpc.Response); ok && r.ID == id {
				ev.Data = data
			}
		}
		if ev.HasID {
			fmt.Fprintf(&out, "id: %s\n", ev.ID)
		}
		if ev.Name != "" {
			fmt.Fprintf(&out, "event: %s\n", ev.Name)
		}
		if ev.Retry > 0 {
			fmt.Fprintf(&out, "retry: %d\n", ev.Retry.Milliseconds())
		}
		if len(ev.Data) > 0 || ev.Name != "" {
			for line := range strings.SplitSeq(string(ev.Data), "\n") {
				fmt.Fprintf(&out, "data: %s\n", line)
			}
		}
		out.WriteString("\n")
	}
}

// copyTo writes the answer to w as it is, with body instead of its own
// when body is not nil.
func (a *answer) copyTo(w http.ResponseWriter, body []byte) {
	if body == nil {
		body = a.body.Bytes()
	}
	for k, vs := range a.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	status := a.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	w.Write(body)
}

// stamp renders t as tasks show it: ISO 8601 in UTC with milliseconds.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// taskFields returns the members of the Task of rec (SEP-2663, "Task").
func taskFields(rec tasks.Record) map[string]any {
	m := map[string]any{
		"taskId":         rec.ID,
		"status":         rec.Status.String(),
		"createdAt":      stamp(rec.Created),
		"lastUpdatedAt":  stamp(rec.Updated),
		"ttlMs":          rec.TTL.Milliseconds(),
		"pollIntervalMs": rec.PollInterval.Milliseconds(),
	}
	if rec.Message != "" {
		m["statusMessage"] = rec.Message
	}
	return m
}

// createResult is the CreateTaskResult of rec: flat, resultType "task".
func createResult(rec tasks.Record) map[string]any {
	m := taskFields(rec)
	m["resultType"] = "task"
	return m
}

// detailed is tasks/get's answer for rec: the task with resultType
// "complete", its outstanding input requests, its result or its error.
func detailed(rec tasks.Record) map[string]any {
	m := taskFields(rec)
	m["resultType"] = "complete"
	switch rec.Status {
	case tasks.InputRequired:
		reqs := map[string]json.RawMessage{}
		for _, k := range rec.Outstanding() {
			reqs[k] = rec.Input.Slots[k].Request
		}
		m["inputRequests"] = reqs
	case tasks.Completed:
		m["result"] = json.RawMessage(rec.Result)
	case tasks.Failed:
		if rec.Cause != tasks.NoCause || rec.Error == nil {
			m["error"] = map[string]any{
				"code": jsonrpc.CodeInternalError, "message": rec.Message,
				"data": map[string]any{"reason": CauseReason(rec.Cause), "replica": rec.Executor.Replica},
			}
		} else {
			m["error"] = json.RawMessage(rec.Error)
		}
	}
	return m
}
