package main

import (
	"strings"
	"testing"
	"time"
)

// TestShellJoin: the command line in BENCHMARKS.md can be pasted into a
// shell as it is.
func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"--tidemark-variant", "durable=--data-dir {tmpdir}", "--baseline", "c6c99e5", "it's", ""})
	want := `--tidemark-variant 'durable=--data-dir {tmpdir}' --baseline c6c99e5 'it'\''s' ''`
	if got != want {
		t.Fatalf("shellJoin = %s, want %s", got, want)
	}
}

// TestTableDH: (d)'s hibernated part reports each row's memory per
// session awake and hibernated (RSS and heap), its wake latencies and
// wrong wakes, against its goals, in the table and in the Goals section.
func TestTableDH(t *testing.T) {
	cfg := fullConfig()
	const n = 100000
	mk := func(name string, hibRSS int64, p99 time.Duration, wrong int, example string) *row {
		return &row{spec: serverSpec{name: name, hibernates: true}, hasDH: true, dh: resultDH{
			sessionsAwake: n, sessions: n,
			rssBase: 50 << 20, rssAwake: 50<<20 + n*19<<10, heapBase: 10 << 20, heapAwake: 10<<20 + n*9<<10, openedAwake: 80 * time.Second,
			rssBaseH: 60 << 20, rssHibernated: 60<<20 + n*hibRSS, heapBaseH: 10 << 20, heapHibernated: 10<<20 + n*512, opened: 95 * time.Second,
			hibernated: 7500 * time.Millisecond, settled: 12 * time.Second, settleNote: "settled",
			wakes: 5000, wrong: wrong, example: example, woken: 5000, wokenSame: 5000 - int64(wrong),
			p50: 1200 * time.Microsecond, p99: p99, awakeP50: 800 * time.Microsecond, awakeP99: 3 * time.Millisecond, took: 230 * time.Second,
		}}
	}
	// The gateway row's awake process opens fewer sessions
	// (serverSpec.awakeSessions): its awake figures are per one of those,
	// its hibernated ones per one of the full count; it has a goal of RSS
	// only.
	const gn = 15000
	gw := mk("gateway", 2560, 30*time.Millisecond, 0, "")
	gw.spec.awakeCap, gw.spec.awakeWhy = gn, "one connection to the upstream per awake session"
	gw.dh.sessionsAwake, gw.dh.wokenSame = gn, 0
	gw.dh.rssAwake, gw.dh.rssHibernated = 50<<20+gn*60<<10, 60<<20+n*1800
	gw.dh.heapAwake, gw.dh.heapHibernated = 10<<20+gn*30<<10, 10<<20+n*1536
	// A gateway row that failed shows the counts its processes were to open.
	gwFailed := &row{spec: gw.spec, failure: "upstream died"}
	gwFailed.spec.name = "gateway-b"

	r := &report{cfg: cfg, rows: []*row{
		mk("tidemark", 1536, 4500*time.Microsecond, 0, ""),
		mk("durable", 1536, 20*time.Millisecond, 1, "session 7: <nil> status 404: gone"),
		{spec: serverSpec{name: "redis", hibernates: true}, failure: "redis-server died"},
		gw,
		gwFailed,
		{spec: serverSpec{name: "gateway-stdio", skip: map[string]string{"dh": "a subprocess per session"}}},
		{spec: serverSpec{name: "gosdk"}},
	}}
	var b strings.Builder
	r.tableDH(&b)
	got := b.String()
	for _, want := range []string{
		"| tidemark | 100000 | 19.00 KiB | 1.50 KiB | 9.00 / 0.50 KiB | 1905 / 206 MiB | 80.0 / 95.0 s | 7.5 s | settled after 12 s | 1.20ms | 4.50ms | 0.80ms / 3.00ms | 0 of 5000 | 5000 / 5000 | 230 s | ≤ 2 KiB: met | ≤ 5.00ms: met |\n",
		"| durable | 100000 | 19.00 KiB | 1.50 KiB | 9.00 / 0.50 KiB | 1905 / 206 MiB | 80.0 / 95.0 s | 7.5 s | settled after 12 s | 1.20ms | 20.00ms | 0.80ms / 3.00ms | 1 of 5000 (session 7: <nil> status 404: gone) | 4999 / 5000 | 230 s | ≤ 1 KiB: **not met** | ≤ 15.00ms: **not met** |\n",
		"| redis | 100000 | – | – | – | – | – | – | – | – | – | – | – | – | – | – | redis-server died |\n",
		"| gateway | 15000 / 100000 | 60.00 KiB | 1.76 KiB | 30.00 / 1.50 KiB | 929 / 232 MiB | 80.0 / 95.0 s | 7.5 s | settled after 12 s | 1.20ms | 30.00ms | 0.80ms / 3.00ms | 0 of 5000 | 0 / 5000 | 230 s | ≤ 2 KiB: met | – |\n",
		"| gateway-b | 15000 / 100000 | – | – | – | – | – | – | – | – | – | – | – | – | – | – | upstream died |\n",
		"| gateway-stdio | N/A | – | – | – | – | – | – | – | – | – | – | – | – | – | – | a subprocess per session |\n",
		"Each opens 100000 sessions (initialize + notifications/initialized, 32 at a time, after a warm-up session and a 0.5 s pause: the baseline) in each of two new processes: awake, started with `--hibernate-after 0s --session-idle-ttl 2h --max-sessions 200000 --metrics-addr {metrics-addr}`, hibernation off, opening the fewer of its column `sessions` (awake / hibernated) where this paragraph's end says why; hibernated,",
		"Each figure per session divides by its own process's sessions.",
		"| server | sessions (awake / hibernated) | awake RSS per session |",
		"`--hibernate-after 5s --session-idle-ttl 2h --max-sessions 200000 --metrics-addr {metrics-addr}`",
		"Wake: 5000 sessions spread evenly over the hibernating process's, 16 at a time",
		"awake = as many calls to sessions of the awake process, spread evenly over its own,",
		"Time = both processes, from start to stop. `gateway`'s awake process opens 15000 sessions: one connection to the upstream per awake session. `gateway-b`'s awake process opens 15000 sessions: one connection to the upstream per awake session.\n\n| server | sessions (awake / hibernated) |",
		"VmRSS and heap are the server process's alone: a gateway's, not its upstream's.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q; it is:\n%s", want, got)
		}
	}
	if strings.Contains(got, "| gosdk |") {
		t.Errorf("the table has a row of a server that does not hibernate:\n%s", got)
	}
	b.Reset()
	r.goals(&b)
	for _, want := range []string{
		"| (d) tidemark ≤ 2 KiB of RSS per hibernated session, 100000 sessions | 1.50 KiB | met |\n",
		"| (d) tidemark wake p99 ≤ 5.00ms, 16 concurrent wakers, every wake correct | 4.50ms, wrong 0 | met |\n",
		"| (d) durable ≤ 1 KiB of RSS per hibernated session, 100000 sessions | 1.50 KiB | **not met** |\n",
		"| (d) durable wake p99 ≤ 15.00ms, 16 concurrent wakers, every wake correct | 20.00ms, wrong 1 | **not met** |\n",
		"| (d) redis ≤ 1 KiB of RSS per hibernated session, 100000 sessions | – | not measured |\n",
		"| (d) gateway ≤ 2 KiB of RSS per hibernated session, 100000 sessions | 1.76 KiB | met |\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the Goals lack %q; they are:\n%s", want, b.String())
		}
	}
	// A hibernating process that opened fewer sessions than the goals'
	// count (a quick run's) is not measured against them, and its line
	// says the count it opened.
	small := mk("gateway", 1024, 30*time.Millisecond, 0, "")
	small.dh.sessionsAwake, small.dh.sessions = 300, 300
	small.dh.rssHibernated = small.dh.rssBaseH + 300*1024
	var sb strings.Builder
	(&report{cfg: cfg, rows: []*row{small}}).goals(&sb)
	if want := "| (d) gateway ≤ 2 KiB of RSS per hibernated session, 300 sessions | 1.00 KiB | not measured |\n"; !strings.Contains(sb.String(), want) {
		t.Errorf("the Goals of a quick run lack %q; they are:\n%s", want, sb.String())
	}
	// The gateway has no goal of wake latency, and the stdio gateway none
	// at all.
	for _, unwanted := range []string{"(d) gateway wake p99", "gateway-stdio"} {
		if strings.Contains(b.String(), unwanted) {
			t.Errorf("the Goals have %q; they are:\n%s", unwanted, b.String())
		}
	}
}

// TestScavenged: RSS has settled only once the heap the runtime keeps
// from the OS is down to 110 % of the next collection's goal (1 MiB of
// slack), or the server exposes no goal.
func TestScavenged(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		heap, idle, released, next int64
		want                       bool
	}{
		{45 * mb, 250 * mb, 235 * mb, 58 * mb, true},  // 60 MiB kept, goal 63.8 MiB
		{43 * mb, 250 * mb, 150 * mb, 58 * mb, false}, // 143 MiB kept
		{50 * mb, 6 * mb, 0, 50 * mb, true},           // 56 MiB kept: at 110 % + 1 MiB
		{50 * mb, 6*mb + 1, 0, 50 * mb, false},        // one byte over
		{43 * mb, 250 * mb, 0, 0, true},               // no goal exposed
	} {
		r := reading{heap: tc.heap, heapIdle: tc.idle, heapReleased: tc.released, nextGC: tc.next}
		if got := r.scavenged(); got != tc.want {
			t.Errorf("heap %d idle %d released %d next %d: scavenged %v, want %v", tc.heap, tc.idle, tc.released, tc.next, got, tc.want)
		}
	}
}
