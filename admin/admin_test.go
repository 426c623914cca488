// admin_test.go tests the operator's listener's endpoints over loopback
// HTTP.

package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/metrics/prom"
	"github.com/tidemark-mcp/tidemark/replay"
)

// sessions is an Inspector over a fixed list, most recent first.
type sessions []admin.Detail

func (s sessions) Recent(_ context.Context, n int) (admin.List, error) {
	l := admin.List{Count: len(s)}
	for i, d := range s {
		if d.State == admin.StateHibernated {
			l.Hibernated++
		}
		if i < n {
			l.Sessions = append(l.Sessions, d.Summary)
		}
	}
	return l, nil
}

func (s sessions) Lookup(_ context.Context, prefix string) ([]admin.Detail, error) {
	var out []admin.Detail
	for _, d := range s {
		if strings.HasPrefix(d.Session, prefix) {
			out = append(out, d)
		}
	}
	return out, nil
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEndpoints: each endpoint answers with its status and JSON body.
func TestEndpoints(t *testing.T) {
	reg := prom.NewRegistry()
	rec, _ := prom.New(reg)
	rec.Refused(replay.ReasonGenerationMismatch)
	var storeErr atomic.Pointer[error]
	in := sessions{
		{Summary: admin.Summary{Session: "AAAA1111", State: admin.StateLive, Generation: 2, CallsInFlight: 1, Readers: 1, IdleSeconds: 0.5},
			ReplayFloor: 3, HighWaterMark: 9, Owner: "boot-x",
			Streams: []admin.Stream{{Stream: 3, CallsInFlight: 1, Readers: 1}}},
		{Summary: admin.Summary{Session: "AAAB2222", State: admin.StateLive, Generation: 1}},
		{Summary: admin.Summary{Session: "BBBB3333", State: admin.StateHibernated, Generation: 4, IdleSeconds: 660}},
	}
	srv := httptest.NewServer(admin.Handler(admin.Options{
		Gatherer: reg,
		Ready: []func(context.Context) error{func(context.Context) error {
			if err := storeErr.Load(); err != nil {
				return &admin.NotReadyError{Reason: replay.ReasonUnavailable, Err: *err}
			}
			return nil
		}},
		Sessions: in,
	}))
	defer srv.Close()

	if code, body := get(t, srv.URL+"/metrics"); code != 200 || !strings.Contains(body, `tidemark_refusals_total{reason="generation_mismatch",status="409"} 1`) {
		t.Errorf("/metrics: %d %s", code, body)
	}
	if code, body := get(t, srv.URL+"/healthz"); code != 200 || !strings.Contains(body, `"status": "ok"`) {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get(t, srv.URL+"/readyz"); code != 200 || !strings.Contains(body, `"ready": true`) {
		t.Errorf("/readyz ready: %d %s", code, body)
	}
	down := errors.New("dial tcp 127.0.0.1:6379: connection refused")
	storeErr.Store(&down)
	code, body := get(t, srv.URL+"/readyz")
	var nr struct {
		Ready  bool
		Reason string
		Error  string
	}
	json.Unmarshal([]byte(body), &nr)
	if code != 503 || nr.Ready || nr.Reason != "unavailable" || nr.Error != "unavailable: dial tcp 127.0.0.1:6379: connection refused" {
		t.Errorf("/readyz with the store down: %d %s; want 503 reason unavailable with the error", code, body)
	}

	code, body = get(t, srv.URL+"/debug/sessions?n=2")
	var l admin.List
	if err := json.Unmarshal([]byte(body), &l); err != nil || code != 200 || l.Count != 3 || len(l.Sessions) != 2 || l.Sessions[0].Session != "AAAA1111" || l.Sessions[1].Session != "AAAB2222" {
		t.Errorf("/debug/sessions?n=2: %d %s; want count 3 and the 2 most recent", code, body)
	}
	code, body = get(t, srv.URL+"/debug/sessions?n=3")
	if want := `{
  "count": 3,
  "hibernated": 1,
  "sessions": [
    {
      "session": "AAAA1111",
      "state": "live",
      "generation": 2,
      "calls_in_flight": 1,
      "readers": 1,
      "idle_seconds": 0.5
    },
    {
      "session": "AAAB2222",
      "state": "live",
      "generation": 1,
      "calls_in_flight": 0,
      "readers": 0,
      "idle_seconds": 0
    },
    {
      "session": "BBBB3333",
      "state": "hibernated",
      "generation": 4,
      "calls_in_flight": 0,
      "readers": 0,
      "idle_seconds": 660
    }
  ]
}
`; code != 200 || body != want {
		t.Errorf("/debug/sessions?n=3: %d\n%s\nwant 200\n%s", code, body, want)
	}
	if code, body := get(t, srv.URL+"/debug/sessions?n=-1"); code != 400 {
		t.Errorf("/debug/sessions?n=-1: %d %s, want 400", code, body)
	}
	code, body = get(t, srv.URL+"/debug/sessions/AAA")
	var d admin.Details
	if err := json.Unmarshal([]byte(body), &d); err != nil || code != 200 || len(d.Sessions) != 2 {
		t.Errorf("/debug/sessions/AAA: %d %s; want both AAA sessions", code, body)
	}
	code, body = get(t, srv.URL+"/debug/sessions/AAAA")
	d = admin.Details{}
	json.Unmarshal([]byte(body), &d)
	if code != 200 || len(d.Sessions) != 1 || d.Sessions[0].HighWaterMark != 9 || d.Sessions[0].Streams[0].Readers != 1 {
		t.Errorf("/debug/sessions/AAAA: %d %s", code, body)
	}
	if code, body := get(t, srv.URL+"/debug/sessions/ZZZ"); code != 404 || !strings.Contains(body, `starting with \"ZZZ\"`) {
		t.Errorf("/debug/sessions/ZZZ: %d %s, want 404 naming the prefix", code, body)
	}
	if code, _ := get(t, srv.URL+"/mcp"); code != 404 {
		t.Errorf("/mcp on the operator's listener: %d, want 404", code)
	}
}

// TestMetricsNegotiatesOpenMetrics: /metrics answers the OpenMetrics
// format to a scraper whose Accept asks for it first (as Prometheus does),
// ending with "# EOF", and the text format 0.0.4 to any other Accept.
func TestMetricsNegotiatesOpenMetrics(t *testing.T) {
	reg := prom.NewRegistry()
	rec, _ := prom.New(reg)
	rec.Refused(replay.ReasonGenerationMismatch)
	srv := httptest.NewServer(admin.Handler(admin.Options{Gatherer: reg}))
	defer srv.Close()
	for _, tc := range []struct {
		accept, contentType, sample, end string
	}{
		{"application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
			"application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores",
			`tidemark_refusals_total{reason="generation_mismatch",status="409"} 1.0`, "# EOF\n"},
		{"text/plain",
			"text/plain; version=0.0.4; charset=utf-8; escaping=underscores",
			`tidemark_refusals_total{reason="generation_mismatch",status="409"} 1`, ""},
		{"", "text/plain; version=0.0.4; charset=utf-8; escaping=underscores",
			`tidemark_refusals_total{reason="generation_mismatch",status="409"} 1`, ""},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || got != tc.contentType {
			t.Errorf("Accept %q: %d Content-Type %q, want 200 %q", tc.accept, resp.StatusCode, got, tc.contentType)
		}
		if !strings.Contains(string(body), "\n"+tc.sample+"\n") || !strings.HasSuffix(string(body), tc.end) ||
			(tc.end == "" && strings.Contains(string(body), "# EOF")) {
			t.Errorf("Accept %q: the body lacks %q or does not end as it should (%q)", tc.accept, tc.sample, tc.end)
		}
	}
}

// TestEndpointsAllowGETOnly: another method than GET or HEAD on an
// endpoint answers 405 with Allow: GET, HEAD and a JSON body naming the
// method and the path; an unknown path still answers 404.
func TestEndpointsAllowGETOnly(t *testing.T) {
	reg := prom.NewRegistry()
	srv := httptest.NewServer(admin.Handler(admin.Options{Gatherer: reg, Sessions: sessions{}}))
	defer srv.Close()
	for _, tc := range []struct {
		method, path string
		status       int
		allow, body  string
	}{
		{http.MethodPost, "/healthz", 405, "GET, HEAD", `{"error":"method POST is not allowed on /healthz: use GET"}`},
		{http.MethodDelete, "/readyz", 405, "GET, HEAD", `{"error":"method DELETE is not allowed on /readyz: use GET"}`},
		{http.MethodPut, "/metrics", 405, "GET, HEAD", `{"error":"method PUT is not allowed on /metrics: use GET"}`},
		{http.MethodPost, "/debug/sessions", 405, "GET, HEAD", `{"error":"method POST is not allowed on /debug/sessions: use GET"}`},
		{http.MethodPost, "/debug/sessions/ABC", 405, "GET, HEAD", `{"error":"method POST is not allowed on /debug/sessions/ABC: use GET"}`},
		{http.MethodHead, "/healthz", 200, "", ``},
		{http.MethodPost, "/other", 404, "", `{"error":"no such endpoint: GET /metrics, /healthz, /readyz, /debug/sessions, /debug/sessions/{token prefix}, /debug/tasks or /debug/tasks/{task ID prefix}"}`},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var compact strings.Builder
		if len(body) > 0 {
			var v any
			json.Unmarshal(body, &v)
			b, _ := json.Marshal(v)
			compact.Write(b)
		}
		if resp.StatusCode != tc.status || resp.Header.Get("Allow") != tc.allow || compact.String() != tc.body {
			t.Errorf("%s %s: %d Allow %q %s; want %d Allow %q %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), compact.String(), tc.status, tc.allow, tc.body)
		}
	}
}

// TestHealthzNamesTheBuild: with Options.Build, /healthz answers the
// build beside its status; without, its status alone.
func TestHealthzNamesTheBuild(t *testing.T) {
	b := admin.Build{Version: "v1.2.3", Revision: "40aecafd7b910c398eb60a709f2e43068fb44d8b", Time: "2026-12-06T00:55:33Z", Modified: true, GoVersion: "go1.26.8"}
	for _, tc := range []struct {
		build *admin.Build
		want  string
	}{
		{&b, `{"build":{"version":"v1.2.3","revision":"40aecafd7b910c398eb60a709f2e43068fb44d8b","time":"2026-12-06T00:55:33Z","modified":true,"go_version":"go1.26.8"},"status":"ok"}`},
		{nil, `{"status":"ok"}`},
	} {
		srv := httptest.NewServer(admin.Handler(admin.Options{Build: tc.build}))
		code, body := get(t, srv.URL+"/healthz")
		srv.Close()
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(body)); err != nil || code != 200 || compact.String() != tc.want {
			t.Errorf("/healthz = %d %s, want 200 %s", code, body, tc.want)
		}
	}
}

// unreadable is an Inspector whose store cannot be read.
type unreadable struct{}

func (unreadable) Recent(context.Context, int) (admin.List, error) {
	return admin.List{}, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

func (unreadable) Lookup(context.Context, string) ([]admin.Detail, error) {
	return nil, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

// TestSessionsStoreDown: when the store cannot be read for a hibernated
// session's record, /debug/sessions answers 503 with reason unavailable
// and the error, as /debug/sessions/{prefix} does.
func TestSessionsStoreDown(t *testing.T) {
	srv := httptest.NewServer(admin.Handler(admin.Options{Sessions: unreadable{}}))
	defer srv.Close()
	want := "{\n  \"error\": \"dial tcp 127.0.0.1:6379: connection refused\",\n  \"reason\": \"unavailable\"\n}\n"
	for _, path := range []string{"/debug/sessions", "/debug/sessions/ABC"} {
		if code, body := get(t, srv.URL+path); code != http.StatusServiceUnavailable || body != want {
			t.Errorf("%s: %d\n%s\nwant 503\n%s", path, code, body, want)
		}
	}
}

// TestReadyzBound: /readyz answers within ReadyTimeout, under Kubernetes'
// default probe timeout of 1 s, with 503 unavailable when its checks have
// not finished by then: a check that stops at its context's end names its
// own error, one that ignores it gets the bound's (regression: a store
// that did not answer held /readyz for 2 s, and a check that ignored its
// context held it for good).
func TestReadyzBound(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	for _, tc := range []struct {
		name  string
		check func(context.Context) error
		err   string
	}{
		{"stops at its context's end", func(ctx context.Context) error {
			<-ctx.Done()
			return &admin.NotReadyError{Reason: replay.ReasonUnavailable, Err: errors.New("the store cannot be reached: i/o timeout")}
		}, "unavailable: the store cannot be reached: i/o timeout"},
		{"ignores its context", func(context.Context) error {
			<-release
			return nil
		}, "unavailable: the readiness checks did not finish within 800ms"},
	} {
		srv := httptest.NewServer(admin.Handler(admin.Options{Ready: []func(context.Context) error{tc.check}}))
		probe := &http.Client{Timeout: time.Second}
		resp, err := probe.Get(srv.URL + "/readyz")
		if err != nil {
			t.Errorf("%s: /readyz with a 1 s probe timeout: %v", tc.name, err)
			srv.Close()
			continue
		}
		var r struct {
			Ready         bool
			Reason, Error string
		}
		json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || r.Ready || r.Reason != "unavailable" || r.Error != tc.err {
			t.Errorf("%s: /readyz %d %+v; want 503 unavailable, error %q", tc.name, resp.StatusCode, r, tc.err)
		}
		srv.Close()
	}
}
