// telemetry_test.go tests what operators see of a real tidemark serve: a
// real Prometheus scraping its metrics, its spans reaching an OTLP
// receiver, /readyz following Redis, and the session inspector.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/otlptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// startObserved starts tidemark serve with the operator's listener on a
// free port, and returns the process, the MCP endpoint and the operator's
// listener address.
func startObserved(t *testing.T, env []string, args ...string) (*testenv.Process, string, string) {
	t.Helper()
	cmd := exec.Command(testenv.BuildTidemark(t), append([]string{"serve", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	p := testenv.StartCmd(t, cmd)
	m := p.WaitFor(t, `msg="operator's listener started" url=http://(\S+)`, 30*time.Second)
	return p, testenv.ServeURL(t, p), m[1]
}

// startPrometheus starts a Prometheus server on a free loopback port, with
// its storage in a temporary directory, scraping target every second, and
// returns its base URL once it is ready.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	testenv.Need(t, testenv.Prometheus)
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	err := os.WriteFile(config, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tidemark
    static_configs:
      - targets: ['%s']
`, target)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		base := "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
		p := testenv.StartProcess(t, "prometheus", "--config.file="+config,
			"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+strings.TrimPrefix(base, "http://"))
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if resp, err := http.Get(base + "/-/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return base
				}
			}
			select {
			case <-p.Done():
				deadline = time.Now()
			case <-time.After(100 * time.Millisecond):
			}
		}
		if attempt == 3 {
			t.Fatalf("prometheus did not become ready; output:\n%s", p.Output())
		}
		p.Kill()
	}
}

// promQuery returns the value of the single series query selects in
// Prometheus at base, or -1 when it selects none.
func promQuery(t *testing.T, base, query string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("query %s: status %q, %v", query, r.Status, err)
	}
	switch len(r.Data.Result) {
	case 0:
		return -1
	case 1:
		v, _ := strconv.ParseFloat(r.Data.Result[0].Value[1].(string), 64)
		return v
	}
	t.Fatalf("query %s selects %d series, want one: %v", query, len(r.Data.Result), r.Data.Result)
	return 0
}

// ids adds the ids of evs to seen.
func ids(seen map[string]bool, evs []mcptest.Event) {
	for _, ev := range evs {
		if ev.HasID && ev.ID != "" {
			seen[ev.ID] = true
		}
	}
}

// TestPrometheusScrapesExactCounts: a real Prometheus scrapes a real
// tidemark serve --metrics-addr; after a scripted run (initialize, N echo
// calls, one countdown cut and resumed exactly, one 409 cursor_compacted,
// one 404, one 400 cursor_ahead) Prometheus's HTTP API gives the exact count of each,
// and promtool check metrics finds nothing to complain about.
func TestPrometheusScrapesExactCounts(t *testing.T) {
	testenv.Need(t, testenv.Prometheus)
	_, endpoint, metricsAddr := startObserved(t, nil, "--retention-events", "100")
	prom := startPrometheus(t, metricsAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	sess, err := (&mcptest.Client{URL: endpoint}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// N echo calls, each stream read to its end; the first one's opening
	// cursor is kept for the 409 (N*2 events pass --retention-events).
	seen := map[string]bool{}
	const n = 60
	var oldest string
	for i := range n {
		st, err := sess.Call(ctx, mcptest.ToolCall(int64(100+i), "echo", map[string]any{"text": "hi"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := st.Collect()
		if err != nil {
			t.Fatal(err)
		}
		ids(seen, evs)
		if i == 0 {
			oldest = evs[0].ID
		}
	}

	// One cut and exact resume.
	st, err := sess.Call(ctx, mcptest.ToolCall(20, "countdown", map[string]any{"n": 10, "delay_ms": 20}, "cd"))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Until(func(ev mcptest.Event) bool { return len(seen) > 0 && ev.HasID && !ev.IsPriming() })
	if err != nil {
		t.Fatal(err)
	}
	ids(seen, evs)
	last := evs[len(evs)-1].ID
	st.Close()
	time.Sleep(100 * time.Millisecond) // the countdown goes on: the resume replays what it missed
	if st, err = sess.Resume(ctx, last); err != nil {
		t.Fatalf("exact resume: %v", err)
	}
	evs, err = st.Collect()
	if err != nil {
		t.Fatal(err)
	}
	// The resumed stream's priming event is made for this connection (an
	// id of its own), never appended to the log.
	if len(evs) < 2 || !evs[0].IsPriming() {
		t.Fatalf("resumed stream does not open with a priming event: %v", evs)
	}
	ids(seen, evs[1:])
	if !evs[len(evs)-1].IsResponseTo(mcptest.ID(20)) {
		t.Fatalf("resumed stream did not end with the countdown's response: %v", evs)
	}

	// 409: the first echo's cursor, more than --retention-events ago.
	_, err = sess.Resume(ctx, oldest)
	wantRefusal(t, err, http.StatusConflict, "cursor_compacted")

	// 400 cursor_ahead: the newest cursor's sequence a million further.
	newest := last
	cut := strings.LastIndex(newest, "-")
	seq, _ := strconv.ParseUint(newest[cut+1:], 10, 64)
	_, err = sess.Resume(ctx, newest[:cut+1]+strconv.FormatUint(seq+1_000_000, 10))
	wantRefusal(t, err, http.StatusBadRequest, "cursor_ahead")

	// 404: a token this server never issued.
	ghost := (&mcptest.Client{URL: endpoint}).SessionFor("GHOSTGHOSTGHOSTGHOSTGHOST1", sess.ProtocolVersion)
	_, err = ghost.Resume(ctx, newest)
	wantRefusal(t, err, http.StatusNotFound, "session_not_found")

	want := map[string]float64{
		`tidemark_resumes_total{outcome="accepted",reason="replay"}`:                               1,
		`tidemark_resumes_total{outcome="refused",reason="cursor_compacted"}`:                      1,
		`tidemark_resumes_total{outcome="refused",reason="cursor_ahead"}`:                          1,
		`tidemark_resumes_total{outcome="refused",reason="session_not_found"}`:                     1,
		`tidemark_refusals_total{status="409",reason="cursor_compacted"}`:                          1,
		`tidemark_refusals_total{status="400",reason="cursor_ahead"}`:                              1,
		`tidemark_refusals_total{status="404",reason="session_not_found"}`:                         1,
		`sum(tidemark_refusals_total)`:                                                             3,
		`mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",error_type=""}`:  n + 1,
		`mcp_server_operation_duration_seconds_count{mcp_method_name="initialize"}`:                1,
		`mcp_server_operation_duration_seconds_count{mcp_method_name="notifications/initialized"}`: 1,
		`tidemark_sessions_created_total`:                                                          1,
		`tidemark_sessions_live`:                                                                   0,                      // cursor_ahead ended its live state
		`tidemark_events_appended_total`:                                                           float64(len(seen) + 2), // and initialize's priming event and response
		`sum(tidemark_streams_open)`:                                                               0,
		`tidemark_replay_duration_seconds_count`:                                                   1,
	}
	// Wait for a scrape taken after the run: the last refusal counted.
	deadline := time.Now().Add(20 * time.Second)
	for promQuery(t, prom, `tidemark_refusals_total{reason="session_not_found"}`) != 1 || promQuery(t, prom, `sum(tidemark_streams_open)`) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("Prometheus has not scraped the run's refusals within 20 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // one more scrape: every counter of the run is in it
	for q, v := range want {
		if got := promQuery(t, prom, q); got != v {
			t.Errorf("Prometheus: %s = %v, want %v", q, got, v)
		}
	}
	if got := promQuery(t, prom, `tidemark_events_replayed_total`); got < 1 {
		t.Errorf("tidemark_events_replayed_total = %v, want at least 1 (the countdown's events after the cut)", got)
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	check := exec.Command("promtool", "check", "metrics")
	check.Stdin = strings.NewReader(string(body))
	if out, err := check.CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestTracesExported: tidemark serve with OTEL_EXPORTER_OTLP_ENDPOINT
// exports to an OTLP receiver (decoding the protocol with the official
// types): a tools/call span named "tools/call echo", child of the span in
// its params._meta.traceparent, with the MCP conventions' attributes; the
// initialize span, child of the HTTP header's traceparent; a resume span
// with its reason; store write spans.
func TestTracesExported(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			recv := otlptest.Start(t, protocol)
			_, endpoint, _ := startObserved(t, []string{
				"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
				"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=tidemark-e2e",
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client := &mcptest.Client{URL: endpoint, Header: http.Header{
				"Traceparent": {"00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01"},
			}}
			sess, err := client.Initialize(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			call := mcptest.MustCall(2, "tools/call", map[string]any{
				"name": "echo", "arguments": map[string]any{"text": "traced"},
				"_meta": map[string]any{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			})
			st, err := sess.Call(ctx, call)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := st.Collect()
			if err != nil {
				t.Fatal(err)
			}
			_, err = sess.Resume(ctx, evs[0].ID+"0")
			wantRefusal(t, err, http.StatusBadRequest, "cursor_ahead")

			find := func(spans []otlptest.Span, name string) (otlptest.Span, bool) {
				for _, s := range spans {
					if s.Name == name {
						return s, true
					}
				}
				return otlptest.Span{}, false
			}
			spans := recv.WaitFor(t, 20*time.Second, func(s []otlptest.Span) bool {
				_, a := find(s, "tools/call echo")
				_, b := find(s, "resume")
				_, c := find(s, "initialize")
				return a && b && c
			})
			tool, _ := find(spans, "tools/call echo")
			if tool.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || tool.ParentSpanID != "00f067aa0ba902b7" {
				t.Errorf("tools/call span trace %s parent %s, want those of params._meta.traceparent", tool.TraceID, tool.ParentSpanID)
			}
			want := map[string]string{
				"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo", "jsonrpc.request.id": "2",
				"mcp.session.id": sess.Token[:8], "mcp.protocol.version": "2025-11-25", "network.transport": "tcp",
			}
			for k, v := range want {
				if tool.Attributes[k] != v {
					t.Errorf("tools/call span %s = %q, want %q", k, tool.Attributes[k], v)
				}
			}
			if _, ok := tool.Attributes["error.type"]; ok || tool.Service != "tidemark-e2e" {
				t.Errorf("tools/call span: error.type %q (want none), service %q", tool.Attributes["error.type"], tool.Service)
			}
			for _, s := range spans {
				for k, v := range s.Attributes {
					if strings.Contains(v, sess.Token) {
						t.Errorf("span %s attribute %s carries the whole session token", s.Name, k)
					}
				}
			}
			init, _ := find(spans, "initialize")
			if init.TraceID != strings.Repeat("a", 32) || init.ParentSpanID != strings.Repeat("b", 16) {
				t.Errorf("initialize span trace %s parent %s, want the HTTP header's traceparent", init.TraceID, init.ParentSpanID)
			}
			res, _ := find(spans, "resume")
			if res.Attributes["tidemark.reason"] != "cursor_ahead" || res.Attributes["http.response.status_code"] != "400" || res.TraceID != strings.Repeat("a", 32) {
				t.Errorf("resume span %+v, want reason cursor_ahead, status 400, in the header's trace", res)
			}
			if _, ok := find(spans, "store append"); !ok {
				t.Errorf("no store append span among %d spans", len(spans))
			}
		})
	}
}

// readyz returns /readyz's status and reason.
func readyz(t *testing.T, metricsAddr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct{ Reason string }
	json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r.Reason
}

// awaitReady polls /readyz until it answers status with reason, and
// returns how long that took.
func awaitReady(t *testing.T, metricsAddr string, status int, reason string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, got := readyz(t, metricsAddr)
		if code == status && got == reason {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz answers %d %q, want %d %q within %v", code, got, status, reason, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReadyzFollowsRedis: a fleet replica's /readyz answers 200 while
// Redis serves, 503 unavailable while Redis is stopped, and 200 again once
// Redis is back and the replica has announced itself again (503
// not_registered until then: a Redis without persistence lost the entry).
func TestReadyzFollowsRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	_, _, metricsAddr := startObserved(t, nil, "--redis", rs.URL(), "--lease-ttl", "2s", "--lease-renew", "500ms")
	awaitReady(t, metricsAddr, http.StatusOK, "", 5*time.Second)
	if code, body := get(t, "http://"+metricsAddr+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d %s", code, body)
	}
	rs.Kill()
	awaitReady(t, metricsAddr, http.StatusServiceUnavailable, "unavailable", 10*time.Second)
	rs.Restart()
	awaitReady(t, metricsAddr, http.StatusOK, "", 10*time.Second)
}

// TestReadyzRedisPausedWrites: while Redis holds writes back (CLIENT
// PAUSE WRITE: writes block, reads answer), /readyz answers 503
// unavailable from its first probe, naming the write that was not
// acknowledged, and keeps that reason after the replica's directory entry
// has lapsed (its renewal is a write too); 200 again once Redis takes
// writes (regression: 200 for the first lease TTL of the pause, then
// not_registered).
func TestReadyzRedisPausedWrites(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	_, _, metricsAddr := startObserved(t, nil, "--redis", rs.URL(), "--lease-ttl", "1s", "--lease-renew", "300ms")
	awaitReady(t, metricsAddr, http.StatusOK, "", 5*time.Second)
	if err := rs.Do("CLIENT", "PAUSE", "4000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Do("CLIENT", "UNPAUSE") })
	// The directory entry lapses 1 s into the pause: ask past that.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		code, body := get(t, "http://"+metricsAddr+"/readyz")
		var r struct{ Reason, Error string }
		json.Unmarshal([]byte(body), &r)
		if code != http.StatusServiceUnavailable || r.Reason != "unavailable" || !strings.Contains(r.Error, "a write was not acknowledged within 500ms") {
			t.Fatalf("/readyz while Redis pauses writes: %d %s; want 503 unavailable, a write not acknowledged", code, body)
		}
	}
	if err := rs.Do("CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, metricsAddr, http.StatusOK, "", 5*time.Second)
}

// TestReadyzRedisStopped: while Redis is stopped (SIGSTOP: connections
// open, nothing answers), /readyz answers 503 unavailable within
// Kubernetes' default probe timeout of 1 s, naming the store, every time;
// 200 again once Redis runs (regression: 2 s, so the probe saw a timeout,
// not the answer).
func TestReadyzRedisStopped(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	_, _, metricsAddr := startObserved(t, nil, "--redis", rs.URL())
	awaitReady(t, metricsAddr, http.StatusOK, "", 5*time.Second)
	rs.Pause()
	t.Cleanup(rs.Resume)
	probe := &http.Client{Timeout: time.Second}
	for range 3 {
		resp, err := probe.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			t.Fatalf("/readyz with Redis stopped and a 1 s probe timeout: %v", err)
		}
		var r struct{ Reason, Error string }
		json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || r.Reason != "unavailable" || !strings.Contains(r.Error, "the store cannot be read") {
			t.Fatalf("/readyz with Redis stopped: %d %+v; want 503 unavailable, the store cannot be read", resp.StatusCode, r)
		}
	}
	rs.Resume()
	awaitReady(t, metricsAddr, http.StatusOK, "", 10*time.Second)
}

// TestReadyzRedisOutOfMemory: while Redis is out of memory (maxmemory
// reached, noeviction), /readyz answers 503 unavailable saying that
// Redis refuses writes for want of memory, and 200 once it has memory
// again (regression: "the store cannot be reached", with only Redis's
// EXECABORT, which names no cause).
func TestReadyzRedisOutOfMemory(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	_, _, metricsAddr := startObserved(t, nil, "--redis", rs.URL())
	awaitReady(t, metricsAddr, http.StatusOK, "", 5*time.Second)
	if err := rs.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, metricsAddr, http.StatusServiceUnavailable, "unavailable", 5*time.Second)
	if _, body := get(t, "http://"+metricsAddr+"/readyz"); !strings.Contains(body, "the store cannot be read") ||
		!strings.Contains(body, "Redis refuses writes (out of memory: used memory over maxmemory)") {
		t.Errorf("/readyz %s, want the store cannot be read: Redis refuses writes (out of memory: used memory over maxmemory)", body)
	}
	if err := rs.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, metricsAddr, http.StatusOK, "", 10*time.Second)
}

// TestReadyzCountsRedisReplicas: with --redis-replicas 1, every write
// waits for one replica, so a replica on a Redis without one answers
// /readyz 503 unavailable, naming the count, and 200 once a replica is
// connected and in sync (regression: 200 while every initialize got 503).
func TestReadyzCountsRedisReplicas(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	_, _, metricsAddr := startObserved(t, nil, "--redis", rs.URL(), "--redis-replicas", "1")
	awaitReady(t, metricsAddr, http.StatusServiceUnavailable, "unavailable", 5*time.Second)
	if _, body := get(t, "http://"+metricsAddr+"/readyz"); !strings.Contains(body, "0 of the 1 replicas writes must reach are connected") {
		t.Errorf("/readyz %s, want the error to say 0 of the 1 replicas are connected", body)
	}
	replica := redistest.Start(t, redistest.Options{ReplicaOf: rs.Addr()})
	replica.WaitInSync()
	awaitReady(t, metricsAddr, http.StatusOK, "", 10*time.Second)
}

// TestReadyzRedisStoppedReplica: with the default --redis-replicas 0
// every write waits for the one replica, so while it is stopped
// (SIGSTOP: still connected to the primary) /readyz answers 503
// unavailable within 5 s, naming the replica's lag, and 200 once it runs
// again (regression: 200 throughout while every write failed).
func TestReadyzRedisStoppedReplica(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: rs.Addr()})
	replica.WaitInSync()
	rs.WaitReplicaListed(replica)
	_, _, metricsAddr := startObserved(t, nil, "--redis", rs.URL())
	awaitReady(t, metricsAddr, http.StatusOK, "", 5*time.Second)
	replica.Pause()
	t.Cleanup(replica.Resume)
	awaitReady(t, metricsAddr, http.StatusServiceUnavailable, "unavailable", 5*time.Second)
	want := "0 of the 1 replicas writes must reach are connected to the primary " + rs.Addr() +
		" with a lag of at most 2s (" + replica.Addr() + ": lag "
	if _, body := get(t, "http://"+metricsAddr+"/readyz"); !strings.Contains(body, want) {
		t.Errorf("/readyz %s, want the error to say %q", body, want)
	}
	replica.Resume()
	awaitReady(t, metricsAddr, http.StatusOK, "", 10*time.Second)
}

// TestReadyzFollowsDataDir: a durable store's /readyz answers 200 while
// its data directory is there, and 503 unavailable, naming the directory,
// once it is removed under the running server: every write would be
// refused, so a load balancer must stop sending clients.
func TestReadyzFollowsDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	_, _, metricsAddr := startObserved(t, nil, "--data-dir", dir)
	awaitReady(t, metricsAddr, http.StatusOK, "", 5*time.Second)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, metricsAddr, http.StatusServiceUnavailable, "unavailable", 5*time.Second)
	if _, body := get(t, "http://"+metricsAddr+"/readyz"); !strings.Contains(body, dir) {
		t.Errorf("/readyz %s, want the error to name %s", body, dir)
	}
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestInspectorShowsSessions: the operator's listener of a real tidemark
// serve shows a session with a call in flight on its POST stream and a
// standalone GET stream, each read by one connection: /debug/sessions
// lists it by token prefix, /debug/sessions/{prefix} gives its generation,
// replay floor, high-water mark, streams with their calls and readers,
// owner and lease, and `tidemark inspect` prints the same for a person.
func TestInspectorShowsSessions(t *testing.T) {
	_, endpoint, metricsAddr := startObserved(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := (&mcptest.Client{URL: endpoint}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	call, err := sess.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 1, "delay_ms": 60000}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	if _, err := call.Next(); err != nil { // the priming event: the call runs
		t.Fatal(err)
	}
	standalone, err := sess.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer standalone.Close()
	if _, err := standalone.Next(); err != nil {
		t.Fatal(err)
	}
	prefix := sess.Token[:8]

	code, body := get(t, "http://"+metricsAddr+"/debug/sessions")
	var list admin.List
	if err := json.Unmarshal([]byte(body), &list); err != nil || code != http.StatusOK {
		t.Fatalf("/debug/sessions: %d %s", code, body)
	}
	wantList := admin.List{Count: 1, Sessions: []admin.Summary{{Session: prefix, State: admin.StateLive, Generation: 1, CallsInFlight: 1, Readers: 2}}}
	if !reflect.DeepEqual(list, wantList) {
		t.Errorf("/debug/sessions = %+v, want %+v", list, wantList)
	}

	code, body = get(t, "http://"+metricsAddr+"/debug/sessions/"+prefix)
	var details admin.Details
	if err := json.Unmarshal([]byte(body), &details); err != nil || code != http.StatusOK || len(details.Sessions) != 1 {
		t.Fatalf("/debug/sessions/%s: %d %s", prefix, code, body)
	}
	d := details.Sessions[0]
	if time.Since(d.Created) > time.Minute || d.Owner == "" {
		t.Errorf("created %v, owner %q: want a creation in the last minute and this process as owner", d.Created, d.Owner)
	}
	want := admin.Detail{
		Summary:         wantList.Sessions[0],
		ProtocolVersion: "2025-11-25",
		// initialize's priming event and response (1, 2), the call's
		// stream opening (3), the standalone stream's priming event (4).
		ReplayFloor: 1, HighWaterMark: 4, Events: 4, Bytes: d.Bytes,
		Owner: d.Owner, Created: d.Created,
		Streams: []admin.Stream{{Stream: 0, Readers: 1}, {Stream: 3, CallsInFlight: 1, Readers: 1}},
	}
	if !reflect.DeepEqual(d, want) || d.Bytes <= 0 {
		t.Errorf("/debug/sessions/%s = %+v, want %+v (bytes > 0)", prefix, d, want)
	}

	var stdout, stderr strings.Builder
	if code := run([]string{"inspect", "--metrics-addr", metricsAddr}, &stdout, &stderr); code != 0 {
		t.Fatalf("tidemark inspect: exit %d: %s", code, stderr.String())
	}
	wantText := "1 session live in this process; the 1 most recently used:\n" +
		"SESSION   STATE  GENERATION  CALLS  READERS  IDLE\n" +
		prefix + "  live   1           1      2        0s\n"
	if stdout.String() != wantText {
		t.Errorf("tidemark inspect printed\n%s\nwant\n%s", stdout.String(), wantText)
	}
	stdout.Reset()
	if code := run([]string{"inspect", "--metrics-addr", metricsAddr, prefix[:4]}, &stdout, &stderr); code != 0 {
		t.Fatalf("tidemark inspect %s: exit %d: %s", prefix[:4], code, stderr.String())
	}
	wantText = "session           " + prefix + "\n" +
		"state             live\n" +
		"generation        1\n" +
		"protocol version  2025-11-25\n" +
		"replay floor      1\n" +
		"high-water mark   4\n" +
		fmt.Sprintf("retained          4 events, %d bytes\n", d.Bytes) +
		"owner             " + d.Owner + ", lease no expiry (held while the process lives)\n" +
		"created           " + d.Created.Format(time.RFC3339) + "\n" +
		"idle              0s\n" +
		"calls in flight   1\n" +
		"readers           2\n" +
		"streams:\n" +
		"  STREAM          CALLS  READERS\n" +
		"  0 (standalone)  0      1\n" +
		"  3               1      1\n"
	if stdout.String() != wantText {
		t.Errorf("tidemark inspect %s printed\n%s\nwant\n%s", prefix[:4], stdout.String(), wantText)
	}
	stdout.Reset()
	if code := run([]string{"inspect", "--metrics-addr", metricsAddr, "ZZZZ"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `no session of this process has a token starting with "ZZZZ"`) {
		t.Errorf("tidemark inspect ZZZZ: exit %d, stderr %q; want 1 naming the prefix", code, stderr.String())
	}
}
