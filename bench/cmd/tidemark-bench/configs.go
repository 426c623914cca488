package main

// The section of Tidemark's configurations: every row that is `tidemark
// serve` with other flags, or a gateway, divided by its reference row of
// the same run (serverSpec.versus): each store by the memory store,
// Sentinel and Cluster by one Redis, metrics on by off, each gateway by
// the server it puts behind Tidemark served directly.

import (
	"fmt"
	"strings"
)

// comparisons returns, in table order, the rows that have a reference row
// in the report, with that row; baseline selects the rows built from the
// baseline commit (both NAME@before and its reference's) instead.
func (r *report) comparisons(baseline bool) (rows, refs []*row) {
	for _, x := range r.rows {
		if x.spec.versus == "" {
			continue
		}
		name, ref := x.spec.name, x.spec.versus
		if baseline {
			name, ref = name+baselineSuffix, ref+baselineSuffix
		}
		a, b := r.find(name), r.find(ref)
		if a != nil && b != nil {
			rows, refs = append(rows, a), append(refs, b)
		}
	}
	return rows, refs
}

// configurations writes the section: one column per row with a reference,
// one line per metric; with --baseline, the same for the rows built from
// the baseline commit.
func (r *report) configurations(b *strings.Builder) {
	rows, refs := r.comparisons(false)
	if len(rows) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Tidemark's configurations\n\n")
	p("Each column divides one row's figures by those of its reference row in this run:\n\n")
	for i, x := range rows {
		p("- `%s` ÷ `%s`: %s\n", x.spec.name, refs[i].spec.name, x.spec.versusMeans)
	}
	p("\nCPU is the server's plus its helpers' (the Redis processes, the upstream server, the stdio subprocesses): what the row costs the machine. For rates and stream counts (↑) 1 is the reference's speed and below 1 slower; for CPU, time and memory (↓) above 1 costs more. – : a figure is missing (see the tables).\n\n")
	r.comparisonTable(b, rows, refs)
	if before, beforeRefs := r.comparisons(true); len(before) > 0 {
		p("Built from the baseline commit `%s` (--baseline), the same quotients:\n\n", r.baselineCommit)
		r.comparisonTable(b, before, beforeRefs)
	}
}

func (r *report) comparisonTable(b *strings.Builder, rows, refs []*row) {
	columns := make([]string, len(rows))
	for i, x := range rows {
		columns[i] = x.spec.name + " ÷ " + refs[i].spec.name
	}
	r.ratioTable(b, columns, true, func(m metric, i int) string { return quotient(m, rows[i], refs[i]) })
}

// ratioTable writes a table of one row per metric (its name and whether
// higher is better; (t)'s only when tasks is set) and one column per name
// in columns, whose cells cell(metric, column) gives.
func (r *report) ratioTable(b *strings.Builder, columns []string, tasks bool, cell func(m metric, column int) string) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("| metric |")
	for _, c := range columns {
		p(" %s |", c)
	}
	p("\n| --- |")
	for range columns {
		p(" ---: |")
	}
	p("\n")
	for _, m := range r.metrics() {
		if m.ofTasks() && !tasks {
			continue
		}
		arrow := "↓"
		if m.higher {
			arrow = "↑"
		}
		p("| %s %s |", m.name, arrow)
		for i := range columns {
			p(" %s |", cell(m, i))
		}
		p("\n")
	}
	p("\n")
}

// quotient renders m(a) ÷ m(b), or – when either is missing.
func quotient(m metric, a, b *row) string {
	if a == nil || b == nil {
		return "–"
	}
	av, aok := m.value(a)
	bv, bok := m.value(b)
	if !aok || !bok || bv == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", av/bv)
}
