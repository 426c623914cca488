package main

import (
	"cmp"
	"slices"
	"time"
)

// Rounds: --rounds N runs every chosen server through every workload N
// times, the servers taking turns within each round (round 1: all servers,
// round 2: all servers, …), and reports for each figure its median over the
// rounds. On a shared 2-core machine one window's figures vary by 10–15 %
// from run to run; turns and medians keep a slow period of the machine from
// falling on one server only, and a before-and-after comparison
// (--baseline) from showing noise as a change.

// mergeRounds returns the row that reports rounds of one server: each
// figure is the median over the rounds that produced it; failed calls, lost
// events and wrong storm answers are the worst round's; calls, and (c)'s
// replays with their wrong ones, are summed; notes are kept from every
// round.
func mergeRounds(rounds []*row) *row {
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := &row{spec: rounds[0].spec}
	for _, r := range rounds {
		if r.failure != "" && out.failure == "" {
			out.failure = r.failure
		}
		// (g) runs in the last round only (runServer).
		if len(r.g) > 0 {
			out.g = r.g
		}
		for _, n := range r.notes {
			if !slices.Contains(out.notes, n) {
				out.notes = append(out.notes, n)
			}
		}
	}

	out.f = mergeF(rounds)

	// (a): per concurrency level, over the rounds that measured it.
	levels := 0
	for _, r := range rounds {
		levels = max(levels, len(r.a))
	}
	for li := range levels {
		var as []resultA
		for _, r := range rounds {
			if li < len(r.a) && r.a[li].calls > 0 {
				as = append(as, r.a[li])
			}
		}
		if len(as) == 0 {
			continue
		}
		out.a = append(out.a, mergeA(as))
	}

	var withB, withC, withD, withDH, withE, withT []*row
	for _, r := range rounds {
		if r.hasB {
			withB = append(withB, r)
		}
		if r.hasC {
			withC = append(withC, r)
		}
		if r.hasD {
			withD = append(withD, r)
		}
		if r.hasDH {
			withDH = append(withDH, r)
		}
		if r.hasE {
			withE = append(withE, r)
		}
		if r.hasT {
			withT = append(withT, r)
		}
	}
	if len(withB) > 0 {
		out.hasB = true
		out.b1 = mergeB(withB, func(r *row) resultB { return r.b1 })
		out.bN = mergeB(withB, func(r *row) resultB { return r.bN })
	}
	if len(withC) > 0 {
		out.hasC = true
		out.c = withC[0].c
		out.c.runs, out.c.wrong = 0, 0
		for _, r := range withC {
			out.c.runs += r.c.runs
			out.c.wrong += r.c.wrong
			if out.c.example == "" {
				out.c.example = r.c.example
			}
		}
		out.c.median = medianDuration(withC, func(r *row) time.Duration { return r.c.median })
	}
	if len(withD) > 0 {
		out.hasD = true
		out.d = withD[0].d
		for _, r := range withD {
			if r.d.streams < out.d.streams {
				out.d.streams, out.d.streamErr = r.d.streams, r.d.streamErr
			}
		}
		out.d.perSession = median(withD, func(r *row) float64 { return r.d.perSession })
		out.d.perStream = median(withD, func(r *row) float64 { return r.d.perStream })
		out.d.rssAll = int64(median(withD, func(r *row) float64 { return float64(r.d.rssAll) }))
	}
	if len(withDH) > 0 {
		out.hasDH = true
		out.dh = mergeDH(withDH)
	}
	if len(withE) > 0 {
		out.hasE = true
		out.e = withE[0].e
		for _, r := range withE {
			if r.e.wrong+r.e.unanswered > out.e.wrong+out.e.unanswered {
				out.e.wrong, out.e.unanswered, out.e.example = r.e.wrong, r.e.unanswered, r.e.example
			}
		}
		out.e.all = medianDuration(withE, func(r *row) time.Duration { return r.e.all })
		out.e.p50 = medianDuration(withE, func(r *row) time.Duration { return r.e.p50 })
		out.e.p99 = medianDuration(withE, func(r *row) time.Duration { return r.e.p99 })
	}
	if len(withT) > 0 {
		out.hasT = true
		out.t = mergeT(withT)
	}
	return out
}

// mergeA merges one window of calls of several rounds (as is not empty):
// rates, latencies and costs are medians; calls are summed; failed calls
// are the worst round's.
func mergeA(as []resultA) resultA {
	m := as[0]
	m.calls, m.errors = 0, 0
	for _, a := range as {
		m.calls += a.calls
		m.errors = max(m.errors, a.errors)
		if m.firstErr == "" {
			m.firstErr = a.firstErr
		}
	}
	m.rate = median(as, func(a resultA) float64 { return a.rate })
	m.p50 = medianDuration(as, func(a resultA) time.Duration { return a.p50 })
	m.p99 = medianDuration(as, func(a resultA) time.Duration { return a.p99 })
	m.cpuPerCall = medianDuration(as, func(a resultA) time.Duration { return a.cpuPerCall })
	m.helperPerCall = medianDuration(as, func(a resultA) time.Duration { return a.helperPerCall })
	m.writesPerCall = median(as, func(a resultA) float64 { return a.writesPerCall })
	m.foreign = median(as, func(a resultA) float64 { return a.foreign })
	return m
}

// mergeB merges one (b) result of several rounds: rates and costs are
// medians; lost events and failed calls the worst round's.
func mergeB(rows []*row, get func(*row) resultB) resultB {
	m := get(rows[0])
	for _, r := range rows {
		b := get(r)
		if b.lost > m.lost || b.failedCalls > m.failedCalls {
			m.lost, m.received, m.failedCalls, m.note = b.lost, b.received, b.failedCalls, b.note
		}
	}
	m.rate = median(rows, func(r *row) float64 { return get(r).rate })
	m.cpuPerEvent = medianDuration(rows, func(r *row) time.Duration { return get(r).cpuPerEvent })
	m.helperPerEvent = medianDuration(rows, func(r *row) time.Duration { return get(r).helperPerEvent })
	m.writesPerEvent = median(rows, func(r *row) float64 { return get(r).writesPerEvent })
	m.foreign = median(rows, func(r *row) float64 { return get(r).foreign })
	m.elapsed = medianDuration(rows, func(r *row) time.Duration { return get(r).elapsed })
	return m
}

// median returns the median of f over xs (the mean of the middle two for an
// even count); xs is not empty.
func median[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.SortFunc(v, cmp.Compare[float64])
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func medianDuration[T any](xs []T, f func(T) time.Duration) time.Duration {
	return time.Duration(median(xs, func(x T) float64 { return float64(f(x)) }))
}

// mergeF returns, for each number of idle sessions of (f), the point of
// the round whose countdown took the median time.
func mergeF(rounds []*row) []resultF {
	var out []resultF
	for i := 0; ; i++ {
		var pts []resultF
		for _, r := range rounds {
			if i < len(r.f) {
				pts = append(pts, r.f[i])
			}
		}
		if len(pts) == 0 {
			return out
		}
		slices.SortFunc(pts, func(a, b resultF) int { return cmp.Compare(a.countdown, b.countdown) })
		out = append(out, pts[len(pts)/2])
	}
}

// mergeDH merges (d)'s hibernated part of several rounds: each reading,
// time and latency is the median of the rounds; wrong wakes are the worst
// round's.
func mergeDH(rows []*row) resultDH {
	m := rows[0].dh
	for _, r := range rows {
		if r.dh.wrong > m.wrong {
			m.wrong, m.wakes, m.example = r.dh.wrong, r.dh.wakes, r.dh.example
		}
	}
	for _, f := range []func(*resultDH) *int64{
		func(d *resultDH) *int64 { return &d.rssBase }, func(d *resultDH) *int64 { return &d.rssAwake },
		func(d *resultDH) *int64 { return &d.heapBase }, func(d *resultDH) *int64 { return &d.heapAwake },
		func(d *resultDH) *int64 { return &d.rssBaseH }, func(d *resultDH) *int64 { return &d.rssHibernated },
		func(d *resultDH) *int64 { return &d.heapBaseH }, func(d *resultDH) *int64 { return &d.heapHibernated },
		func(d *resultDH) *int64 { return &d.peakAwake },
	} {
		*f(&m) = int64(median(rows, func(r *row) float64 { return float64(*f(&r.dh)) }))
	}
	for _, f := range []func(*resultDH) *time.Duration{
		func(d *resultDH) *time.Duration { return &d.openedAwake }, func(d *resultDH) *time.Duration { return &d.opened },
		func(d *resultDH) *time.Duration { return &d.hibernated }, func(d *resultDH) *time.Duration { return &d.settled },
		func(d *resultDH) *time.Duration { return &d.p50 }, func(d *resultDH) *time.Duration { return &d.p99 },
		func(d *resultDH) *time.Duration { return &d.took },
	} {
		*f(&m) = medianDuration(rows, func(r *row) time.Duration { return *f(&r.dh) })
	}
	return m
}
