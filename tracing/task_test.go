// task_test.go tests the task spans as an in-memory span recorder gets
// them.

package tracing_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// spanText renders an ended span as one line: name, status, sorted
// attributes, and its links' span IDs.
func spanText(s sdktrace.ReadOnlySpan) string {
	var attrs []string
	for _, kv := range s.Attributes() {
		attrs = append(attrs, string(kv.Key)+"="+kv.Value.Emit())
	}
	sort.Strings(attrs)
	var links []string
	for _, l := range s.Links() {
		links = append(links, l.SpanContext.TraceID().String()+"/"+l.SpanContext.SpanID().String())
	}
	status := "unset"
	if s.Status().Code == codes.Error {
		status = "error " + s.Status().Description
	}
	return fmt.Sprintf("%s [%s] %s links %v", s.Name(), status, strings.Join(attrs, " "), links)
}

// TestTaskSpans: a round is the root of a trace of its own linked to the
// span of the request that started it, from params._meta's traceparent
// before the header's, with the task ID cut to a prefix; a settle by a
// reader is a child of the reader's request.
func TestTaskSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tr := tracing.New(tp)
	header := http.Header{"Traceparent": {"00-11111111111111111111111111111111-2222222222222222-01"}}
	meta := []byte(`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)
	task := tracing.Task{ID: "ABCDEFGHIJKLMNOPQRSTUVWXYZ", Generation: 3, Tool: "countdown"}

	ctx, round := tr.StartTaskRound(tr.Incoming(context.Background(), header, meta), task)
	if sc := trace.SpanContextFromContext(ctx); !sc.IsValid() || sc.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("round span context %v: want a trace of its own", sc)
	}
	round.EndTaskRound("completed", "")
	_, round = tr.StartTaskRound(tr.Incoming(context.Background(), header, nil), task)
	round.EndTaskRound("failed", replay.ReasonResultTooLarge)
	_, round = tr.StartTaskRound(tr.Incoming(context.Background(), nil, nil), task)
	round.EndTaskRound("", replay.ReasonShutdown)
	_, round = tr.StartTaskRound(context.Background(), task)
	round.EndTaskRound("failed", "")
	tr.TaskSettled(tr.Incoming(context.Background(), header, []byte(`{"progressToken":1}`)), tracing.Task{ID: "SHORT", Generation: 2, Tool: "work"},
		"failed", replay.ReasonExecutorLost)

	want := []string{
		"task round [unset] gen_ai.operation.name=execute_tool gen_ai.tool.name=countdown tidemark.generation=3 tidemark.task.status=completed tidemark.task=ABCDEFGH links [4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7]",
		"task round [error result_too_large] error.type=result_too_large gen_ai.operation.name=execute_tool gen_ai.tool.name=countdown tidemark.generation=3 tidemark.reason=result_too_large tidemark.task.status=failed tidemark.task=ABCDEFGH links [11111111111111111111111111111111/2222222222222222]",
		"task round [error shutdown] error.type=shutdown gen_ai.operation.name=execute_tool gen_ai.tool.name=countdown tidemark.generation=3 tidemark.reason=shutdown tidemark.task=ABCDEFGH links []",
		"task round [error failed] gen_ai.operation.name=execute_tool gen_ai.tool.name=countdown tidemark.generation=3 tidemark.task.status=failed tidemark.task=ABCDEFGH links []",
		"task settle [error executor_lost] error.type=executor_lost gen_ai.tool.name=work tidemark.generation=2 tidemark.reason=executor_lost tidemark.task.status=failed tidemark.task=SHORT links []",
	}
	spans := rec.Ended()
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, s := range spans {
		if got := spanText(s); got != want[i] {
			t.Errorf("span %d:\n got %s\nwant %s", i, got, want[i])
		}
		if i < 4 && (s.Parent().IsValid() || s.SpanKind() != trace.SpanKindInternal) {
			t.Errorf("round span %d: parent %v kind %v, want a root, internal", i, s.Parent(), s.SpanKind())
		}
	}
	if p := spans[4].Parent(); p.TraceID().String() != "11111111111111111111111111111111" || p.SpanID().String() != "2222222222222222" || !p.IsRemote() {
		t.Errorf("settle span parent %v, want the reader's header traceparent", p)
	}
}

// TestTaskSpansNilTracer: a nil Tracer starts no task span and leaves the
// context as it is.
func TestTaskSpansNilTracer(t *testing.T) {
	var tr *tracing.Tracer
	ctx := context.Background()
	if tr.Incoming(ctx, http.Header{"Traceparent": {"00-11111111111111111111111111111111-2222222222222222-01"}}, nil) != ctx {
		t.Error("nil Tracer changed the context")
	}
	ctx2, s := tr.StartTaskRound(ctx, tracing.Task{ID: "x"})
	s.EndTaskRound("completed", "")
	tr.TaskSettled(ctx, tracing.Task{ID: "x"}, "failed", replay.ReasonExecutorLost)
	if ctx2 != ctx {
		t.Error("nil Tracer changed the round's context")
	}
}
