package main

// The gateway row: `tidemark serve --upstream` in front of the go-sdk peer,
// and its figures divided by the same peer's served directly (issue 13).

import (
	"fmt"
	"strings"
)

// roleGateway marks the gateway row: it is compared with the server it
// fronts, not with the peers.
const roleGateway = "gateway"

// upstreamPlaceholder in a server's arguments becomes the URL of the
// server it fronts (serverSpec.upstream).
const upstreamPlaceholder = "{upstream}"

// gatewaySpec returns the gateway row: tidemark serve (as tidemarkServe
// runs it) with --upstream pointing at a fresh process of upstream.
func gatewaySpec(tidemarkServe func(...string) func(int) []string, upstream serverSpec) serverSpec {
	up := upstream
	return serverSpec{
		name: "gateway", role: roleGateway, upstream: &up,
		// The load generator dials with a 30 s bound (newTransport); the
		// gateway's dials to its upstream get the same, so that a machine
		// too busy to complete a connect in the default 5 s fails neither.
		argv: tidemarkServe("--upstream", upstreamPlaceholder, "--upstream-connect-timeout", "30s"),
		label: "Tidemark gateway: `tidemark serve --upstream` in front of a " + upstream.name + " process ({upstream}, started first " +
			"on its own port; the CPU and RSS columns are the gateway process's alone)",
	}
}

// gateway writes the ratios of the gateway row to the server it fronts,
// served directly in the same run: calls/s and events/s.
func (r *report) gateway(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	for _, g := range r.rows {
		if g.spec.role != roleGateway || g.spec.upstream == nil {
			continue
		}
		direct := r.find(g.spec.upstream.name)
		p("## Gateway\n\n")
		if direct == nil {
			p("The %s row ran without %s: run both for the ratios.\n\n", g.spec.name, g.spec.upstream.name)
			continue
		}
		p("`%s` ÷ `%s`: the same server's rates through `tidemark serve --upstream` and served directly, in this run. Through the gateway every call and event also crosses a second HTTP hop and Tidemark's event log, on the same cores.\n\n",
			g.spec.name, direct.spec.name)
		p("| metric | %s | %s | ratio |\n| --- | ---: | ---: | ---: |\n", g.spec.name, direct.spec.name)
		for _, m := range r.metrics() {
			if !m.higher || !(strings.Contains(m.name, "calls/s") || strings.Contains(m.name, "events/s")) {
				continue
			}
			gv, gok := m.value(g)
			dv, dok := m.value(direct)
			if !gok || !dok || dv == 0 {
				p("| %s | – | – | – |\n", m.name)
				continue
			}
			p("| %s | %.0f | %.0f | %.2f |\n", m.name, gv, dv, gv/dv)
		}
		p("\n")
	}
}
