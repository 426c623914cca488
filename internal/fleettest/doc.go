// Package fleettest holds the tests and benchmarks of fleet mode (DESIGN.md,
// "Fleet mode"; docs/fleet.md, "Fleet mode") through real processes: a real
// redis-server (internal/redistest) and several real `tidemark serve
// --redis` replicas on loopback ports, driven by raw MCP HTTP requests
// (internal/mcptest), with connections cut by internal/faultproxy, owners
// killed with SIGKILL and paused with SIGSTOP. It has no code of its own.
//
//	go test -race ./internal/fleettest/
//	go test -run '^$' -bench . -benchtime 1x ./internal/fleettest/
package fleettest
