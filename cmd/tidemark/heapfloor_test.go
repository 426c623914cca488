package main

// The floor under the collector's heap goal, observed on the real binary
// through its Go collector metrics.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// TestHeapFloor: tidemark serve --data-dir states heap_floor=16777216 on
// its serving line and, once the collector has run, its next heap goal
// (go_memstats_next_gc_bytes) is at least 16 MiB, where the default pace
// (twice a live heap of a few MiB) puts it under that. With GOGC in the
// environment, or with the memory store (whose retained events are its
// live heap), it states heap_floor=0 and the goal is the runtime's.
func TestHeapFloor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       []string
		durable   bool
		floor     string
		wantAbove bool
	}{
		{"durable", nil, true, "16777216", true},
		{"durable,GOGC=100", []string{"GOGC=100"}, true, "0", false},
		{"memory", nil, false, "0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if tc.durable {
				args = []string{"--data-dir", t.TempDir()}
			}
			p, endpoint, metricsAddr := startObserved(t, tc.env, args...)
			if got := p.WaitFor(t, `msg=serving .*heap_floor=(\d+)`, 5*time.Second)[1]; got != tc.floor {
				t.Fatalf("serving line states heap_floor=%s, want %s", got, tc.floor)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			sess, err := (&mcptest.Client{URL: endpoint}).Initialize(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			// Calls until the collector has run three times: the floor is set
			// after each cycle, from the live heap that cycle found.
			text := strings.Repeat("x", 32<<10) // a cycle comes sooner
			calls := 0
			for i := 0; goMetric(t, metricsAddr, "go_gc_duration_seconds") < 3; i++ {
				if i == 20000 {
					t.Fatalf("no three collections after %d calls", i)
				}
				st, err := sess.Call(ctx, mcptest.ToolCall(int64(i+1), "echo", map[string]any{"text": text}, nil))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.Collect(); err != nil {
					t.Fatal(err)
				}
				calls++
			}
			next := goMetric(t, metricsAddr, "go_memstats_next_gc_bytes")
			t.Logf("next heap goal %.1f MiB after %d calls", next/(1<<20), calls)
			if above := next >= heapFloor; above != tc.wantAbove {
				t.Errorf("next heap goal %.0f bytes (%.1f MiB): at or above the %d MiB floor is %v, want %v",
					next, next/(1<<20), heapFloor>>20, above, tc.wantAbove)
			}
		})
	}
}

// goMetric scrapes the operator's listener at addr and returns the value of
// the metric family name: a gauge's value, or a summary's sample count.
func goMetric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	f := fams[name]
	if f == nil || len(f.GetMetric()) != 1 {
		t.Fatalf("/metrics has no single %s", name)
	}
	m := f.GetMetric()[0]
	if s := m.GetSummary(); s != nil {
		return float64(s.GetSampleCount())
	}
	v := m.GetGauge().GetValue()
	return v
}
