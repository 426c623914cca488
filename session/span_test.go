// span_test.go holds the tests of the server spans of calls (package
// tracing): each span a call starts ends once, whether the call is
// answered, released undelivered, or left in flight when its session ends.

package session_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// endedSpan is what a test checks of an ended span.
type endedSpan struct {
	name      string
	id        string // jsonrpc.request.id
	status    codes.Code
	desc      string // the status description
	errorType string // error.type; "" when absent
	reason    string // tidemark.reason; "" when absent
}

// ended returns the spans rec saw end, in the order they ended.
func ended(rec *tracetest.SpanRecorder) []endedSpan {
	var out []endedSpan
	for _, s := range rec.Ended() {
		e := endedSpan{name: s.Name(), status: s.Status().Code, desc: s.Status().Description}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "jsonrpc.request.id":
				e.id = kv.Value.AsString()
			case "error.type":
				e.errorType = kv.Value.AsString()
			case tracing.AttrReason:
				e.reason = kv.Value.AsString()
			}
		}
		out = append(out, e)
	}
	return out
}

// tracedFixture returns a fixture whose registry traces to the returned
// recorder.
func tracedFixture(t *testing.T) (*fixture, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return newFixture(t, session.Options{Tracer: tracing.New(tp), Logger: slog.New(slog.DiscardHandler)}), rec
}

func countdownCall(t *testing.T, id string, n, delayMS int) *jsonrpc.Request {
	return request(t, id, "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": n, "delay_ms": delayMS}})
}

// TestSpanOfReleasedCall: of two calls opened on one stream, the first is
// delivered and answered; the second is released undelivered, as the
// transport does when the client's connection is cut during delivery. Each
// span ends once: the answered one with status unset, the released one
// with status Error and error.type and tidemark.reason client_gone.
func TestSpanOfReleasedCall(t *testing.T) {
	ctx := context.Background()
	f, rec := tracedFixture(t)
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	a, b := countdownCall(t, "a", 1, 0), countdownCall(t, "b", 1, 0)
	s, err := l.OpenStream(ctx, []*jsonrpc.Request{a, b}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Deliver(ctx, a, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	l.ReleaseCalls(ctx, s, []*jsonrpc.Request{b}, replay.ReasonClientGone)
	rd := l.Reader(s, s)
	for done := false; !done; {
		evs, err := rd.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done = evs[len(evs)-1].End
	}
	want := []endedSpan{
		{name: "tools/call countdown", id: "b", status: codes.Error, desc: "client_gone", errorType: "client_gone", reason: "client_gone"},
		{name: "tools/call countdown", id: "a", status: codes.Unset},
	}
	checkSpans(t, rec, want)
}

// TestSpanOfEndedSession: a call in flight when its session is ended
// (DELETE) never gets an answer; its span ends once, when the session
// ends, with status Error and error.type and tidemark.reason deleted.
func TestSpanOfEndedSession(t *testing.T) {
	ctx := context.Background()
	f, rec := tracedFixture(t)
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	c := countdownCall(t, "slow", 1, 60000)
	if _, err := l.OpenStream(ctx, []*jsonrpc.Request{c}, false, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Deliver(ctx, c, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	if err := f.reg.End(ctx, l.Token(), store.EndDeleted); err != nil {
		t.Fatal(err)
	}
	want := []endedSpan{{name: "tools/call countdown", id: "slow", status: codes.Error, desc: "deleted", errorType: "deleted", reason: "deleted"}}
	checkSpans(t, rec, want)
	f.reg.Close() // waits for the engine sessions to close: an answer sent late would end the span again
	checkSpans(t, rec, want)
}

// checkSpans checks that the spans of calls rec saw end are want, in any
// order; initialize's span, which every session has, is left out.
func checkSpans(t *testing.T, rec *tracetest.SpanRecorder, want []endedSpan) {
	t.Helper()
	var got []endedSpan
	// A span ends just after its answer is stored, which is when a reader
	// can see the answer: wait for it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		got = got[:0]
		for _, s := range ended(rec) {
			if s.name != "initialize" {
				got = append(got, s)
			}
		}
		if len(got) >= len(want) || time.Now().After(deadline) {
			break
		}
	}
	if len(got) != len(want) {
		t.Fatalf("ended spans %+v, want %+v", got, want)
	}
	// Calls answered and released concurrently end in either order.
	byID := func(a, b endedSpan) int { return strings.Compare(a.id, b.id) }
	slices.SortFunc(got, byID)
	want = slices.SortedFunc(slices.Values(want), byID)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("ended span %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if n := len(rec.Started()); n != len(rec.Ended()) {
		t.Errorf("%d spans started, %d ended", n, len(rec.Ended()))
	}
}
