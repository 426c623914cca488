package taskrun_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tidemark-mcp/tidemark/tasks"
)

// Trace contexts the test's requests carry.
const (
	metaParent   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	headerParent = "00-11111111111111111111111111111111-2222222222222222-01"
	updateParent = "00-33333333333333333333333333333333-4444444444444444-01"
)

// spanLine renders an ended span as one line: name, status, sorted
// attributes, parent and links, with the task ID named by its prefix.
func spanLine(s sdktrace.ReadOnlySpan) string {
	var attrs []string
	for _, kv := range s.Attributes() {
		attrs = append(attrs, string(kv.Key)+"="+kv.Value.Emit())
	}
	sort.Strings(attrs)
	status := "ok"
	if s.Status().Code == codes.Error {
		status = "error " + s.Status().Description
	}
	parent := "root"
	if p := s.Parent(); p.IsValid() {
		parent = p.TraceID().String() + "/" + p.SpanID().String()
	}
	var links []string
	for _, l := range s.Links() {
		links = append(links, l.SpanContext.TraceID().String()+"/"+l.SpanContext.SpanID().String())
	}
	return fmt.Sprintf("%s [%s] %s parent %s links %v", s.Name(), status, strings.Join(attrs, " "), parent, links)
}

// awaitSpans waits until n spans have ended and returns them as lines.
func (f *fixture) awaitSpans(n int) []string {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(f.spans.Ended()) < n {
		if time.Now().After(deadline) {
			f.t.Fatalf("%d spans ended after 10 s, want %d", len(f.spans.Ended()), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var out []string
	for _, s := range f.spans.Ended() {
		out = append(out, spanLine(s))
	}
	return out
}

// TestSpans: each round is a span of a trace of its own linked to the
// request that started it (the tools/call that created the task, the
// tasks/update that answered its input, which claims the task at the next
// generation), recording the task ID's prefix,
// the generation, the tool and the status it stored; a tasks/get that
// finds the executor gone records a settle span under its own trace
// context.
func TestSpans(t *testing.T) {
	f := newFixture(t)
	close(f.release)

	r := f.post("tools/call", map[string]any{"name": "work", "arguments": map[string]any{},
		"_meta": map[string]any{"traceparent": metaParent}}, true, map[string]string{"Traceparent": headerParent})
	work := r.result["taskId"].(string)
	f.await(work, "completed")
	f.awaitSpans(1)

	crash := f.create("crash")
	f.await(crash, "failed")
	f.awaitSpans(2)

	ask := f.create("ask")
	f.await(ask, "input_required")
	f.awaitSpans(3)
	f.post("tasks/update", map[string]any{"taskId": ask, "inputResponses": map[string]any{
		"1-a": map[string]any{"action": "accept", "content": map[string]any{"v": "A"}},
		"1-b": map[string]any{"action": "accept", "content": map[string]any{"v": "B"}},
	}}, true, map[string]string{"Traceparent": updateParent})
	f.await(ask, "completed")
	f.awaitSpans(4)

	lost, err := tasks.New(tasks.Spec{
		ID: "LOSTSPANLOSTSPANLOSTSPANLO", Tool: "work", Call: []byte(`{"name":"work"}`),
		Executor: tasks.Executor{Replica: "r1", Boot: "an-earlier-boot"}, Now: time.Now(),
		TTL: time.Hour, PollInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.CreateTask(context.Background(), lost); err != nil {
		t.Fatal(err)
	}
	f.post("tasks/get", map[string]any{"taskId": lost.ID}, true, map[string]string{"Traceparent": headerParent})
	got := f.awaitSpans(5)

	p := tasks.Prefix
	want := []string{
		"task round [ok] gen_ai.operation.name=execute_tool gen_ai.tool.name=work tidemark.generation=1 tidemark.task.status=completed tidemark.task=" + p(work) +
			" parent root links [4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7]",
		"task round [error failed] gen_ai.operation.name=execute_tool gen_ai.tool.name=crash tidemark.generation=1 tidemark.task.status=failed tidemark.task=" + p(crash) +
			" parent root links []",
		"task round [ok] gen_ai.operation.name=execute_tool gen_ai.tool.name=ask tidemark.generation=1 tidemark.task.status=input_required tidemark.task=" + p(ask) +
			" parent root links []",
		"task round [ok] gen_ai.operation.name=execute_tool gen_ai.tool.name=ask tidemark.generation=2 tidemark.task.status=completed tidemark.task=" + p(ask) +
			" parent root links [33333333333333333333333333333333/4444444444444444]",
		"task settle [error executor_lost] error.type=executor_lost gen_ai.tool.name=work tidemark.generation=2 tidemark.reason=executor_lost tidemark.task.status=failed tidemark.task=LOSTSPAN" +
			" parent 11111111111111111111111111111111/2222222222222222 links []",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, s := range f.spans.Ended() {
		for _, kv := range s.Attributes() {
			for _, id := range []string{work, crash, ask, lost.ID} {
				if strings.Contains(kv.Value.Emit(), id) {
					t.Errorf("span %s attribute %s carries a whole task ID", s.Name(), kv.Key)
				}
			}
		}
	}
}

// TestSpanShutdown: a round that Shutdown stops stores nothing; its span
// says shutdown, without a status.
func TestSpanShutdown(t *testing.T) {
	f := newFixture(t)
	id := f.create("work")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.h.Shutdown(ctx)
	got := f.awaitSpans(1)
	want := "task round [error shutdown] error.type=shutdown gen_ai.operation.name=execute_tool gen_ai.tool.name=work tidemark.generation=1 tidemark.reason=shutdown tidemark.task=" +
		tasks.Prefix(id) + " parent root links []"
	if len(got) != 1 || got[0] != want {
		t.Errorf("spans %q, want %q", got, want)
	}
}
