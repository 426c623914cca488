// prom_test.go tests the Prometheus recorder through its exposition.

package prom_test

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/metrics/prom"
	"github.com/tidemark-mcp/tidemark/replay"
)

// TestExposition: each recorded event shows in the exposition under its
// name and labels with its exact value, method names outside MCP are
// recorded as _OTHER, and the linter finds nothing to complain about.
func TestExposition(t *testing.T) {
	reg := prom.NewRegistry()
	r, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r.Refused(replay.ReasonCursorCompacted)
	r.Refused(replay.ReasonCursorCompacted)
	r.Refused(replay.ReasonSessionNotFound)
	r.Resumed(replay.ReasonReplay)
	r.Resumed(replay.ReasonCursorCompacted)
	r.StreamOpened(metrics.StreamPost)
	r.StreamOpened(metrics.StreamPost)
	r.StreamClosed(metrics.StreamPost)
	r.StreamOpened(metrics.StreamResumed)
	r.Operation("tools/call", "", 30*time.Millisecond)
	r.Operation("tools/call", metrics.ErrorType(-32602), 5*time.Millisecond)
	r.Operation("made/up", "", time.Millisecond)
	r.TaskCreated()
	r.TaskCreated()
	r.TaskRunning(1)
	r.TaskRunning(1)
	r.TaskRunning(-1)
	r.TaskCancelRequested()
	r.TaskRerun()
	r.TaskSettled("completed", "", 2*time.Second)
	r.TaskSettled("failed", replay.Reason("executor_lost"), time.Second)
	r.SessionStarted()
	if err := r.WatchSessions(func() int { return 2 }, func() int { return 3 }, true); err != nil {
		t.Fatal(err)
	}
	r.SessionEnded(replay.ReasonDeleted, 90*time.Second)
	r.GenerationCreated(replay.ReasonLeaseExpired)
	r.SessionHibernated()
	r.SessionHibernated()
	r.SessionWoke(true)
	r.SessionWoke(false)
	r.SessionWoke(true)
	r.Appended(3)
	r.Appended(2)
	r.Replayed(4, 2*time.Millisecond)
	r.Trimmed(7)
	r.Fenced(metrics.OpAppend)
	r.StoreOperation(metrics.StoreRedis, metrics.OpAppend, time.Millisecond, true)
	r.ProcessStarted()
	r.ProcessStarted()
	r.ProcessExited(replay.ReasonServerExited)

	want := `
# HELP tidemark_resumes_total GETs with Last-Event-ID answered, by outcome (accepted, refused) and reason (replay, or the refusal's reason).
# TYPE tidemark_resumes_total counter
tidemark_resumes_total{outcome="accepted",reason="replay"} 1
tidemark_resumes_total{outcome="refused",reason="cursor_compacted"} 1
# HELP tidemark_streams_open SSE streams writing to a connection, by kind: post (a POST's response), standalone (GET), resumed (GET with Last-Event-ID), listen (a 2026-07-28 subscriptions/listen stream).
# TYPE tidemark_streams_open gauge
tidemark_streams_open{kind="listen"} 0
tidemark_streams_open{kind="post"} 1
tidemark_streams_open{kind="resumed"} 1
tidemark_streams_open{kind="standalone"} 0
# HELP tidemark_sessions_live Sessions whose live state this process holds.
# TYPE tidemark_sessions_live gauge
tidemark_sessions_live 2
# HELP tidemark_sessions_hibernated Sessions this process hibernated since it started that it has not seen woken or ended since: only their record is kept, in the store.
# TYPE tidemark_sessions_hibernated gauge
tidemark_sessions_hibernated 3
# HELP tidemark_sessions_created_total Sessions created at generation 1 by an initialize request in this process, those whose initialize then failed included (they end with reason initialize_failed).
# TYPE tidemark_sessions_created_total counter
tidemark_sessions_created_total 1
# HELP tidemark_generations_created_total Sessions' live state re-created at generation+1, by cause: owner_gone (restart), lease_expired (takeover), engine_ended (the engine session or subprocess ended), hibernated (woken from a hibernation that could not keep the generation), generation_lost (this process ended the generation, whose events were not stored).
# TYPE tidemark_generations_created_total counter
tidemark_generations_created_total{cause="lease_expired"} 1
# HELP tidemark_events_appended_total Events appended to session event logs.
# TYPE tidemark_events_appended_total counter
tidemark_events_appended_total 5
# HELP tidemark_events_replayed_total Events replayed to resumed streams (those below the high-water mark the resume found).
# TYPE tidemark_events_replayed_total counter
tidemark_events_replayed_total 4
# HELP tidemark_retention_trimmed_events_total Events removed from session logs by retention (events, bytes, age, budget).
# TYPE tidemark_retention_trimmed_events_total counter
tidemark_retention_trimmed_events_total 7
# HELP tidemark_replay_floor_raises_total Times retention raised a session's replay floor.
# TYPE tidemark_replay_floor_raises_total counter
tidemark_replay_floor_raises_total 1
# HELP tidemark_leases_held Session leases this replica holds (fleet mode).
# TYPE tidemark_leases_held gauge
tidemark_leases_held 2
# HELP tidemark_takeovers_total Sessions this replica took over from a replica whose lease lapsed (fleet mode).
# TYPE tidemark_takeovers_total counter
tidemark_takeovers_total 1
# HELP tidemark_subprocesses_running Gateway subprocesses running (serve --stdio).
# TYPE tidemark_subprocesses_running gauge
tidemark_subprocesses_running 1
# HELP tidemark_subprocess_exits_total Gateway subprocesses that exited, by reason: closed (their session ended or the server stopped), fenced, initialize_timeout, server_exited (on their own).
# TYPE tidemark_subprocess_exits_total counter
tidemark_subprocess_exits_total{reason="server_exited"} 1
# HELP tidemark_tasks_created_total Tasks created by this process (Tasks extension).
# TYPE tidemark_tasks_created_total counter
tidemark_tasks_created_total 2
# HELP tidemark_tasks_settled_total Tasks this process stored as terminal, by status (completed, failed, cancelled) and reason: none when the call's own outcome settled it, else why Tidemark did (executor_lost, task_expired, result_too_large).
# TYPE tidemark_tasks_settled_total counter
tidemark_tasks_settled_total{reason="executor_lost",status="failed"} 1
tidemark_tasks_settled_total{reason="none",status="completed"} 1
# HELP tidemark_tasks_cancel_requests_total tasks/cancel requests received by this process that asked a working or input_required task to stop.
# TYPE tidemark_tasks_cancel_requests_total counter
tidemark_tasks_cancel_requests_total 1
# HELP tidemark_tasks_reruns_total Calls of idempotent tools run again by this process after their executor was lost (--task-rerun).
# TYPE tidemark_tasks_reruns_total counter
tidemark_tasks_reruns_total 1
# HELP tidemark_sessions_hibernated_total Idle sessions hibernated: their live state given up, their record kept in the store.
# TYPE tidemark_sessions_hibernated_total counter
tidemark_sessions_hibernated_total 2
# HELP tidemark_session_wakes_total Hibernated sessions woken by a request, by generation: same (the engine restored the state exactly) or next (generation+1).
# TYPE tidemark_session_wakes_total counter
tidemark_session_wakes_total{generation="next"} 1
tidemark_session_wakes_total{generation="same"} 2
# HELP tidemark_tasks_running Rounds of tasks running in this process.
# TYPE tidemark_tasks_running gauge
tidemark_tasks_running 1
`
	names := []string{
		"tidemark_resumes_total", "tidemark_streams_open", "tidemark_sessions_live",
		"tidemark_sessions_created_total", "tidemark_generations_created_total", "tidemark_events_appended_total",
		"tidemark_events_replayed_total", "tidemark_retention_trimmed_events_total", "tidemark_replay_floor_raises_total",
		"tidemark_leases_held", "tidemark_takeovers_total",
		"tidemark_subprocesses_running", "tidemark_subprocess_exits_total",
		"tidemark_tasks_created_total", "tidemark_tasks_settled_total", "tidemark_tasks_cancel_requests_total",
		"tidemark_tasks_reruns_total", "tidemark_tasks_running",
		"tidemark_sessions_hibernated_total", "tidemark_session_wakes_total",
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// The counters exported at zero for every label value from the start
	// (TestAlertedCountersStartAtZero) hold the recorded counts.
	refusals := counterValues(t, reg, "tidemark_refusals_total", "status", "reason")
	fenced := counterValues(t, reg, "tidemark_fenced_writes_total", "operation")
	storeErrors := counterValues(t, reg, "tidemark_store_errors_total", "store", "operation")
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"refusals 409 cursor_compacted", refusals["409,cursor_compacted"], 2},
		{"refusals 404 session_not_found", refusals["404,session_not_found"], 1},
		{"fenced append", fenced["append"], 1},
		{"store errors redis append", storeErrors["redis,append"], 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if sum(refusals) != 3 || sum(fenced) != 1 || sum(storeErrors) != 1 {
		t.Errorf("refusals, fenced writes and store errors sum to %v, %v, %v; want 3, 1, 1", sum(refusals), sum(fenced), sum(storeErrors))
	}
	counts := histogramCounts(t, reg, "mcp_server_operation_duration_seconds", "mcp_method_name", "error_type")
	wantOps := map[string]uint64{"tools/call,": 1, "tools/call,-32602": 1, "_OTHER,": 1}
	if !equal(counts, wantOps) {
		t.Errorf("mcp_server_operation_duration_seconds counts %v, want %v", counts, wantOps)
	}
	if c := histogramCounts(t, reg, "mcp_server_session_duration_seconds", "reason"); !equal(c, map[string]uint64{"deleted": 1}) {
		t.Errorf("mcp_server_session_duration_seconds counts %v, want deleted: 1", c)
	}
	if c := histogramCounts(t, reg, "tidemark_task_duration_seconds", "status"); !equal(c, map[string]uint64{"completed": 1, "failed": 1}) {
		t.Errorf("tidemark_task_duration_seconds counts %v, want completed: 1, failed: 1", c)
	}
	if c := histogramCounts(t, reg, "tidemark_replay_duration_seconds"); !equal(c, map[string]uint64{"": 1}) {
		t.Errorf("tidemark_replay_duration_seconds counts %v, want 1", c)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestAlertedCountersStartAtZero: the counters the alerting rules take a
// rate or an increase of (deploy/prometheus/alerts.yml) are exported at 0
// for every label value before anything is recorded: refusals for every
// reason of the catalogue with its status, fenced writes for every store
// operation, and store errors for every operation of the store opened,
// none of another store's.
func TestAlertedCountersStartAtZero(t *testing.T) {
	reg := prom.NewRegistry()
	r, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r.StoreOpened(metrics.StoreRedis)
	wantRefusals := map[string]float64{}
	for _, reason := range replay.Refusals() {
		wantRefusals[strconv.Itoa(reason.Status())+","+string(reason)] = 0
	}
	wantFenced, wantStoreErrors := map[string]float64{}, map[string]float64{}
	for _, op := range metrics.Ops() {
		wantFenced[op] = 0
		wantStoreErrors["redis,"+op] = 0
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   map[string]float64
	}{
		{"tidemark_refusals_total", []string{"status", "reason"}, wantRefusals},
		{"tidemark_fenced_writes_total", []string{"operation"}, wantFenced},
		{"tidemark_store_errors_total", []string{"store", "operation"}, wantStoreErrors},
	} {
		got := counterValues(t, reg, c.name, c.labels...)
		if !maps.Equal(got, c.want) {
			t.Errorf("%s before any event: %v\nwant every label value at 0: %v", c.name, got, c.want)
		}
	}
	if n := len(wantRefusals); n < 30 || len(wantFenced) != 14 {
		t.Errorf("%d refusal reasons and %d store operations; want at least 30 and 14", n, len(wantFenced))
	}
}

// counterValues returns the value of each series of counter name, keyed
// by its labels' values joined with commas.
func counterValues(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) map[string]float64 {
	t.Helper()
	return series(t, reg, name, labels, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}

// series returns value(m) for each series m of the metric family name,
// keyed by the values of its labels named labels, joined with commas.
func series[V any](t *testing.T, reg prometheus.Gatherer, name string, labels []string, value func(*dto.Metric) V) map[string]V {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]V{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			vals := make([]string, len(labels))
			for _, l := range m.GetLabel() {
				for i, want := range labels {
					if l.GetName() == want {
						vals[i] = l.GetValue()
					}
				}
			}
			out[strings.Join(vals, ",")] = value(m)
		}
	}
	return out
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// TestSecondRecorderOnOneRegistry: a second Recorder on one registry fails
// instead of sharing or silently losing series.
func TestSecondRecorderOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := prom.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := prom.New(reg); err == nil {
		t.Fatal("second prom.New on one registry succeeded; want an already-registered error")
	}
}

// histogramCounts returns the sample count of each series of histogram
// name, keyed by its labels' values joined with commas.
func histogramCounts(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) map[string]uint64 {
	t.Helper()
	return series(t, reg, name, labels, func(m *dto.Metric) uint64 { return m.GetHistogram().GetSampleCount() })
}

func equal(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// TestBuildInfo: tidemark_build_info is 1 with the build's labels, a
// second registration fails, and the linter finds nothing to complain
// about.
func TestBuildInfo(t *testing.T) {
	reg := prom.NewRegistry()
	if err := prom.RegisterBuildInfo(reg, "v1.2.3", "40aecafd7b910c398eb60a709f2e43068fb44d8b", "go1.26.8"); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP tidemark_build_info Always 1; its labels name the build of tidemark that runs: version (the main module's), revision (the commit) and goversion.
# TYPE tidemark_build_info gauge
tidemark_build_info{goversion="go1.26.8",revision="40aecafd7b910c398eb60a709f2e43068fb44d8b",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tidemark_build_info"); err != nil {
		t.Error(err)
	}
	if err := prom.RegisterBuildInfo(reg, "v1.2.3", "40aecafd7b910c398eb60a709f2e43068fb44d8b", "go1.26.8"); err == nil {
		t.Error("a second tidemark_build_info registered")
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
