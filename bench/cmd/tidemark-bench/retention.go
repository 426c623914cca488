package main

// This file holds the two workloads of Tidemark's memory bounds, which run
// against the `tidemark` row only (and its baseline): (f) a countdown while
// idle sessions keep the process over a small retention budget, and (g) the
// peak memory of sessions that each echo an answer of megabytes; and their
// sections of the report.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// retentionConfig sizes workloads (f) and (g).
type retentionConfig struct {
	fBudget    int64         // (f) --retention-budget (bytes)
	fIdle      []int         // (f) idle sessions before the countdown; the first is the reference
	fSteps     int           // (f) countdown steps, with progress, delay 0
	fSetupCap  time.Duration // (f) most time spent creating the idle sessions
	fCallCap   time.Duration // (f) most time one countdown may take
	gSessions  int           // (g) sessions, each echoing once
	gText      int           // (g) bytes of each echoed text
	gParallel  int           // (g) echoes in flight at once
	gDataDirOn bool          // (g) also with --data-dir
}

func fullRetention() retentionConfig {
	return retentionConfig{
		fBudget: 1 << 20, fIdle: []int{0, 3000, 6000}, fSteps: 5000,
		fSetupCap: 3 * time.Minute, fCallCap: 2 * time.Minute,
		gSessions: 150, gText: 4<<20 - 256, gParallel: 4, gDataDirOn: true,
	}
}

func quickRetention() retentionConfig {
	return retentionConfig{
		fBudget: 1 << 20, fIdle: []int{0, 300}, fSteps: 500,
		fSetupCap: 30 * time.Second, fCallCap: 30 * time.Second,
		gSessions: 6, gText: 256 << 10, gParallel: 2, gDataDirOn: true,
	}
}

// servesRetention reports whether spec runs `tidemark serve`, which takes
// the flags (f) and (g) set.
func servesRetention(spec serverSpec) bool {
	return spec.name == "tidemark" || spec.name == "tidemark"+baselineSuffix
}

// resultF is one point of (f): a countdown with idle sessions open.
type resultF struct {
	idle      int           // idle sessions asked for
	created   int           // idle sessions created within fSetupCap
	setup     time.Duration // time to create them
	countdown time.Duration // time of the countdown, POST to response
	progress  int           // progress notifications received in order
	capped    bool          // the countdown did not end within fCallCap
	note      string
}

// runF runs (f) for spec: for each number of idle sessions, a fresh
// `tidemark serve --retention-budget fBudget`, the idle sessions, then one
// countdown.
func runF(ctx context.Context, spec serverSpec, rc retentionConfig, work string, progress func(string, ...any)) ([]resultF, error) {
	var out []resultF
	for _, idle := range rc.fIdle {
		s, err := startServer(ctx, spec, work, fmt.Sprintf("f%d", idle), "--retention-budget", strconv.FormatInt(rc.fBudget, 10))
		if err != nil {
			return out, err
		}
		p := runFPoint(ctx, s, rc, idle)
		s.stop()
		progress("%-14s (f) %d idle sessions (%d created in %s): countdown of %d: %s, %d progress events %s",
			spec.name, idle, p.created, ms(p.setup), rc.fSteps, fTime(p), p.progress, p.note)
		out = append(out, p)
	}
	return out, nil
}

func runFPoint(ctx context.Context, s *server, rc retentionConfig, idle int) resultF {
	p := resultF{idle: idle}
	hc := &http.Client{Transport: newTransport(32)}
	defer hc.CloseIdleConnections()
	sctx, cancel := context.WithTimeout(ctx, rc.fSetupCap)
	start := time.Now()
	clients, err := createClients(sctx, hc, s, idle, 32)
	cancel()
	p.setup = time.Since(start)
	for _, c := range clients {
		if c != nil {
			p.created++
		}
	}
	if err != nil && !errors.Is(sctx.Err(), context.DeadlineExceeded) {
		p.note = "idle sessions: " + err.Error()
	}
	c := newClient(hc, s)
	if err := c.initialize(ctx); err != nil {
		p.note = strings.TrimSpace(p.note + " countdown session: " + err.Error())
		return p
	}
	// A countdown of 10 steps first, so that the one measured does not pay
	// for the process's first call; it is the only one measured, since
	// the idle sessions it evicts or trims are gone for a second.
	if _, err := c.countdown(ctx, 10, 0, true, false); err != nil {
		p.note = strings.TrimSpace(p.note + " warm-up: " + err.Error())
		return p
	}
	cctx, cancel := context.WithTimeout(ctx, rc.fCallCap)
	defer cancel()
	res, err := c.countdown(cctx, rc.fSteps, 0, true, false)
	p.countdown, p.progress = res.elapsed, res.progress
	switch {
	case cctx.Err() != nil:
		p.capped, p.countdown = true, rc.fCallCap
	case err != nil:
		p.note = strings.TrimSpace(p.note + " countdown: " + err.Error())
	case res.response == nil || res.progress != rc.fSteps:
		p.note = strings.TrimSpace(p.note + " countdown: " + callNote(res))
	}
	return p
}

func fTime(p resultF) string {
	if p.capped {
		return "over " + ms(p.countdown)
	}
	return ms(p.countdown)
}

// resultG is (g) for one store: sessions that each echoed a large text.
type resultG struct {
	store   string // "memory" or "--data-dir"
	peak    int64  // VmHWM after the echoes (bytes)
	rss     int64  // VmRSS after the echoes (bytes)
	limit   string // the memory_limit the server logged, if any
	resumed int    // sessions that resumed with their newest cursor (200)
	evicted int    // sessions that answered 404
	failed  int    // echoes that failed, or resumes answered otherwise
	elapsed time.Duration
	note    string
}

// runG runs (g) for spec: with the memory store, then with --data-dir.
func runG(ctx context.Context, spec serverSpec, rc retentionConfig, work string, progress func(string, ...any)) ([]resultG, error) {
	stores := [][]string{nil}
	if rc.gDataDirOn {
		stores = append(stores, []string{"--data-dir", tmpdirPlaceholder})
	}
	var out []resultG
	for _, extra := range stores {
		name := "memory"
		if extra != nil {
			name = "--data-dir"
		}
		s, err := startServer(ctx, spec, work, "g-"+strings.TrimPrefix(name, "--"), append([]string{"--log-level", "INFO"}, extra...)...)
		if err != nil {
			return out, err
		}
		g := runGStore(ctx, s, rc)
		g.store = name
		if m := regexp.MustCompile(`memory_limit=(\d+)`).FindStringSubmatch(tail(s.log)); m != nil {
			g.limit = m[1]
		} else if b, err := os.ReadFile(s.log); err == nil {
			if m := regexp.MustCompile(`memory_limit=(\d+)`).FindSubmatch(b); m != nil {
				g.limit = string(m[1])
			}
		}
		s.stop()
		progress("%-14s (g) %s: %d echoes of %d bytes in %s: peak RSS %d MiB, RSS %d MiB, %d resumed, %d evicted, %d failed %s",
			spec.name, name, rc.gSessions, rc.gText, ms(g.elapsed), g.peak>>20, g.rss>>20, g.resumed, g.evicted, g.failed, g.note)
		out = append(out, g)
	}
	return out, nil
}

func runGStore(ctx context.Context, s *server, rc retentionConfig) resultG {
	var g resultG
	hc := &http.Client{Transport: newTransport(rc.gParallel)}
	defer hc.CloseIdleConnections()
	call := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` +
		strings.Repeat("x", rc.gText) + `"}}}`)
	clients := make([]*client, rc.gSessions)
	cursors := make([]string, rc.gSessions)
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	start := time.Now()
	for range rc.gParallel {
		wg.Go(func() {
			for i := range work {
				c := newClient(hc, s)
				cursor, err := echoOnce(ctx, c, call)
				mu.Lock()
				if err != nil {
					g.failed++
					if g.note == "" {
						g.note = err.Error()
					}
				} else {
					clients[i], cursors[i] = c, cursor
				}
				mu.Unlock()
			}
		})
	}
	for i := range rc.gSessions {
		work <- i
	}
	close(work)
	wg.Wait()
	g.elapsed = time.Since(start)
	g.peak, g.rss = memoryOf(s.pid)
	for i, c := range clients {
		if c == nil {
			continue
		}
		r, err := c.resume(ctx, cursors[i], 1, time.Second, false)
		switch {
		case err == nil && r.status == http.StatusOK:
			g.resumed++
		case err == nil && r.status == http.StatusNotFound:
			g.evicted++
		default:
			g.failed++
		}
	}
	return g
}

// echoOnce initializes c's session and sends it call, an echo; it returns
// the cursor of the last event of the answer.
func echoOnce(ctx context.Context, c *client, call []byte) (string, error) {
	if err := c.initialize(ctx); err != nil {
		return "", err
	}
	resp, err := c.post(ctx, call)
	if err != nil {
		return "", err
	}
	res := readCall(resp, 0, false)
	if res.status != http.StatusOK || res.response == nil || res.lastID == "" {
		return "", fmt.Errorf("echo: status %d, %s", res.status, callNote(res))
	}
	return res.lastID, nil
}

// memoryOf returns the peak and current resident set size (bytes) of pid,
// VmHWM and VmRSS.
func memoryOf(pid int) (peak, rss int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	field := func(name string) int64 {
		m := regexp.MustCompile(`(?m)^` + name + `:\s+(\d+) kB$`).FindSubmatch(b)
		if m == nil {
			return 0
		}
		kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return kb << 10
	}
	return field("VmHWM"), field("VmRSS")
}

// tableF writes section (f): the countdown's time at each number of idle
// sessions, and its ratio to the reference (the first number, none).
func (r *report) tableF(b *strings.Builder) {
	rc := r.cfg.retention
	rows := r.rowsWith(func(row *row) bool { return len(row.f) > 0 })
	if len(rows) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## (f) countdown over the retention budget\n\n")
	p("`tidemark serve --retention-budget %d`; first %v idle sessions are opened (initialize + notifications/initialized, 32 at a time, at most %s), then one session calls `countdown {n: 10}` (warm-up) and `countdown {n: %d}` with a progress token, `delay_ms` 0; time of the second from its POST to its response (at most %s: \"over\"; with --rounds, the round of the median time). ratio = time with %d idle sessions ÷ time with N: 1 means the idle sessions cost the countdown nothing (goal: ≥ 0.8).\n\n",
		rc.fBudget, rc.fIdle, rc.fSetupCap, rc.fSteps, rc.fCallCap, rc.fIdle[0])
	p("| server | idle sessions | created | setup | countdown | progress events | ratio | note |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, row := range rows {
		ref := row.f[0]
		for _, pt := range row.f {
			ratio := "–"
			if pt.countdown > 0 && ref.countdown > 0 && !ref.capped {
				ratio = fmt.Sprintf("%.2f", float64(ref.countdown)/float64(pt.countdown))
				if pt.capped {
					ratio = "< " + ratio
				}
			}
			p("| %s | %d | %d | %s | %s | %d of %d | %s | %s |\n", row.spec.name, pt.idle, pt.created, ms(pt.setup), fTime(pt), pt.progress, rc.fSteps, ratio, mdEscape(trimString(pt.note)))
		}
	}
	p("\n")
}

// tableG writes section (g): memory under large answers.
func (r *report) tableG(b *strings.Builder) {
	rc := r.cfg.retention
	rows := r.rowsWith(func(row *row) bool { return len(row.g) > 0 })
	if len(rows) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## (g) memory under large answers\n\n")
	p("`tidemark serve` (defaults: `--retention-budget` 512 MiB; and with `--data-dir`): %d sessions each call `echo` with a text of %d bytes, %d at a time; then each resumes its answer's stream with the cursor of its newest event. Peak RSS is VmHWM after the echoes, RSS VmRSS then (from /proc/PID/status); memory limit is what the server's `serving` line states (none before it did). Resumed: 200; evicted: 404 `session_not_found`. It runs once, in the last round: it measures a peak, not a rate.\n\n",
		rc.gSessions, rc.gText, rc.gParallel)
	p("| server | store | peak RSS | RSS | memory limit | resumed | evicted | failed | time | note |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, row := range rows {
		for _, g := range row.g {
			limit := "none"
			if n, err := strconv.ParseInt(g.limit, 10, 64); err == nil && n > 0 {
				limit = fmt.Sprintf("%d MiB", n>>20)
			}
			p("| %s | %s | %d MiB | %d MiB | %s | %d | %d | %d | %.0f s | %s |\n", row.spec.name, g.store, g.peak>>20, g.rss>>20, limit,
				g.resumed, g.evicted, g.failed, g.elapsed.Seconds(), mdEscape(trimString(g.note)))
		}
	}
	p("\n")
}

// rowsWith returns the report's rows for which has is true, in order.
func (r *report) rowsWith(has func(*row) bool) []*row {
	var out []*row
	for _, row := range r.rows {
		if has(row) {
			out = append(out, row)
		}
	}
	return out
}
