package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The smoke tests share one build of tidemark and benchpeer (bench builds
// them once per run otherwise): the build is not what they time out on.
var binaries struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

// prebuilt returns a directory holding tidemark and benchpeer built from
// this tree, built on the first call.
func prebuilt(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		tc, err := findToolchain(options{})
		if err != nil {
			binaries.err = err
			return
		}
		if binaries.dir, binaries.err = os.MkdirTemp("", "tidemark-bench-test-"); binaries.err != nil {
			return
		}
		tc.bin = binaries.dir
		binaries.err = build(context.Background(), tc)
	})
	if binaries.err != nil {
		t.Fatalf("building tidemark and benchpeer: %v", binaries.err)
	}
	return binaries.dir
}

// TestQuickRun runs `tidemark-bench --quick` against Tidemark and the
// ceiling (real processes on loopback, built from this tree) and checks that
// every workload produced figures: calls answered without error, every
// progress event delivered in order, exact replays, every idle session and
// stream accounted for, and a storm answered in full. It asserts behaviour,
// not speed: speed is what the report is for.
func TestQuickRun(t *testing.T) {
	bin := prebuilt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	rep, err := bench(ctx, options{quick: true, bin: bin, servers: "tidemark,ceiling", workloads: "a,b,c,d,e",
		args: []string{"--quick", "--servers", "tidemark,ceiling"}}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	cfg := quickConfig()
	if len(rep.rows) != 2 || rep.rows[0].spec.name != "tidemark" || rep.rows[1].spec.name != "ceiling" {
		t.Fatalf("rows = %v, want tidemark and ceiling", rep.rows)
	}
	for _, r := range rep.rows {
		name := r.spec.name
		if r.failure != "" || len(r.notes) > 0 {
			t.Errorf("%s: failure %q notes %q\n%s", name, r.failure, r.notes, stderr.String())
			continue
		}
		if len(r.a) != len(cfg.aConc) {
			t.Errorf("%s (a): %d levels measured, want %d", name, len(r.a), len(cfg.aConc))
		}
		for _, a := range r.a {
			if a.calls == 0 || a.errors != 0 || a.p50 <= 0 || a.p99 < a.p50 {
				t.Errorf("%s (a) %d sessions: calls %d errors %d (%s) p50 %v p99 %v", name, a.conc, a.calls, a.errors, a.firstErr, a.p50, a.p99)
			}
		}
		if !r.hasB || r.b1.received != cfg.b1N || r.b1.lost != 0 || r.b1.failedCalls != 0 {
			t.Errorf("%s (b) 1 stream: received %d of %d, lost %d, failed calls %d (%s)", name, r.b1.received, cfg.b1N, r.b1.lost, r.b1.failedCalls, r.b1.note)
		}
		if want := cfg.bStreams * cfg.bN; r.bN.received != want || r.bN.lost != 0 || r.bN.failedCalls != 0 {
			t.Errorf("%s (b) %d streams: received %d of %d, lost %d, failed calls %d (%s)", name, cfg.bStreams, r.bN.received, want, r.bN.lost, r.bN.failedCalls, r.bN.note)
		}
		if !r.hasC || r.c.na != "" || r.c.runs != cfg.cRuns || r.c.wrong != 0 || r.c.median <= 0 {
			t.Errorf("%s (c): na %q runs %d wrong %d (%s) median %v", name, r.c.na, r.c.runs, r.c.wrong, r.c.example, r.c.median)
		}
		if !r.hasD || r.d.sessions != cfg.dSessions || r.d.streams != cfg.dStreamCap || r.d.streamErr != "" {
			t.Errorf("%s (d): sessions %d streams %d of %d (%s)", name, r.d.sessions, r.d.streams, cfg.dStreamCap, r.d.streamErr)
		}
		if !r.hasE || r.e.na != "" || r.e.wrong != 0 || r.e.unanswered != 0 || r.e.all <= 0 {
			t.Errorf("%s (e): na %q wrong %d unanswered %d (%s) all %v", name, r.e.na, r.e.wrong, r.e.unanswered, r.e.example, r.e.all)
		}
	}
	md := stdout.String()
	for _, want := range []string{"## (a) tools/call round trips", "## (e) reconnect storm", "### tidemark ÷ …", "## Goals of issue 6"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestQuickGateway runs `tidemark-bench --quick` on the gateway row
// (tidemark serve --upstream in front of a gosdk process) and on gosdk
// served directly, workloads (a) and (b): every call is answered, every
// progress event delivered, and the report divides the gateway's rates by
// gosdk's.
func TestQuickGateway(t *testing.T) {
	bin := prebuilt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	rep, err := bench(ctx, options{quick: true, bin: bin, servers: "gateway,gosdk", workloads: "a,b",
		args: []string{"--quick", "--servers", "gateway,gosdk", "--workloads", "a,b"}}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	cfg := quickConfig()
	if len(rep.rows) != 2 || rep.rows[0].spec.name != "gateway" || rep.rows[1].spec.name != "gosdk" {
		t.Fatalf("rows = %v, want gateway and gosdk", rep.rows)
	}
	for _, r := range rep.rows {
		name := r.spec.name
		if r.failure != "" || len(r.notes) > 0 {
			t.Errorf("%s: failure %q notes %q\n%s", name, r.failure, r.notes, stderr.String())
			continue
		}
		for _, a := range r.a {
			if a.calls == 0 || a.errors != 0 {
				t.Errorf("%s (a) %d sessions: calls %d errors %d (%s)", name, a.conc, a.calls, a.errors, a.firstErr)
			}
		}
		if !r.hasB || r.b1.received != cfg.b1N || r.b1.lost != 0 || r.bN.received != cfg.bStreams*cfg.bN || r.bN.lost != 0 {
			t.Errorf("%s (b): received %d and %d, lost %d and %d", name, r.b1.received, r.bN.received, r.b1.lost, r.bN.lost)
		}
	}
	md := stdout.String()
	_, section, ok := strings.Cut(md, "## Gateway\n")
	if !ok {
		t.Fatalf("report lacks the Gateway section:\n%s", md)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, want := range []string{"| (a) calls/s, 1 sessions |", "| (b) events/s, 1 stream |"} {
		if !strings.Contains(section, want) || strings.Contains(section, want+" – |") {
			t.Errorf("Gateway section lacks a figure for %q:\n%s", want, section)
		}
	}
}
