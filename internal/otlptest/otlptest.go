// Package otlptest runs an OpenTelemetry trace receiver for tests: an
// OTLP/HTTP or OTLP/gRPC endpoint on a free loopback port that decodes each
// export with the official OTLP protocol types (go.opentelemetry.io/proto/otlp)
// and keeps the spans for the test to read.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, its attributes as strings.
type Span struct {
	Name         string
	Kind         tracepb.Span_SpanKind
	TraceID      string // hex
	SpanID       string // hex
	ParentSpanID string // hex; empty for a root span
	Attributes   map[string]string
	StatusCode   tracepb.Status_StatusCode
	Service      string // the resource's service.name
}

// Receiver collects the spans exported to it.
type Receiver struct {
	// Endpoint is the receiver's address for OTEL_EXPORTER_OTLP_ENDPOINT:
	// http://127.0.0.1:PORT.
	Endpoint string

	mu      sync.Mutex
	spans   []Span
	changed chan struct{}
}

// Start starts a receiver of protocol, as OTEL_EXPORTER_OTLP_PROTOCOL
// names it: "grpc" (StartGRPC), else "http/protobuf" (StartHTTP).
func Start(t testing.TB, protocol string) *Receiver {
	t.Helper()
	if protocol == "grpc" {
		return StartGRPC(t)
	}
	return StartHTTP(t)
}

// StartHTTP starts an OTLP/HTTP receiver (protobuf bodies at
// /v1/traces), closed when the test ends.
func StartHTTP(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &msg)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	})
	ln := listen(t)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	r.Endpoint = "http://" + ln.Addr().String()
	return r
}

// StartGRPC starts an OTLP/gRPC receiver, stopped when the test ends.
func StartGRPC(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{changed: make(chan struct{})}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, traceService{r: r})
	ln := listen(t)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	r.Endpoint = "http://" + ln.Addr().String()
	return r
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func (r *Receiver) add(msg *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range msg.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Attributes: attrs(s.GetAttributes()), StatusCode: s.GetStatus().GetCode(), Service: service,
				}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentSpanID = hex.EncodeToString(s.GetParentSpanId())
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// attrs renders OTLP attributes as strings (an int as its decimal).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = itoa(v.GetIntValue())
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = map[bool]string{true: "true", false: "false"}[v.GetBoolValue()]
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitFor returns the spans received once match accepts them, waiting up
// to timeout for more exports; it calls t.Fatal with what arrived when
// match never accepts.
func (r *Receiver) WaitFor(t testing.TB, timeout time.Duration, match func([]Span) bool) []Span {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		spans, changed := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if match(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("otlptest: the spans wanted did not arrive within %v; received %d: %+v", timeout, len(spans), spans)
		}
	}
}
