package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestHibernateAfterNotBelowIdleTTLWarns: a --hibernate-after that is not
// below --session-idle-ttl can never take effect, and serve says so in
// one WARN line naming both; below it, or with either off, it says
// nothing.
func TestHibernateAfterNotBelowIdleTTLWarns(t *testing.T) {
	for _, tc := range []struct {
		after, ttl time.Duration
		want       string
	}{
		{time.Hour, 30 * time.Minute, `level=WARN msg="--hibernate-after is not below --session-idle-ttl: idle sessions end before they would hibernate; set it lower to hibernate them" hibernate_after=1h0m0s session_idle_ttl=30m0s`},
		{30 * time.Minute, 30 * time.Minute, `hibernate_after=30m0s session_idle_ttl=30m0s`},
		{10 * time.Minute, 30 * time.Minute, ""},
		{-1, 30 * time.Minute, ""}, // --hibernate-after 0: never
		{time.Hour, -1, ""},        // no idle TTL
	} {
		var log bytes.Buffer
		c := &serveConfig{hibernateAfter: tc.after, idleTTL: tc.ttl}
		c.warnHibernation(slog.New(slog.NewTextHandler(&log, nil)))
		got := log.String()
		if tc.want == "" && got != "" || tc.want != "" && (strings.Count(got, "\n") != 1 || !strings.Contains(got, tc.want)) {
			t.Errorf("--hibernate-after %v --session-idle-ttl %v: log %q, want one line with %q (none if empty)", tc.after, tc.ttl, got, tc.want)
		}
	}
}
