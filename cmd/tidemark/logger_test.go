package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogDurations: both --log-format values write a duration as
// time.Duration.String does, as the docs' "shutting down" line shows it
// (docs/deploying.md: grace=10s exit_within=25s), a group's included; the
// JSON handler's own form is an integer of nanoseconds
// ("exit_within":25000000000).
func TestLogDurations(t *testing.T) {
	for _, tc := range []struct {
		format string
		want   []string
	}{
		{"text", []string{`msg="shutting down" reason=signal grace=10s exit_within=25s retry.in=1m0s n=3`}},
		{"json", []string{`"msg":"shutting down","reason":"signal","grace":"10s","exit_within":"25s","retry":{"in":"1m0s"},"n":3}`}},
	} {
		var buf bytes.Buffer
		logger, err := newLogger(&buf, tc.format, slog.LevelInfo)
		if err != nil {
			t.Fatal(err)
		}
		logger.Info("shutting down", "reason", "signal", "grace", 10*time.Second, "exit_within", 25*time.Second,
			slog.Group("retry", "in", time.Minute), "n", 3)
		for _, want := range tc.want {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("--log-format=%s wrote %q, want %s", tc.format, buf.String(), want)
			}
		}
	}
}
