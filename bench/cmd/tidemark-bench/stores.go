package main

// This file holds the comparison of Tidemark's stores: each
// --tidemark-variant row (the durable and Redis stores) divided by the
// memory-store row `tidemark` of the same run, and, with --baseline, the
// same ratio for the rows built from the baseline commit (issue 11).

import (
	"fmt"
	"strings"
)

// storeRatios renders, for every variant row, its figures ÷ tidemark's,
// after and (with --baseline) before.
func (r *report) storeRatios(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	mem, memBefore := r.find("tidemark"), r.find("tidemark"+baselineSuffix)
	var variants []*row
	for _, row := range r.rows {
		if row.spec.role == roleTidemark && row.spec.name != "tidemark" && row.spec.name != "tidemark-min" {
			variants = append(variants, row)
		}
	}
	if mem == nil || len(variants) == 0 {
		return
	}
	p("## Stores ÷ memory\n\n")
	p("Each variant row's figure divided by `tidemark`'s (the memory store) in the same run; with --baseline, also `NAME%s` ÷ `tidemark%s`, both built from the baseline commit. For rates (↑) 1 is memory speed.\n\n", baselineSuffix, baselineSuffix)
	for _, v := range variants {
		before := r.find(v.spec.name + baselineSuffix)
		p("### %s ÷ tidemark\n\n| metric | before | after |\n| --- | ---: | ---: |\n", v.spec.name)
		for _, m := range r.metrics() {
			arrow := "↓"
			if m.higher {
				arrow = "↑"
			}
			p("| %s %s | %s | %s |\n", m.name, arrow, quotient(m, before, memBefore), quotient(m, v, mem))
		}
		p("\n")
	}
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
