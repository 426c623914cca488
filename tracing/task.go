// task.go holds the spans of tasks (DESIGN.md, "Tasks: the executor
// rule"): one per round a process runs, linked to the request that started
// it, and one per settle of a task by a reader.

package tracing

import (
	"context"
	"encoding/json"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark-mcp/tidemark/replay"
)

// Attribute keys of task spans.
const (
	// AttrTask is a task ID's first 8 characters, never the whole ID: the
	// ID is a bearer handle.
	AttrTask = attribute.Key("tidemark.task")
	// AttrTaskStatus is the task's status at the end of the span
	// (working, input_required, completed, failed, cancelled).
	AttrTaskStatus = attribute.Key("tidemark.task.status")
)

// Task is what a task span records of its task.
type Task struct {
	// ID is the task ID; only its first 8 characters are recorded
	// (tidemark.task).
	ID string
	// Generation is the task's executor generation, its fencing token
	// (tidemark.generation).
	Generation uint64
	// Tool is the name of the tool the task calls (gen_ai.tool.name).
	Tool string
}

// attrs returns the attributes every span of task carries.
func (task Task) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{
		AttrTask.String(Prefix(task.ID)),
		AttrGeneration.Int64(int64(task.Generation)),
		semconv.GenAIToolName(task.Tool),
	}
}

// Incoming returns ctx carrying the trace context of one request of the
// sessionless era, the parent or link of the task spans it causes: ctx
// itself when it holds a valid span already (one started for the request),
// else the remote span of meta (params._meta, JSON) when meta carries a
// traceparent, else that of header (W3C Trace Context). ctx itself when t
// is nil.
func (t *Tracer) Incoming(ctx context.Context, header http.Header, meta json.RawMessage) context.Context {
	if t == nil || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	var m map[string]any
	if len(meta) > 0 {
		json.Unmarshal(meta, &m) // a malformed _meta carries no trace context
	}
	return t.parent(ctx, header, m)
}

// StartTaskRound starts the span of one round of a task that this process
// runs, named "task round": the root of a trace of its own, since a round
// outlives the request that started it, with an OpenTelemetry link to
// ctx's span (the request's, as Incoming gives it) when ctx has a valid
// one. The returned context carries the round's span. End it with
// EndTaskRound.
func (t *Tracer) StartTaskRound(ctx context.Context, task Task) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(task.attrs(), semconv.GenAIOperationNameExecuteTool)...),
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := t.tracer.Start(ctx, "task round", opts...)
	return ctx, Span{span}
}

// EndTaskRound ends a round's span. status is the task's status as the
// round stored it, "" when the round stored none; reason is why Tidemark,
// not the call's own outcome, decided how the round ended, "" when it did
// not: result_too_large (the result was stored failed), executor_lost or
// task_expired (a reader, or the round's own write, settled the task),
// fenced (the task changed hands), task_not_found (the record is gone),
// unavailable (the store failed the write), shutdown (the process stopped
// the round and released its lease). A failed status or a reason sets the
// Error status, whose description is the reason, else the status.
func (s Span) EndTaskRound(status string, reason replay.Reason) {
	if s.span == nil {
		return
	}
	if status != "" {
		s.span.SetAttributes(AttrTaskStatus.String(status))
	}
	if reason != "" {
		s.span.SetAttributes(AttrReason.String(string(reason)), semconv.ErrorTypeKey.String(string(reason)))
		s.span.SetStatus(codes.Error, string(reason))
	} else if status == "failed" {
		s.span.SetStatus(codes.Error, status)
	}
	s.span.End()
}

// TaskSettled records that a reader settled task: it found the task's
// executor gone (executor_lost) or its time to live over (task_expired)
// and stored it with status (failed). The span, named "task settle", is a
// child of ctx's span (the reading request's, as Incoming gives it; the
// root of a trace of its own for a sweep), has the Error status and ends
// at once.
func (t *Tracer) TaskSettled(ctx context.Context, task Task, status string, reason replay.Reason) {
	if t == nil {
		return
	}
	attrs := append(task.attrs(), AttrTaskStatus.String(status), AttrReason.String(string(reason)),
		semconv.ErrorTypeKey.String(string(reason)))
	_, span := t.tracer.Start(ctx, "task settle", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	span.SetStatus(codes.Error, string(reason))
	span.End()
}
