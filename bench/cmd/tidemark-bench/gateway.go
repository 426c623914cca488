package main

// The gateway rows: `tidemark serve --upstream` in front of the go-sdk
// peer, divided by the same peer served directly, and `tidemark serve
// --stdio` with the demo server as its subprocess, divided by `tidemark
// serve` running that server in its own process (docs/gateways.md, "Gateway mode").

import (
	"path/filepath"
	"strconv"
)

// roleGateway marks the gateway rows: each is compared with the server it
// puts behind Tidemark (serverSpec.versus), not with the peers.
const roleGateway = "gateway"

// upstreamPlaceholder in a server's arguments becomes the URL of the
// server it fronts (serverSpec.upstream).
const upstreamPlaceholder = "{upstream}"

// stdioMaxProcesses is the stdio gateway's --max-processes: (a) holds
// 1 + 16 + 256 sessions in one process, each with its subprocess.
const stdioMaxProcesses = 400

// gatewaySpec returns the gateway row: tidemark serve (as tidemarkServe
// runs it) with --upstream pointing at a fresh process of upstream.
func gatewaySpec(tidemarkServe func(...string) func(int) []string, upstream serverSpec) serverSpec {
	up := upstream
	return serverSpec{
		name: "gateway", role: roleGateway, upstream: &up,
		versus: upstream.name, versusMeans: "gateway (`--upstream`) ÷ direct",
		// The load generator dials with a 30 s bound (newTransport); the
		// gateway's dials to its upstream get the same, so that a machine
		// too busy to complete a connect in the default 5 s fails neither.
		argv: tidemarkServe("--upstream", upstreamPlaceholder, "--upstream-connect-timeout", "30s"),
		label: "Tidemark gateway: `tidemark serve --upstream` in front of a " + upstream.name + " process ({upstream}, started first " +
			"on its own port; its CPU time is the row's helper CPU)",
	}
}

// stdioGatewaySpec returns the stdio gateway row: tidemark serve --stdio
// with `benchpeer --kind stdio` (the demo server of `tidemark serve`, over
// stdin and stdout) as the subprocess of each session.
func stdioGatewaySpec(tidemarkServe func(...string) func(int) []string, bin string) serverSpec {
	const why = "one subprocess per session: the thousands of sessions of this workload would be as many processes"
	return serverSpec{
		name: "gateway-stdio", role: roleGateway,
		versus: "tidemark", versusMeans: "gateway (`--stdio`) ÷ in process",
		argv: tidemarkServe("--max-processes", strconv.Itoa(stdioMaxProcesses), "--stdio", "--", filepath.Join(bin, "benchpeer"), "--kind", "stdio"),
		skip: map[string]string{"d": why, "e": why}, subprocesses: true,
		label: "Tidemark gateway: `tidemark serve --stdio` with `benchpeer --kind stdio` (the same demo server as `tidemark`, over stdio) " +
			"as each session's subprocess; the subprocesses' CPU time is the row's helper CPU",
	}
}
