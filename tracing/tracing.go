// tracing.go holds the spans Tidemark starts: a request's, following the
// OpenTelemetry MCP semantic conventions, a resume's and a store write's,
// with the trace context they take from params._meta or HTTP headers.

package tracing

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
)

// scope is the instrumentation scope name of Tidemark's spans.
const scope = "github.com/tidemark-mcp/tidemark"

// Attribute keys of Tidemark's own span attributes.
const (
	// AttrReason is the refusal's reason (replay.Reason), "replay" for an
	// accepted resume, or why a call got no answer (Span.EndReleased).
	AttrReason = attribute.Key("tidemark.reason")
	// AttrCursor is the Last-Event-ID of a resume.
	AttrCursor = attribute.Key("tidemark.cursor")
	// AttrStore is the store backend (memory, durable, redis).
	AttrStore = attribute.Key("tidemark.store")
	// AttrGeneration is the generation a store write carried.
	AttrGeneration = attribute.Key("tidemark.generation")
)

// Tracer starts Tidemark's spans. A nil *Tracer starts none.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns a Tracer that starts spans from tp, taking trace context in
// the W3C Trace Context and Baggage formats; nil when tp is nil.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{
		tracer: tp.Tracer(scope),
		prop:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
}

// Span is a span a Tracer started; the zero Span (from a nil Tracer)
// records nothing.
type Span struct{ span trace.Span }

// Message is what a request span records of one inbound JSON-RPC request
// or notification.
type Message struct {
	// Method is the JSON-RPC method.
	Method string
	// ID is the request id as its JSON text (1, "a"); empty for a
	// notification.
	ID string
	// Params is the message's params, from which the span takes
	// _meta.traceparent and _meta.tracestate, the tool or prompt name and
	// the resource URI.
	Params json.RawMessage
	// Session is the session token; only its first 8 characters are
	// recorded (mcp.session.id).
	Session string
	// ProtocolVersion is the session's MCP protocol version.
	ProtocolVersion string
}

// params holds the fields of a message's params a span records.
type params struct {
	Name string         `json:"name"`
	URI  string         `json:"uri"`
	Meta map[string]any `json:"_meta"`
}

// metaCarrier reads trace context from params._meta.
type metaCarrier map[string]any

func (c metaCarrier) Get(key string) string {
	s, _ := c[key].(string)
	return s
}
func (c metaCarrier) Set(key, value string) { c[key] = value }
func (c metaCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// StartRequest starts the server span of one JSON-RPC message, named
// "{mcp.method.name} {target}" (target: the tool or prompt name, when
// there is one) with the attributes of the OpenTelemetry MCP semantic
// conventions. Its parent is the trace context of params._meta when it
// carries a traceparent, else that of header. End the span with EndRequest.
func (t *Tracer) StartRequest(ctx context.Context, header http.Header, m Message) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	var p params
	if len(m.Params) > 0 {
		json.Unmarshal(m.Params, &p) // a malformed params records no target
	}
	ctx = t.parent(ctx, header, p.Meta)
	method := metrics.Method(m.Method)
	name := method
	attrs := []attribute.KeyValue{
		semconv.McpMethodNameKey.String(method),
		semconv.NetworkTransportTCP,
		semconv.NetworkProtocolName("http"),
		semconv.JSONRPCProtocolVersion("2.0"),
	}
	switch {
	case m.Method == "tools/call" && p.Name != "":
		name += " " + p.Name
		attrs = append(attrs, semconv.GenAIToolName(p.Name), semconv.GenAIOperationNameExecuteTool)
	case m.Method == "prompts/get" && p.Name != "":
		name += " " + p.Name
		attrs = append(attrs, semconv.GenAIPromptName(p.Name))
	case p.URI != "" && (m.Method == "resources/read" || m.Method == "resources/subscribe" || m.Method == "resources/unsubscribe"):
		attrs = append(attrs, semconv.McpResourceURI(p.URI))
	}
	if m.ID != "" {
		attrs = append(attrs, semconv.JSONRPCRequestID(m.ID))
	}
	if m.Session != "" {
		attrs = append(attrs, semconv.McpSessionID(Prefix(m.Session)))
	}
	if m.ProtocolVersion != "" {
		attrs = append(attrs, semconv.McpProtocolVersion(m.ProtocolVersion))
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return ctx, Span{span}
}

// Extract returns ctx carrying the trace context of header (W3C Trace
// Context), as the remote parent of the spans started from it; ctx itself
// when t is nil.
func (t *Tracer) Extract(ctx context.Context, header http.Header) context.Context {
	if t == nil {
		return ctx
	}
	return t.prop.Extract(ctx, propagation.HeaderCarrier(header))
}

// parent returns ctx with the remote parent of _meta when it has a
// traceparent, else with that of header.
func (t *Tracer) parent(ctx context.Context, header http.Header, meta map[string]any) context.Context {
	if _, ok := meta["traceparent"].(string); ok {
		return t.prop.Extract(ctx, metaCarrier(meta))
	}
	return t.prop.Extract(ctx, propagation.HeaderCarrier(header))
}

// EndRequest ends a request span: errorType is "" when the request
// succeeded, else its error.type (metrics.ErrorType's value, or
// metrics.ErrorTool); a JSON-RPC error code is recorded as
// rpc.response.status_code too.
func (s Span) EndRequest(errorType string) {
	if s.span == nil {
		return
	}
	if errorType != "" {
		s.span.SetAttributes(semconv.ErrorTypeKey.String(errorType))
		if _, err := strconv.Atoi(errorType); err == nil {
			s.span.SetAttributes(semconv.RPCResponseStatusCode(errorType))
		}
		s.span.SetStatus(codes.Error, errorType)
	}
	s.span.End()
}

// EndReleased ends the request span of a call that gets no answer from
// this process: released undelivered (the client's connection was cut, or
// the delivery failed), or left in flight when its session or generation
// ended. reason says why (replay.ReasonClientGone, the session's end
// reason, ...); it is recorded as error.type and tidemark.reason, and as
// the Error status's description.
func (s Span) EndReleased(reason replay.Reason) {
	if s.span == nil {
		return
	}
	s.span.SetAttributes(semconv.ErrorTypeKey.String(string(reason)), AttrReason.String(string(reason)))
	s.span.SetStatus(codes.Error, string(reason))
	s.span.End()
}

// StartResume starts the span of one GET with Last-Event-ID, named
// "resume", a child of header's trace context. End it with EndResume.
func (t *Tracer) StartResume(ctx context.Context, header http.Header, session, cursor string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx = t.prop.Extract(ctx, propagation.HeaderCarrier(header))
	attrs := []attribute.KeyValue{AttrCursor.String(cursor)}
	if session != "" {
		attrs = append(attrs, semconv.McpSessionID(Prefix(session)))
	}
	ctx, span := t.tracer.Start(ctx, "resume", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return ctx, Span{span}
}

// EndResume ends a resume span with its reason, replay.ReasonReplay when
// accepted (HTTP status 200), else the refusal's, and the HTTP status the
// catalogue gives it (replay.Reason.Status).
func (s Span) EndResume(reason replay.Reason) {
	if s.span == nil {
		return
	}
	status := http.StatusOK
	if reason != replay.ReasonReplay {
		status = reason.Status()
	}
	s.span.SetAttributes(semconv.HTTPResponseStatusCode(status), AttrReason.String(string(reason)))
	if reason != replay.ReasonReplay {
		s.span.SetAttributes(semconv.ErrorTypeKey.String(string(reason)))
		s.span.SetStatus(codes.Error, string(reason))
	}
	s.span.End()
}

// StartStoreWrite starts the span of one store write, named "store {op}"
// (op: metrics' Op constants), a child of ctx's span.
func (t *Tracer) StartStoreWrite(ctx context.Context, store, op, session string, generation uint64) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	attrs := []attribute.KeyValue{AttrStore.String(store), semconv.McpSessionID(Prefix(session))}
	if generation > 0 {
		attrs = append(attrs, AttrGeneration.Int64(int64(generation)))
	}
	ctx, span := t.tracer.Start(ctx, "store "+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, Span{span}
}

// End ends a span, recording err (nil: success) as its status.
func (s Span) End(err error) {
	if s.span == nil {
		return
	}
	if err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.End()
}

// Prefix returns the first redact.Shown (8) characters of a session
// token, the form in which spans record it (never the whole token), as
// logs do.
func Prefix(token string) string {
	if len(token) > redact.Shown {
		return token[:redact.Shown]
	}
	return token
}
