// tracing_test.go tests the spans as an OTLP receiver gets them.

package tracing_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tidemark-mcp/tidemark/internal/otlptest"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// clearEnv unsets every OTEL_* variable FromEnv reads, for the test.
func clearEnv(t *testing.T) {
	for _, k := range []string{
		"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	} {
		t.Setenv(k, "")
	}
}

// TestFromEnvOff: with no OTEL_* variable, or with tracing turned off,
// there is no provider; an exporter tidemark lacks is an error naming it.
func TestFromEnvOff(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"},
	} {
		clearEnv(t)
		for k, v := range env {
			t.Setenv(k, v)
		}
		tp, err := tracing.FromEnv(context.Background())
		if tp != nil || err != nil {
			t.Errorf("env %v: provider %v, error %v; want none", env, tp, err)
		}
	}
	clearEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := tracing.FromEnv(context.Background()); err == nil || err.Error() != "OTEL_TRACES_EXPORTER=zipkin: tidemark exports traces over OTLP only; set it to otlp or none" {
		t.Errorf("zipkin: %v", err)
	}
}

// TestExportRequestSpan: a request span reaches an OTLP receiver over
// HTTP and over gRPC, named "{method} {tool}", a child of the span named in
// params._meta.traceparent (not of the HTTP header's), with the MCP
// semantic conventions' attributes and the session token cut to a prefix.
func TestExportRequestSpan(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			recv := otlptest.Start(t, protocol)
			clearEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.Endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_SERVICE_NAME", "tidemark-test")
			tp, err := tracing.FromEnv(context.Background())
			if err != nil || tp == nil {
				t.Fatalf("FromEnv: %v, %v", tp, err)
			}
			tr := tracing.New(tp)
			header := http.Header{"Traceparent": {"00-11111111111111111111111111111111-2222222222222222-01"}}
			_, span := tr.StartRequest(context.Background(), header, tracing.Message{
				Method: "tools/call", ID: "7",
				Params:          []byte(`{"name":"countdown","arguments":{"n":3},"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"rojo=00f067aa0ba902b7"}}`),
				Session:         "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
				ProtocolVersion: "2025-11-25",
			})
			span.EndRequest("-32602")
			_, resume := tr.StartResume(context.Background(), header, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcd-1-3-9")
			resume.EndResume(replay.ReasonGenerationMismatch)
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := recv.WaitFor(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) == 2 })
			req, res := spans[0], spans[1]
			if req.Name != "tools/call countdown" || req.Kind != tracepb.Span_SPAN_KIND_SERVER || req.Service != "tidemark-test" {
				t.Errorf("request span %q kind %v service %q", req.Name, req.Kind, req.Service)
			}
			if req.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || req.ParentSpanID != "00f067aa0ba902b7" {
				t.Errorf("request span trace %s parent %s; want the _meta traceparent's", req.TraceID, req.ParentSpanID)
			}
			want := map[string]string{
				"mcp.method.name": "tools/call", "gen_ai.tool.name": "countdown", "gen_ai.operation.name": "execute_tool",
				"jsonrpc.request.id": "7", "mcp.session.id": "ABCDEFGH", "mcp.protocol.version": "2025-11-25",
				"error.type": "-32602", "rpc.response.status_code": "-32602", "network.transport": "tcp",
			}
			for k, v := range want {
				if req.Attributes[k] != v {
					t.Errorf("request span %s = %q, want %q (all: %v)", k, req.Attributes[k], v, req.Attributes)
				}
			}
			if req.StatusCode != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("request span status %v, want error", req.StatusCode)
			}
			if res.Name != "resume" || res.TraceID != "11111111111111111111111111111111" || res.ParentSpanID != "2222222222222222" ||
				res.Attributes["tidemark.reason"] != "generation_mismatch" || res.Attributes["http.response.status_code"] != "409" ||
				res.Attributes["mcp.session.id"] != "ABCDEFGH" {
				t.Errorf("resume span %+v; want a child of the header's traceparent with reason and status", res)
			}
		})
	}
}

// TestNilTracer: a nil Tracer starts nothing and its spans end quietly.
func TestNilTracer(t *testing.T) {
	var tr *tracing.Tracer
	ctx := context.Background()
	ctx2, span := tr.StartRequest(ctx, nil, tracing.Message{Method: "ping"})
	span.EndRequest("")
	if ctx2 != ctx {
		t.Error("nil Tracer changed the context")
	}
	_, s := tr.StartStoreWrite(ctx, "memory", "append", "tok", 1)
	s.End(nil)
}
