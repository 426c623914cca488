// rules_test.go checks the alerting rules with promtool, and the counters
// they rate against what a replica exports.

package prometheus_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/metrics/prom"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/store/observed"
)

// TestAlertRules: promtool accepts alerts.yml, and its unit tests
// (alerts_test.yml: each alert fires on the series it is for, with its
// labels and annotations, and stays silent below its threshold) pass.
func TestAlertRules(t *testing.T) {
	testenv.Need(t, testenv.Prometheus)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		out, err := exec.Command("promtool", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(string(out), "SUCCESS") {
			t.Fatalf("promtool %s printed no SUCCESS:\n%s", strings.Join(args, " "), out)
		}
	}
}

// rated matches a counter a rule takes a rate or an increase of.
var rated = regexp.MustCompile(`\b(?:rate|increase)\(([a-z_]+)`)

// TestRatedCountersExportedAtZero: every counter alerts.yml takes a rate
// or an increase of is exported by a replica that has recorded nothing
// yet, each series at 0, as alerts_test.yml's series start. A counter
// whose series appears only with its first count, already at 1, shows no
// increase, and its alert misses that count.
func TestRatedCountersExportedAtZero(t *testing.T) {
	rules, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rec, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	st := observed.New(memory.New(memory.Options{}), metrics.StoreMemory, rec, nil)
	defer st.Close()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%s%v = %v before anything was recorded, want 0", mf.GetName(), m.GetLabel(), v)
			}
			series[mf.GetName()]++
		}
	}
	names := map[string]bool{}
	for _, m := range rated.FindAllSubmatch(rules, -1) {
		names[string(m[1])] = true
	}
	if len(names) < 4 {
		t.Fatalf("found %d counters under rate() or increase() in alerts.yml, want at least 4: %v", len(names), names)
	}
	for name := range names {
		if series[name] == 0 {
			t.Errorf("alerts.yml takes a rate or an increase of %s, which a fresh replica does not export", name)
		}
	}
}
