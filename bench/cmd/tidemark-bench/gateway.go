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

// gatewayAwakeSessions is the count of sessions the gateway row's awake
// process of (d)'s hibernated part opens. With hibernation off, each
// session the gateway holds keeps a standalone GET stream open to its
// upstream: one loopback connection per session, so one file descriptor
// in the gateway and one in the upstream, and one of the gateway's
// ephemeral ports (28,232 under Linux's default ip_local_port_range, all
// towards the one upstream address). 100,000 sessions awake are past both
// on a machine whose open-file limit is 20,000; 15,000 leave room under it
// for the gateway's pool of up to 1,024 idle connections to the upstream
// and the load generator's (gatewayFileRoom). The upstream's memory is not
// the bound: the go-sdk process held 100,000 sessions in 1.8 GiB of RSS,
// about 19 KiB each (bench/NOTES.md, 2026-12-06). The hibernating process
// opens as many as every other row: a session gives up its stream when it
// hibernates, so only its peak of awake sessions holds one
// (hibernatingRoomFor).
const gatewayAwakeSessions = 15000

// gatewayFileRoom is the open files a gateway's process and its upstream
// need besides one per awake session: the gateway's pool of idle
// connections to its upstream (engine/upstream: 1,024 at most), the load
// generator's connections, listeners, logs and the runtime's own.
const gatewayFileRoom = 2048

// gatewayAwakeWhy is why the gateway row's awake process opens
// gatewayAwakeSessions sessions, for the report.
const gatewayAwakeWhy = "with hibernation off each session keeps a standalone GET stream open to the upstream, " +
	"one connection (a file descriptor in the gateway and one in the upstream, and an ephemeral port) per session; " +
	"100,000 are past an open-file limit of 20,000 and the 28,232 ephemeral ports of one loopback address. " +
	"In the hibernating process a session closes its stream when it hibernates, so only the sessions awake at once hold one"

// gatewaySpec returns the gateway row: tidemark serve (as tidemarkServe
// runs it) with --upstream pointing at a fresh process of upstream. It
// runs (d)'s hibernated part with gatewayAwakeSessions sessions in its
// awake process and the full count in its hibernating one; the memory
// figures are the gateway process's alone, not its upstream's
// (which holds every upstream session, hibernated or not).
func gatewaySpec(tidemarkServe func(...string) func(int) []string, upstream serverSpec) serverSpec {
	up := upstream
	return serverSpec{
		name: "gateway", role: roleGateway, upstream: &up,
		hibernates: true, awakeCap: gatewayAwakeSessions, awakeWhy: gatewayAwakeWhy,
		versus: upstream.name, versusMeans: "gateway (`--upstream`) ÷ direct",
		// The load generator dials with a 30 s bound (newTransport); the
		// gateway's dials to its upstream get the same, so that a machine
		// too busy to complete a connect in the default 5 s fails neither.
		argv: tidemarkServe("--upstream", upstreamPlaceholder, "--upstream-connect-timeout", "30s"),
		label: "Tidemark gateway: `tidemark serve --upstream` in front of a " + upstream.name + " process ({upstream}, started first " +
			"on its own port; its CPU time is the row's helper CPU)",
	}
}

// stdioHibernateWhy is why the stdio gateway row does not run (d)'s
// hibernated part, for the report.
const stdioHibernateWhy = "its sessions hibernate only with `--stdio-hibernate`, which ends each session's subprocess " +
	"(a wake starts a new one at generation+1: a process start per wake); awake, each session holds a subprocess of its own, " +
	"so the awake process would run as many processes as sessions"

// stdioGatewaySpec returns the stdio gateway row: tidemark serve --stdio
// with `benchpeer --kind stdio` (the demo server of `tidemark serve`, over
// stdin and stdout) as the subprocess of each session.
func stdioGatewaySpec(tidemarkServe func(...string) func(int) []string, bin string) serverSpec {
	const why = "one subprocess per session: the thousands of sessions of this workload would be as many processes"
	return serverSpec{
		name: "gateway-stdio", role: roleGateway,
		versus: "tidemark", versusMeans: "gateway (`--stdio`) ÷ in process",
		argv: tidemarkServe("--max-processes", strconv.Itoa(stdioMaxProcesses), "--stdio", "--", filepath.Join(bin, "benchpeer"), "--kind", "stdio"),
		skip: map[string]string{"d": why, "e": why, "dh": stdioHibernateWhy}, subprocesses: true,
		label: "Tidemark gateway: `tidemark serve --stdio` with `benchpeer --kind stdio` (the same demo server as `tidemark`, over stdio) " +
			"as each session's subprocess; the subprocesses' CPU time is the row's helper CPU",
	}
}
