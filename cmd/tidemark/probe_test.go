package main

import (
	"bytes"
	"encoding/json"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	tmprobe "github.com/tidemark-mcp/tidemark/internal/probe"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// probeRetention is the --retention-events given to both `tidemark serve`
// and `tidemark probe` in these tests.
const probeRetention = "60"

// runProbe runs `tidemark probe args...` and returns its exit code and
// output.
func runProbe(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"probe"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// probeJSON runs the probe with --json and decodes the report.
func probeJSON(t *testing.T, args ...string) (int, tmprobe.Report) {
	t.Helper()
	code, out, errOut := runProbe(t, append([]string{"--json"}, args...)...)
	var rep tmprobe.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("probe output is not a JSON report (%v); stdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("exit %d\n%s", code, table.String())
	return code, rep
}

func resultsByID(rep tmprobe.Report) map[string]tmprobe.Verdict {
	m := map[string]tmprobe.Verdict{}
	for _, r := range rep.Results {
		m[r.ID] = r.Verdict
	}
	return m
}

func startTidemarkServe(t *testing.T, args ...string) string {
	t.Helper()
	p := testenv.StartProcess(t, testenv.BuildTidemark(t), append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	return testenv.ServeURL(t, p)
}

// TestProbeServe: `tidemark probe` against `tidemark serve`, both told the
// same per-session retention, reports every check PASS and exits 0; the
// table says so in its summary line.
func TestProbeServe(t *testing.T) {
	url := startTidemarkServe(t, "--retention-events", probeRetention)
	code, rep := probeJSON(t, "--retention-events", probeRetention, url)
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	var ids []string
	for _, r := range rep.Results {
		ids = append(ids, r.ID)
		if r.Verdict != tmprobe.Pass {
			t.Errorf("%s = %s %v: %s", r.ID, r.Verdict, r.Statuses, r.Observed)
		}
	}
	if !slices.Equal(ids, tmprobe.CheckIDs()) {
		t.Errorf("checks = %v, want %v", ids, tmprobe.CheckIDs())
	}
	if rep.Server != "tidemark-demo 1.0.0" || rep.ProtocolVersion != "2025-11-25" {
		t.Errorf("server %q protocol %q, want tidemark-demo 1.0.0 and 2025-11-25", rep.Server, rep.ProtocolVersion)
	}

	code, out, _ := runProbe(t, "--retention-events", probeRetention, "--storm", "4", url)
	want := "12 checks: 12 PASS, 0 FAIL, 0 N/A\n"
	if code != 0 || !strings.HasSuffix(out, want) {
		t.Errorf("table run: exit %d, output ends %q; want exit 0 and %q", code, lastLine(out), want)
	}
	for _, id := range tmprobe.CheckIDs() {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + ` +PASS +\S+ +\S`).MatchString(out) {
			t.Errorf("table has no PASS row for %s:\n%s", id, out)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestProbeServeDefaultFlags: with the default flags (no
// --retention-events) only the compacted-cursor check is N/A, and the probe
// exits 0.
func TestProbeServeDefaultFlags(t *testing.T) {
	url := startTidemarkServe(t)
	code, rep := probeJSON(t, url)
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	for id, v := range resultsByID(rep) {
		want := tmprobe.Pass
		if id == "compacted-cursor" {
			want = tmprobe.NA
		}
		if v != want {
			t.Errorf("%s = %s, want %s", id, v, want)
		}
	}
}

// TestProbeGoSDKMemoryEventStore: the probe against a go-sdk v1.8.0
// server with its own StreamableHTTPHandler and mcp.NewMemoryEventStore
// (interop/go-sdk-memstore) exits 1 and reports exactly these FAILs:
// cursor-ahead (a cursor beyond the newest event answers an empty 200: the
// store clamps) and takeover (a resume while the stream's old connection is
// open answers 409 "stream ID conflicts with ongoing stream"). Without
// --retention-events, compacted-cursor is N/A; every other check passes.
func TestProbeGoSDKMemoryEventStore(t *testing.T) {
	p := testenv.StartProcess(t, testenv.Build(t, "./interop/go-sdk-memstore"), "--addr", "127.0.0.1:0")
	url := testenv.ServeURL(t, p)
	code, rep := probeJSON(t, url)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	got := resultsByID(rep)
	for _, id := range tmprobe.CheckIDs() {
		want := tmprobe.Pass
		switch id {
		case "cursor-ahead", "takeover":
			want = tmprobe.Fail
		case "compacted-cursor":
			want = tmprobe.NA
		}
		if got[id] != want {
			t.Errorf("%s = %s, want %s", id, got[id], want)
		}
	}
	for _, r := range rep.Results {
		if r.ID == "cursor-ahead" && !slices.Equal(r.Statuses, []int{200}) {
			t.Errorf("cursor-ahead statuses = %v, want [200]", r.Statuses)
		}
		if r.ID == "takeover" && !slices.Equal(r.Statuses, []int{200, 409}) {
			t.Errorf("takeover statuses = %v, want [200 409]", r.Statuses)
		}
	}
}

// TestProbeUsage: usage errors exit 2; a server that cannot be reached
// exits 1 with the reason.
func TestProbeUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "want one URL argument, got 0"},
		{[]string{"http://127.0.0.1:1/mcp", "--args", `{"n":20}`}, 2, "want one URL argument, got 3: flags go before the URL (tidemark probe [flags] URL)"},
		{[]string{"--args", "{", "http://127.0.0.1:1/mcp"}, 2, `--args "{": want a JSON object`},
		{[]string{"--storm", "-1", "http://127.0.0.1:1/mcp"}, 2, "must be 0 or more"},
		{[]string{"--args", "[1]", closedURL(t)}, 2, `--args "[1]": want a JSON object`},
		{[]string{"--args", "null", closedURL(t)}, 2, `--args "null": want a JSON object`},
		{[]string{"ftp://x/mcp"}, 2, `URL "ftp://x/mcp": want an http:// or https:// URL of an MCP endpoint, e.g. http://127.0.0.1:8080/mcp`},
		{[]string{"127.0.0.1:8080/mcp"}, 2, `URL "127.0.0.1:8080/mcp": want an http:// or https:// URL`},
		{[]string{"http:///mcp"}, 2, `URL "http:///mcp": want an http:// or https:// URL`},
		{[]string{closedURL(t)}, 1, "the baseline call failed"},
	} {
		code, _, errOut := runProbe(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("probe %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
}

// closedURL returns a loopback URL where nothing listens.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/mcp"
}

// TestProbeJSONUnreachable: with --json, a probe that cannot start (nothing
// listens at the URL) still prints a JSON report on stdout, with no checks
// and the reason in "error", and exits 1 (regression: stdout was empty, so
// a script parsing it failed on an empty document).
func TestProbeJSONUnreachable(t *testing.T) {
	u := closedURL(t)
	code, out, errOut := runProbe(t, "--json", u)
	var rep struct {
		URL    string            `json:"url"`
		Checks []json.RawMessage `json:"checks"`
		Pass   int               `json:"pass"`
		Fail   int               `json:"fail"`
		Error  string            `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v; stdout %q, stderr %q", err, out, errOut)
	}
	if code != 1 || rep.URL != u || rep.Checks == nil || len(rep.Checks) != 0 || rep.Pass != 0 || rep.Fail != 0 ||
		!strings.HasPrefix(rep.Error, "probe: the baseline call failed, so nothing can be checked: ") {
		t.Errorf("exit %d, report %+v; want exit 1, url %q, checks [], error naming the baseline call", code, rep, u)
	}
}
