// Package prom records Tidemark's metrics with the Prometheus client
// library: a metrics.Recorder whose collectors are registered on a
// prometheus.Registerer the caller gives (no global registry).
// docs/operating.md, "Metrics", lists every metric with its labels.
//
// The MCP server metrics follow the OpenTelemetry semantic conventions for
// MCP under their Prometheus names (mcp.server.operation.duration becomes
// mcp_server_operation_duration_seconds, mcp.method.name the label
// mcp_method_name); Tidemark's own are named tidemark_*.
package prom

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
)

// mcpBuckets are the histogram bucket boundaries, in seconds, that the
// OpenTelemetry MCP semantic conventions give for the MCP duration metrics.
var mcpBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

// fastBuckets bound the durations of store calls and replays: 100 µs to
// about 6.6 s, each four times the last.
var fastBuckets = prometheus.ExponentialBuckets(0.0001, 4, 9)

// Recorder is a metrics.Recorder backed by Prometheus collectors. It is
// safe for concurrent use.
type Recorder struct {
	operation   *prometheus.HistogramVec
	session     *prometheus.HistogramVec
	reg         prometheus.Registerer
	created     prometheus.Counter
	streams     *prometheus.GaugeVec
	streamKinds [4]prometheus.Gauge // post, standalone, resumed, listen
	resumes     *prometheus.CounterVec
	refusals    *prometheus.CounterVec
	appended    prometheus.Counter
	replayed    prometheus.Counter
	replayTime  prometheus.Histogram
	generations *prometheus.CounterVec
	hibernated  prometheus.Counter
	wakes       *prometheus.CounterVec
	fenced      *prometheus.CounterVec
	trimmed     prometheus.Counter
	floorRaises prometheus.Counter
	storeTime   *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	takeovers   prometheus.Counter
	processes   prometheus.Gauge
	exits       *prometheus.CounterVec
	tasks       taskCollectors
}

// taskCollectors are the collectors of metrics.Tasks.
type taskCollectors struct {
	created  prometheus.Counter
	settled  *prometheus.CounterVec
	cancels  prometheus.Counter
	reruns   prometheus.Counter
	running  prometheus.Gauge
	duration *prometheus.HistogramVec
}

// New returns a Recorder whose collectors are registered on reg. It fails
// when reg already has collectors of the same names (a second Recorder on
// one registry).
func New(reg prometheus.Registerer) (*Recorder, error) {
	m := &registrar{reg: reg}
	r := &Recorder{
		reg: reg,
		operation: m.histogramVec("mcp_server_operation_duration_seconds", mcpBuckets, []string{"mcp_method_name", "error_type"},
			"MCP request or notification duration as observed on the receiver from the time it was received until the result or ack is sent (OpenTelemetry mcp.server.operation.duration)."),
		session: m.histogramVec("mcp_server_session_duration_seconds", mcpBuckets, []string{"reason"},
			"The duration of the MCP session as observed on the MCP server (OpenTelemetry mcp.server.session.duration), by the reason it ended."),
		created: m.counter("tidemark_sessions_created_total",
			"Sessions created at generation 1 by an initialize request in this process, those whose initialize then failed included (they end with reason initialize_failed)."),
		streams: m.gaugeVec("tidemark_streams_open", []string{"kind"},
			"SSE streams writing to a connection, by kind: post (a POST's response), standalone (GET), resumed (GET with Last-Event-ID), listen (a 2026-07-28 subscriptions/listen stream)."),
		resumes: m.counterVec("tidemark_resumes_total", []string{"outcome", "reason"},
			"GETs with Last-Event-ID answered, by outcome (accepted, refused) and reason (replay, or the refusal's reason)."),
		refusals: m.counterVec("tidemark_refusals_total", []string{"status", "reason"},
			"Requests refused with an HTTP error status and a JSON-RPC error body, by status and reason."),
		appended: m.counter("tidemark_events_appended_total",
			"Events appended to session event logs."),
		replayed: m.counter("tidemark_events_replayed_total",
			"Events replayed to resumed streams (those below the high-water mark the resume found)."),
		replayTime: m.histogram("tidemark_replay_duration_seconds", fastBuckets,
			"Time from an accepted resume until its stream has replayed every event up to the high-water mark it found."),
		generations: m.counterVec("tidemark_generations_created_total", []string{"cause"},
			"Sessions' live state re-created at generation+1, by cause: owner_gone (restart), lease_expired (takeover), engine_ended (the engine session or subprocess ended), hibernated (woken from a hibernation that could not keep the generation), generation_lost (this process ended the generation, whose events were not stored)."),
		hibernated: m.counter("tidemark_sessions_hibernated_total",
			"Idle sessions hibernated: their live state given up, their record kept in the store."),
		wakes: m.counterVec("tidemark_session_wakes_total", []string{"generation"},
			"Hibernated sessions woken by a request, by generation: same (the engine restored the state exactly) or next (generation+1)."),
		fenced: m.counterVec("tidemark_fenced_writes_total", []string{"operation"},
			"Store writes refused because they carried a generation the session has moved past, by store operation."),
		trimmed: m.counter("tidemark_retention_trimmed_events_total",
			"Events removed from session logs by retention (events, bytes, age, budget)."),
		floorRaises: m.counter("tidemark_replay_floor_raises_total",
			"Times retention raised a session's replay floor."),
		storeTime: m.histogramVec("tidemark_store_operation_duration_seconds", fastBuckets, []string{"store", "operation"},
			"Duration of store calls, by store (memory, durable, redis) and operation."),
		storeErrors: m.counterVec("tidemark_store_errors_total", []string{"store", "operation"},
			"Store calls that failed (unreachable, disk full, other faults; not the contract's not-found, ended, exists or fenced answers), by store and operation."),
		takeovers: m.counter("tidemark_takeovers_total",
			"Sessions this replica took over from a replica whose lease lapsed (fleet mode)."),
		processes: m.gauge("tidemark_subprocesses_running",
			"Gateway subprocesses running (serve --stdio)."),
		exits: m.counterVec("tidemark_subprocess_exits_total", []string{"reason"},
			"Gateway subprocesses that exited, by reason: closed (their session ended or the server stopped), fenced, initialize_timeout, server_exited (on their own)."),
		tasks: taskCollectors{
			created: m.counter("tidemark_tasks_created_total",
				"Tasks created by this process (Tasks extension)."),
			settled: m.counterVec("tidemark_tasks_settled_total", []string{"status", "reason"},
				"Tasks this process stored as terminal, by status (completed, failed, cancelled) and reason: none when the call's own outcome settled it, else why Tidemark did (executor_lost, task_expired, result_too_large)."),
			cancels: m.counter("tidemark_tasks_cancel_requests_total",
				"tasks/cancel requests received by this process that asked a working or input_required task to stop."),
			reruns: m.counter("tidemark_tasks_reruns_total",
				"Calls of idempotent tools run again by this process after their executor was lost (--task-rerun)."),
			running: m.gauge("tidemark_tasks_running",
				"Rounds of tasks running in this process."),
			duration: m.histogramVec("tidemark_task_duration_seconds", mcpBuckets, []string{"status"},
				"Time from a task's creation until this process stored it as terminal, by status."),
		},
	}
	for i, k := range []metrics.StreamKind{metrics.StreamPost, metrics.StreamStandalone, metrics.StreamResumed, metrics.StreamListen} {
		r.streamKinds[i] = r.streams.WithLabelValues(string(k))
	}
	// The counters the alerting rules (deploy/prometheus/alerts.yml) take
	// a rate or an increase of are exported at zero for every label value
	// from the start: a series that first appears at 1 shows no increase,
	// so the first refusal of a reason or the first fenced write of an
	// operation would never fire an alert. tidemark_store_errors_total
	// gets its series when the store is known (StoreOpened).
	for _, reason := range replay.Refusals() {
		r.refusals.WithLabelValues(strconv.Itoa(reason.Status()), string(reason))
	}
	for _, op := range metrics.Ops() {
		r.fenced.WithLabelValues(op)
	}
	if m.err != nil {
		return nil, m.err
	}
	return r, nil
}

// WatchSessions registers the gauges read from the session registry at
// each scrape: tidemark_sessions_live, the value of live();
// tidemark_sessions_hibernated, the value of hibernated(); and, when
// leased (fleet mode), tidemark_leases_held, the value of live(): each
// session this replica holds, it holds under a lease. It fails as New
// does.
func (r *Recorder) WatchSessions(live, hibernated func() int, leased bool) error {
	m := &registrar{reg: r.reg}
	m.gaugeFunc("tidemark_sessions_live",
		"Sessions whose live state this process holds.", live)
	m.gaugeFunc("tidemark_sessions_hibernated",
		"Sessions this process hibernated since it started that it has not seen woken or ended since: only their record is kept, in the store.", hibernated)
	if leased {
		m.gaugeFunc("tidemark_leases_held",
			"Session leases this replica holds (fleet mode).", live)
	}
	return m.err
}

// registrar creates collectors and registers each on reg as it creates
// it, in that order. After the first registration that fails it
// registers no more, and err holds that failure, so a caller declares its
// collectors one after another and checks err once.
type registrar struct {
	reg prometheus.Registerer
	err error
}

// register registers c on m.reg unless an earlier registration failed,
// and returns c.
func register[C prometheus.Collector](m *registrar, c C) C {
	if m.err == nil {
		m.err = m.reg.Register(c)
	}
	return c
}

func (m *registrar) counter(name, help string) prometheus.Counter {
	return register(m, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

func (m *registrar) counterVec(name string, labels []string, help string) *prometheus.CounterVec {
	return register(m, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func (m *registrar) gauge(name, help string) prometheus.Gauge {
	return register(m, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

func (m *registrar) gaugeVec(name string, labels []string, help string) *prometheus.GaugeVec {
	return register(m, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// gaugeFunc registers a gauge whose value is read from value at each
// scrape.
func (m *registrar) gaugeFunc(name, help string, value func() int) {
	register(m, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(value()) }))
}

// histogram and histogramVec take their bucket boundaries in seconds.
func (m *registrar) histogram(name string, buckets []float64, help string) prometheus.Histogram {
	return register(m, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

func (m *registrar) histogramVec(name string, buckets []float64, labels []string, help string) *prometheus.HistogramVec {
	return register(m, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}

// RegisterBuildInfo registers on reg the gauge tidemark_build_info, whose
// value is 1 and whose labels say which build runs: version (the main
// module's), revision (the commit; empty when the binary holds none) and
// goversion (the Go toolchain), so that a query can join any metric with
// the build of the process that exposed it. It fails when reg already has
// it.
func RegisterBuildInfo(reg prometheus.Registerer, version, revision, goVersion string) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "tidemark_build_info",
		Help:        "Always 1; its labels name the build of tidemark that runs: version (the main module's), revision (the commit) and goversion.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	return reg.Register(g)
}

// NewRegistry returns a registry holding the Go runtime and process
// collectors, for a process that serves its own /metrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Refused implements metrics.Transport: the status label is the reason's
// HTTP status in the catalogue.
func (r *Recorder) Refused(reason replay.Reason) {
	r.refusals.WithLabelValues(strconv.Itoa(reason.Status()), string(reason)).Inc()
}

// Resumed implements metrics.Transport.
func (r *Recorder) Resumed(reason replay.Reason) {
	outcome := "refused"
	if reason == replay.ReasonReplay {
		outcome = "accepted"
	}
	r.resumes.WithLabelValues(outcome, string(reason)).Inc()
}

// StreamOpened implements metrics.Transport.
func (r *Recorder) StreamOpened(kind metrics.StreamKind) { r.stream(kind).Inc() }

// StreamClosed implements metrics.Transport.
func (r *Recorder) StreamClosed(kind metrics.StreamKind) { r.stream(kind).Dec() }

func (r *Recorder) stream(kind metrics.StreamKind) prometheus.Gauge {
	switch kind {
	case metrics.StreamPost:
		return r.streamKinds[0]
	case metrics.StreamStandalone:
		return r.streamKinds[1]
	case metrics.StreamResumed:
		return r.streamKinds[2]
	case metrics.StreamListen:
		return r.streamKinds[3]
	}
	return r.streams.WithLabelValues(metrics.Other)
}

// Operation implements metrics.Transport.
func (r *Recorder) Operation(method, errorType string, d time.Duration) {
	r.operation.WithLabelValues(metrics.Method(method), errorType).Observe(d.Seconds())
}

// SessionStarted implements metrics.Sessions.
func (r *Recorder) SessionStarted() { r.created.Inc() }

// SessionEnded implements metrics.Sessions.
func (r *Recorder) SessionEnded(reason replay.Reason, lived time.Duration) {
	r.session.WithLabelValues(string(reason)).Observe(lived.Seconds())
}

// GenerationCreated implements metrics.Sessions.
func (r *Recorder) GenerationCreated(cause replay.Reason) {
	r.generations.WithLabelValues(string(cause)).Inc()
	if cause == replay.ReasonLeaseExpired {
		r.takeovers.Inc()
	}
}

// SessionHibernated implements metrics.Sessions.
func (r *Recorder) SessionHibernated() { r.hibernated.Inc() }

// SessionWoke implements metrics.Sessions.
func (r *Recorder) SessionWoke(sameGeneration bool) {
	gen := "next"
	if sameGeneration {
		gen = "same"
	}
	r.wakes.WithLabelValues(gen).Inc()
}

// Fenced implements metrics.Store.
func (r *Recorder) Fenced(op string) { r.fenced.WithLabelValues(op).Inc() }

// StoreOpened implements metrics.Store: the store's error counts are
// exported at zero for every operation.
func (r *Recorder) StoreOpened(store string) {
	for _, op := range metrics.Ops() {
		r.storeErrors.WithLabelValues(store, op)
	}
}

// Appended implements metrics.Log.
func (r *Recorder) Appended(n int) { r.appended.Add(float64(n)) }

// Replayed implements metrics.Transport.
func (r *Recorder) Replayed(n int, d time.Duration) {
	r.replayed.Add(float64(n))
	r.replayTime.Observe(d.Seconds())
}

// Trimmed implements metrics.Log.
func (r *Recorder) Trimmed(n int) {
	r.trimmed.Add(float64(n))
	r.floorRaises.Inc()
}

// StoreOperation implements metrics.Store.
func (r *Recorder) StoreOperation(store, op string, d time.Duration, failed bool) {
	r.storeTime.WithLabelValues(store, op).Observe(d.Seconds())
	if failed {
		r.storeErrors.WithLabelValues(store, op).Inc()
	}
}

// ProcessStarted implements metrics.Processes.
func (r *Recorder) ProcessStarted() { r.processes.Inc() }

// ProcessExited implements metrics.Processes.
func (r *Recorder) ProcessExited(reason replay.Reason) {
	r.processes.Dec()
	r.exits.WithLabelValues(string(reason)).Inc()
}

// TaskCreated implements metrics.Tasks.
func (r *Recorder) TaskCreated() { r.tasks.created.Inc() }

// TaskSettled implements metrics.Tasks: the reason label is "none" for a
// task the call's own outcome settled.
func (r *Recorder) TaskSettled(status string, reason replay.Reason, lived time.Duration) {
	label := string(reason)
	if label == "" {
		label = "none"
	}
	r.tasks.settled.WithLabelValues(status, label).Inc()
	r.tasks.duration.WithLabelValues(status).Observe(lived.Seconds())
}

// TaskCancelRequested implements metrics.Tasks.
func (r *Recorder) TaskCancelRequested() { r.tasks.cancels.Inc() }

// TaskRerun implements metrics.Tasks.
func (r *Recorder) TaskRerun() { r.tasks.reruns.Inc() }

// TaskRunning implements metrics.Tasks.
func (r *Recorder) TaskRunning(delta int) { r.tasks.running.Add(float64(delta)) }
