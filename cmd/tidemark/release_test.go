package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestRelease runs testdata/release: a series of sweeps, each with the
// sessions it hibernated and when it ends (an offset from the process's
// start), against a releaser whose clock and release are fakes. Command:
//
//	start [live=MB]           a new releaser; the live heap of the last
//	                          collection is MB MiB (default 100)
//	swept n=N at=DUR [live=MB]  a sweep that hibernated N sessions, the
//	                          live heap then MB MiB (default: as before)
//
// It prints "kept" when the sweep gives nothing back, else "released" and
// the sessions the log line counts; a release is logged exactly once.
func TestRelease(t *testing.T) {
	start := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var r *releaser
	var log bytes.Buffer
	var now time.Time
	var live uint64
	freed := 0
	datadriven.RunTest(t, "testdata/release", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "start":
			log.Reset()
			freed = 0
			now = start
			live = 100 << 20
			if d.HasArg("live") {
				var mb uint64
				d.ScanArgs(t, "live", &mb)
				live = mb << 20
			}
			r = &releaser{logger: slog.New(slog.NewTextHandler(&log, nil)), now: func() time.Time { return now }, free: func() { freed++ },
				live: func() uint64 { return live }}
			return ""
		case "swept":
			var n int
			var at string
			d.ScanArgs(t, "n", &n)
			d.ScanArgs(t, "at", &at)
			off, err := time.ParseDuration(at)
			if err != nil {
				t.Fatal(err)
			}
			now = start.Add(off)
			if d.HasArg("live") {
				var mb uint64
				d.ScanArgs(t, "live", &mb)
				live = mb << 20
			}
			log.Reset()
			before := freed
			r.swept(n)
			lines := strings.Count(log.String(), "\n")
			switch {
			case freed == before && lines == 0:
				return "kept"
			case freed == before+1 && lines == 1 && strings.Contains(log.String(), `msg="gave the memory of hibernated sessions back to the operating system"`):
				return fmt.Sprintf("released %s", field(log.String(), "hibernated"))
			}
			t.Fatalf("%s: %d releases, log %q; want at most one release, with one line", d.Pos, freed-before, log.String())
		}
		t.Fatalf("%s: unknown command %s", d.Pos, d.Cmd)
		return ""
	})
}

// field returns key=value of a text log line.
func field(line, key string) string {
	for f := range strings.FieldsSeq(line) {
		if strings.HasPrefix(f, key+"=") {
			return f
		}
	}
	return ""
}
