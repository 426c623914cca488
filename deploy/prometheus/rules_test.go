// rules_test.go checks the alerting rules with promtool.

package prometheus_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
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
