package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConfigurations renders the section of Tidemark's configurations:
// each row with a reference row divided by it, CPU counting the helpers'
// (the Redis processes), and rows whose reference did not run left out.
func TestConfigurations(t *testing.T) {
	cfg := quickConfig()
	cfg.aConc = []int{16}
	mk := func(spec serverSpec, rate float64, cpu, helper time.Duration) *row {
		return &row{spec: spec,
			a:    []resultA{{conc: 16, calls: 1000, rate: rate, cpuPerCall: cpu, helperPerCall: helper}},
			hasB: true, b1: resultB{rate: rate * 10, received: 100, cpuPerEvent: cpu / 10, helperPerEvent: helper / 10},
		}
	}
	r := &report{cfg: cfg, rows: []*row{
		mk(serverSpec{name: "tidemark", role: roleTidemark}, 4000, 300*time.Microsecond, 0),
		mk(serverSpec{name: "durable", role: roleVariant, versus: "tidemark", versusMeans: "durable ÷ memory"}, 3000, 400*time.Microsecond, 0),
		mk(serverSpec{name: "redis", role: roleVariant, redis: redisOne, versus: "tidemark", versusMeans: "Redis ÷ memory"}, 2000, 300*time.Microsecond, 300*time.Microsecond),
		mk(serverSpec{name: "sentinel", role: roleVariant, redis: redisSentinel, versus: "redis", versusMeans: "Sentinel ÷ one Redis"}, 1000, 400*time.Microsecond, 500*time.Microsecond),
		mk(serverSpec{name: "gateway", role: roleGateway, versus: "gosdk", versusMeans: "gateway ÷ direct"}, 1000, 400*time.Microsecond, 500*time.Microsecond),
	}}
	var b strings.Builder
	r.configurations(&b)
	md := b.String()
	for _, want := range []string{
		"## Tidemark's configurations",
		"- `sentinel` ÷ `redis`: Sentinel ÷ one Redis\n",
		"| metric | durable ÷ tidemark | redis ÷ tidemark | sentinel ÷ redis |\n",
		"| (a) calls/s, 16 sessions ↑ | 0.75 | 0.50 | 0.50 |\n",
		"| (a) CPU per call, 16 sessions ↓ | 1.33 | 2.00 | 1.50 |\n",
		"| (b) events/s, 1 stream ↑ | 0.75 | 0.50 | 0.50 |\n",
		"| (c) replay time ↓ | – | – | – |\n",
		"| (t) tasks created/s, 16 clients ↑ | – | – | – |\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "gateway") {
		t.Errorf("the section divides the gateway by gosdk, which did not run:\n%s", md)
	}
}

// TestRatios renders the Ratios section: one table per Tidemark row,
// each cell its figure divided by the peer's, – where either is missing.
func TestRatios(t *testing.T) {
	cfg := quickConfig()
	cfg.aConc = []int{16}
	mk := func(spec serverSpec, rate float64, cpu time.Duration) *row {
		return &row{spec: spec, a: []resultA{{conc: 16, calls: 1000, rate: rate, cpuPerCall: cpu}}}
	}
	r := &report{cfg: cfg, rows: []*row{
		mk(serverSpec{name: "tidemark", role: roleTidemark}, 4000, 300*time.Microsecond),
		mk(serverSpec{name: "gosdk", role: rolePeer}, 2000, 400*time.Microsecond),
		mk(serverSpec{name: "mcpgo", role: rolePeer}, 8000, 150*time.Microsecond),
	}}
	var b strings.Builder
	r.ratios(&b)
	md := b.String()
	for _, want := range []string{
		"### tidemark ÷ …\n\n| metric | gosdk | mcpgo |\n| --- | ---: | ---: |\n",
		"| (a) calls/s, 16 sessions ↑ | 2.00 | 0.50 |\n",
		"| (a) CPU per call, 16 sessions ↓ | 0.75 | 2.00 |\n",
		"| (c) replay time ↓ | – | – |\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q:\n%s", want, md)
		}
	}
	// Only Tidemark's stores measure (t): the peers' quotients leave it out.
	if strings.Contains(md, "(t) ") {
		t.Errorf("the section lists figures of (t):\n%s", md)
	}
}

// TestGatewayHibernation: the gateway row (`tidemark serve --upstream`)
// runs (d)'s hibernated part with gatewayAwakeSessions sessions in its
// awake process and the full count in its hibernating one in a full run,
// the quick size in both in a quick one, each process started with room
// for twice its sessions; the stdio gateway does not run it, and says
// why; the rows of the stores keep the full count in both.
func TestGatewayHibernation(t *testing.T) {
	all := specs(toolchain{bin: "/b"}, nil, nil, nil)
	byName := map[string]serverSpec{}
	for _, s := range all {
		byName[s.name] = s
	}
	full, quick := fullHibernate(), quickHibernate()
	for _, tc := range []struct {
		name        string
		hibernates  bool
		full, quick int
	}{
		{"tidemark", true, 100000, 300},
		{"durable", true, 100000, 300},
		{"redis", true, 100000, 300},
		{"gateway", true, 15000, 300},
		{"gosdk", false, 100000, 300},
	} {
		s := byName[tc.name]
		if s.hibernates != tc.hibernates || s.awakeSessions(full) != tc.full || s.awakeSessions(quick) != tc.quick {
			t.Errorf("%s: hibernates %v, awake sessions %d full and %d quick; want %v, %d and %d",
				tc.name, s.hibernates, s.awakeSessions(full), s.awakeSessions(quick), tc.hibernates, tc.full, tc.quick)
		}
	}
	gw := byName["gateway"]
	if gw.upstream == nil || gw.upstream.name != "gosdk" || gw.awakeWhy == "" {
		t.Errorf("gateway: upstream %v, why %q; want a gosdk upstream and a reason for its count", gw.upstream, gw.awakeWhy)
	}
	awake := full
	awake.sessions = gw.awakeSessions(full)
	if got, want := strings.Join(hibernateArgs(awake, 0), " "), "--hibernate-after 0s --session-idle-ttl 2h --max-sessions 30000 --metrics-addr {metrics-addr}"; got != want {
		t.Errorf("gateway's awake process: %s, want %s", got, want)
	}
	if got, want := strings.Join(hibernateArgs(full, full.after), " "), "--hibernate-after 5s --session-idle-ttl 2h --max-sessions 200000 --metrics-addr {metrics-addr}"; got != want {
		t.Errorf("gateway's hibernating process: %s, want %s", got, want)
	}
	stdio := byName["gateway-stdio"]
	if stdio.hibernates || !strings.Contains(stdio.skip["dh"], "--stdio-hibernate") {
		t.Errorf("gateway-stdio: hibernates %v, skip (d) hibernated %q; want false, and why", stdio.hibernates, stdio.skip["dh"])
	}
	// The open-file limit bounds the gateway's awake sessions, not the
	// stores'.
	if err := fileRoomFor(gw, 1<<40); err == nil || !strings.Contains(err.Error(), "raise it (ulimit -n") {
		t.Errorf("fileRoomFor(gateway, 2^40) = %v, want an error saying to raise the limit", err)
	}
	if err := fileRoomFor(byName["tidemark"], 1<<40); err != nil {
		t.Errorf("fileRoomFor(tidemark, 2^40) = %v, want nil", err)
	}
}

// TestHibernatingRoom: the gateway's hibernating process is refused
// before it starts when its sessions, opening at 1.5 times the awake
// process's rate, could be awake past the open-file limit within twice
// --hibernate-after, and allowed below it; at most every session (and
// the warm-up one) is awake at once, whatever the rate; the stores' rows
// hold no file per session.
func TestHibernatingRoom(t *testing.T) {
	raiseFileLimit()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur < 4*gatewayFileRoom {
		t.Fatalf("open-file limit %d: the test needs %d", l.Cur, 4*gatewayFileRoom)
	}
	gw := gatewaySpec(func(...string) func(int) []string { return nil }, serverSpec{name: "gosdk"})
	hc := fullHibernate() // 100,000 sessions, 5 s: the peak bound is 15 s of opening
	room := int(l.Cur) - gatewayFileRoom
	// Files of the peak only: at most `room` sessions awake fit.
	fits := float64(room) / 15
	if err := hibernatingRoomFor(gw, hc, fits*0.99); err != nil && !strings.Contains(err.Error(), "ephemeral ports") {
		t.Errorf("hibernatingRoomFor(%.0f/s) = %v, want nil", fits*0.99, err)
	}
	err := hibernatingRoomFor(gw, hc, fits*1.01)
	if err == nil || !strings.Contains(err.Error(), "the hibernating process, opening 100000 sessions at about") {
		t.Errorf("hibernatingRoomFor(%.0f/s) = %v, want the hibernating process refused", fits*1.01, err)
	}
	small := hc
	small.sessions = 300
	if err := hibernatingRoomFor(gw, small, 1e9); err != nil {
		t.Errorf("hibernatingRoomFor(300 sessions, 1e9/s) = %v, want nil", err)
	}
	if err := hibernatingRoomFor(serverSpec{name: "tidemark"}, hc, 1e9); err != nil {
		t.Errorf("hibernatingRoomFor(tidemark, 1e9/s) = %v, want nil", err)
	}
}
