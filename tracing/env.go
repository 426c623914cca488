// Package tracing records Tidemark's OpenTelemetry traces: one server span
// per JSON-RPC request following the OpenTelemetry semantic conventions for
// MCP, one span per resume, one per store write, one per round of a task
// and one per settle of a task by a reader. Trace context comes from
// the message's params._meta (traceparent, tracestate; SEP-414) or else
// from the HTTP request's headers (W3C Trace Context).
//
// A library user passes any trace.TracerProvider to New; tidemark serve
// builds one from the standard OTEL_* environment variables with FromEnv.
// A nil *Tracer records nothing and costs a nil check per event.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// ServiceName is the service.name of tidemark serve's traces unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES says otherwise.
const ServiceName = "tidemark"

// FromEnv returns a TracerProvider that exports spans over OTLP as the
// standard OpenTelemetry environment variables say, or nil when they ask
// for no tracing. Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or OTEL_TRACES_EXPORTER is
// "otlp"; it is off when none is, or when OTEL_TRACES_EXPORTER is "none"
// or OTEL_SDK_DISABLED is "true". The protocol is
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
// "http/protobuf" (the default) or "grpc". The exporters read the
// endpoint, headers, timeout, compression and TLS variables themselves;
// the provider reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*; the
// resource reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// (OpenTelemetry specification, "Environment Variable Specification").
//
// It fails, naming the variable, on an exporter or protocol it does not
// support (OTEL_TRACES_EXPORTER other than otlp or none; http/json). The
// caller shuts the provider down at exit, which flushes queued spans.
func FromEnv(ctx context.Context) (*sdktrace.TracerProvider, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	switch exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return nil, nil
	case "":
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: tidemark exports traces over OTLP only; set it to otlp or none", exp)
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: want http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(ServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)), nil
}
