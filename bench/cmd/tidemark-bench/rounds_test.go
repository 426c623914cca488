package main

import (
	"strings"
	"testing"
	"time"
)

// TestMergeRounds: figures are medians over the rounds, failures the worst
// round's, counts summed.
func TestMergeRounds(t *testing.T) {
	spec := serverSpec{name: "tidemark", role: roleTidemark}
	mk := func(rate float64, cpu time.Duration, lost, wrong int, rss float64) *row {
		return &row{spec: spec,
			a:    []resultA{{conc: 16, calls: 100, rate: rate, cpuPerCall: cpu, writesPerCall: 2}},
			hasB: true, b1: resultB{rate: rate * 10, lost: lost, received: 1000 - lost, cpuPerEvent: cpu / 10},
			hasC: true, c: resultC{events: 10000, median: cpu * 100, runs: 5, wrong: wrong},
			hasD: true, d: resultD{perSession: rss, streams: 10, streamsTried: 10},
			hasE: true, e: resultE{all: cpu * 1000, wrong: wrong},
			hasT: true, t: resultT{conc: 16, create: resultA{calls: 100, rate: rate / 2, errors: wrong}, polls: float64(lost + 1), atOnce: wrong},
		}
	}
	m := mergeRounds([]*row{
		mk(1000, 60*time.Microsecond, 0, 0, 5000),
		mk(3000, 90*time.Microsecond, 2, 1, 7000),
		mk(2000, 30*time.Microsecond, 0, 0, 6000),
	})
	if a := m.a[0]; a.rate != 2000 || a.cpuPerCall != 60*time.Microsecond || a.calls != 300 {
		t.Errorf("(a) merged to rate %v cpu %v calls %d; want 2000, 60µs, 300", a.rate, a.cpuPerCall, a.calls)
	}
	if m.b1.rate != 20000 || m.b1.lost != 2 || m.b1.received != 998 {
		t.Errorf("(b) merged to rate %v lost %d received %d; want 20000, 2, 998", m.b1.rate, m.b1.lost, m.b1.received)
	}
	if m.c.median != 6*time.Millisecond || m.c.runs != 15 || m.c.wrong != 1 {
		t.Errorf("(c) merged to median %v runs %d wrong %d; want 6ms, 15, 1", m.c.median, m.c.runs, m.c.wrong)
	}
	if m.d.perSession != 6000 || m.e.all != 60*time.Millisecond || m.e.wrong != 1 {
		t.Errorf("(d)/(e) merged to %v per session, all %v, wrong %d; want 6000, 60ms, 1", m.d.perSession, m.e.all, m.e.wrong)
	}
	if m.t.create.rate != 1000 || m.t.create.calls != 300 || m.t.create.errors != 1 || m.t.atOnce != 1 || m.t.polls != 1 || m.t.get.calls != 0 {
		t.Errorf("(t) merged to rate %v calls %d failed %d, %d at once, %v polls, %d gets; want 1000, 300, 1, 1, 1, 0",
			m.t.create.rate, m.t.create.calls, m.t.create.errors, m.t.atOnce, m.t.polls, m.t.get.calls)
	}
	even := mergeRounds([]*row{mk(1000, 60*time.Microsecond, 0, 0, 5000), mk(3000, 90*time.Microsecond, 0, 0, 7000)})
	if even.a[0].rate != 2000 || even.d.perSession != 6000 {
		t.Errorf("two rounds merged to rate %v, %v per session; want the means of the middle two, 2000 and 6000", even.a[0].rate, even.d.perSession)
	}
}

// TestRemaining: the time left is the mean time of the servers done so
// far times the runs left in the first round, and the first round's time
// of each server left afterwards.
func TestRemaining(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		took          []time.Duration
		round, i, all int
		want          string
	}{
		{[]time.Duration{0, 0, 0, 0}, 0, 0, 2, ""},
		{[]time.Duration{10 * s, 20 * s, 0, 0}, 0, 2, 2, "about 1m30s left"},
		{[]time.Duration{10 * s, 20 * s, 30 * s, 40 * s}, 1, 1, 3, "about 3m10s left"},
		{[]time.Duration{10 * s, 20 * s, 30 * s, 40 * s}, 2, 3, 3, "about 40s left"},
	} {
		got := remaining(time.Now(), c.took, c.round, c.i, c.all)
		if !strings.HasSuffix(got, c.want+")") && !(c.want == "" && got == "") {
			t.Errorf("remaining(%v, round %d, server %d, %d rounds) = %q, want … %q", c.took, c.round, c.i, c.all, got, c.want)
		}
	}
}

// TestMergeDH: (d)'s hibernated figures are medians over the rounds, its
// wrong wakes the worst round's.
func TestMergeDH(t *testing.T) {
	mk := func(rss int64, p99 time.Duration, wrong int) *row {
		return &row{spec: serverSpec{name: "durable"}, hasDH: true,
			dh: resultDH{sessions: 100, rssBaseH: 10, rssHibernated: rss, p99: p99, wakes: 50, wrong: wrong, example: "round with " + strings.Repeat("x", wrong)}}
	}
	m := mergeRounds([]*row{mk(300, 3*time.Millisecond, 0), mk(100, 9*time.Millisecond, 2), mk(200, 6*time.Millisecond, 1), {spec: serverSpec{name: "durable"}}})
	if !m.hasDH || m.dh.rssHibernated != 200 || m.dh.p99 != 6*time.Millisecond || m.dh.wrong != 2 || m.dh.example != "round with xx" || m.dh.rssBaseH != 10 {
		t.Errorf("merged to has %v, RSS %d (base %d), p99 %v, wrong %d %q; want true, 200 (10), 6ms, 2 \"round with xx\"",
			m.hasDH, m.dh.rssHibernated, m.dh.rssBaseH, m.dh.p99, m.dh.wrong, m.dh.example)
	}
}
