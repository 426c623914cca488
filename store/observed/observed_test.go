// observed_test.go tests what an observed store records of each call.

package observed_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/metrics/prom"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/store/observed"
	"github.com/tidemark-mcp/tidemark/store/storetest"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// TestContract: the wrapper keeps every guarantee of the store it wraps.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		rec, err := prom.New(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return observed.New(memory.New(memory.Options{}), metrics.StoreMemory, rec, nil)
	})
}

// TestRecordsCallsAndFencing: each call is counted under its store and
// operation, a write with a stale generation counts as fenced (not as a
// store error), and every write has a span named for its operation.
func TestRecordsCallsAndFencing(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	st := observed.New(memory.New(memory.Options{}), metrics.StoreMemory, rec, tracing.New(tp))
	defer st.Close()
	ctx := context.Background()
	now := time.Now()
	if err := st.Create(ctx, store.Record{Token: "tok-1", Generation: 1, Created: now, LastSeen: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, "tok-1", 1, []store.Event{{Stream: store.NewStream, Data: []byte("{}"), Time: now}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, "tok-1", "other", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, "tok-1", 1, []store.Event{{Stream: store.NewStream, Time: now}}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append at gen 1 after claim: %v, want ErrFenced", err)
	}
	if _, err := st.Get(ctx, "unknown"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}

	// Every operation's fenced-write and store-error series is exported,
	// at 0 until it counts something (metrics.Store.StoreOpened).
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counter := func(m *dto.Metric) float64 { return m.GetCounter().GetValue() }
	fenced := map[string]float64{}
	for k, v := range byStoreOp(mfs, "tidemark_fenced_writes_total", counter) {
		_, op, _ := strings.Cut(k, "/")
		fenced[op] = v
	}
	storeErrors := byStoreOp(mfs, "tidemark_store_errors_total", counter)
	wantFenced, wantErrors := map[string]float64{}, map[string]float64{}
	for _, op := range metrics.Ops() {
		wantFenced[op] = 0
		wantErrors["memory/"+op] = 0
	}
	wantFenced[metrics.OpAppend] = 1
	if !maps.Equal(fenced, wantFenced) {
		t.Errorf("tidemark_fenced_writes_total %v, want %v", fenced, wantFenced)
	}
	if !maps.Equal(storeErrors, wantErrors) {
		t.Errorf("tidemark_store_errors_total %v, want every memory operation at 0 (fenced and not-found are answers, not faults): %v", storeErrors, wantErrors)
	}
	counts := byStoreOp(mfs, "tidemark_store_operation_duration_seconds", func(m *dto.Metric) uint64 { return m.GetHistogram().GetSampleCount() })
	wantCounts := map[string]uint64{"memory/create": 1, "memory/append": 2, "memory/claim": 1, "memory/get": 1}
	if len(counts) != len(wantCounts) {
		t.Errorf("store operations recorded %v, want %v", counts, wantCounts)
	}
	for k, v := range wantCounts {
		if counts[k] != v {
			t.Errorf("store operations recorded %v, want %v", counts, wantCounts)
			break
		}
	}

	var names []string
	for _, s := range spans.GetSpans() {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "store create,store append,store claim,store append" {
		t.Errorf("spans %s, want one per write: store create,store append,store claim,store append", got)
	}
}

// byStoreOp returns value(m) for each series m of the metric family name
// in mfs, keyed "store/operation" by its labels (a label it lacks is "").
func byStoreOp[V any](mfs []*dto.MetricFamily, name string, value func(*dto.Metric) V) map[string]V {
	out := map[string]V{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var op, backend string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "operation":
					op = l.GetValue()
				case "store":
					backend = l.GetValue()
				}
			}
			out[backend+"/"+op] = value(m)
		}
	}
	return out
}
