package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// TestInspectAddressForms: `tidemark inspect --metrics-addr` takes the
// operator's listener as host:port or as an http:// URL (with or without
// a trailing slash), and answers the same for each; an address that is
// neither is a one-line usage error (exit 2).
func TestInspectAddressForms(t *testing.T) {
	_, _, metricsAddr := startObserved(t, nil)
	want := "0 sessions live in this process\n"
	for _, addr := range []string{metricsAddr, "http://" + metricsAddr, "http://" + metricsAddr + "/"} {
		var stdout, stderr strings.Builder
		if code := run([]string{"inspect", "--metrics-addr", addr}, &stdout, &stderr); code != 0 || stdout.String() != want {
			t.Errorf("inspect --metrics-addr %s: exit %d, stdout %q, stderr %q; want 0 and %q", addr, code, stdout.String(), stderr.String(), want)
		}
	}
	for addr, wantErr := range map[string]string{
		"9464":                 `tidemark inspect: --metrics-addr "9464": want host:port or an http:// URL, e.g. 127.0.0.1:9464 or http://127.0.0.1:9464`,
		"ftp://127.0.0.1:9464": `tidemark inspect: --metrics-addr "ftp://127.0.0.1:9464": want host:port or an http:// URL, e.g. 127.0.0.1:9464 or http://127.0.0.1:9464`,
		"http://":              `tidemark inspect: --metrics-addr "http://": want host:port or an http:// URL, e.g. 127.0.0.1:9464 or http://127.0.0.1:9464`,
		"http://h:1/?n=3":      `tidemark inspect: --metrics-addr "http://h:1/?n=3": want host:port or an http:// URL, e.g. 127.0.0.1:9464 or http://127.0.0.1:9464`,
	} {
		var stdout, stderr strings.Builder
		if code := run([]string{"inspect", "--metrics-addr", addr}, &stdout, &stderr); code != 2 || stderr.String() != wantErr+"\n" {
			t.Errorf("inspect --metrics-addr %s: exit %d, stderr %q; want 2 and %q", addr, code, stderr.String(), wantErr)
		}
	}
}

// TestInspectTimeoutMustBePositive: --timeout 0 or below is a one-line
// usage error (exit 2), with and without --fleet, as for tidemark ready
// (regression: 0 meant no bound on the listener's request, and an
// already expired context for --fleet).
func TestInspectTimeoutMustBePositive(t *testing.T) {
	for _, args := range [][]string{
		{"inspect", "--metrics-addr", "127.0.0.1:9", "--timeout", "0s"},
		{"inspect", "--fleet", "--redis", "127.0.0.1:9", "--timeout", "0s"},
		{"inspect", "--metrics-addr", "127.0.0.1:9", "--timeout", "-1s"},
	} {
		want := "tidemark inspect: --timeout " + args[len(args)-1] + ": want a positive duration\n"
		var stdout, stderr strings.Builder
		if code := run(args, &stdout, &stderr); code != 2 || stderr.String() != want || stdout.String() != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2 and %q", strings.Join(args, " "), code, stdout.String(), stderr.String(), want)
		}
	}
}

// TestInspectPointedAtMCP: `tidemark inspect` pointed at the MCP listener
// instead of the operator's says, in one line, that it reached an MCP
// listener and which flag to point where; with --path / (the MCP endpoint
// answers every path) too.
func TestInspectPointedAtMCP(t *testing.T) {
	for _, path := range []string{"/mcp", "/"} {
		_, endpoint, _ := startObserved(t, nil, "--path", path)
		u, err := url.Parse(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		code := run([]string{"inspect", "--metrics-addr", u.Host}, &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		wantEnd := ": that is an MCP listener (tidemark serve --addr), not the operator's listener: point --metrics-addr at the address tidemark serve --metrics-addr listens on (its log line \"operator's listener started\" names it)"
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "tidemark inspect: http://"+u.Host+"/debug/sessions?n=20 answered ") || !strings.HasSuffix(lines[0], wantEnd) {
			t.Errorf("--path %s: inspect of the MCP listener: exit %d, stderr %q; want 1 and one line ending %q", path, code, stderr.String(), wantEnd)
		}
	}
}

// TestInspectCountsInTheSingular: one session is "1 session", live or
// hibernated.
func TestInspectCountsInTheSingular(t *testing.T) {
	for _, c := range []struct {
		list admin.List
		want string
	}{
		{admin.List{Count: 1}, "1 session live in this process\n"},
		{admin.List{Count: 1, Hibernated: 1}, "1 session in this process, hibernated\n"},
		{admin.List{Count: 0}, "0 sessions live in this process\n"},
		{admin.List{Count: 2, Hibernated: 2}, "2 sessions in this process, 2 of them hibernated\n"},
	} {
		var b strings.Builder
		printList(&b, c.list)
		if b.String() != c.want {
			t.Errorf("printList(%+v) printed %q, want %q", c.list, b.String(), c.want)
		}
	}
}

// TestInspectPrintsHibernated: `tidemark inspect` counts hibernated
// sessions apart, names each session's state, and says a hibernated
// session has no owner.
func TestInspectPrintsHibernated(t *testing.T) {
	var b strings.Builder
	printList(&b, admin.List{Count: 2, Hibernated: 1, Sessions: []admin.Summary{
		{Session: "VDQ3MN2Z", State: admin.StateLive, Generation: 1, CallsInFlight: 1, Readers: 1, IdleSeconds: 0.012},
		{Session: "K7TX2B4Q", State: admin.StateHibernated, Generation: 3, IdleSeconds: 734.5},
	}})
	want := "2 sessions in this process, 1 of them hibernated; the 2 most recently used:\n" +
		"SESSION   STATE       GENERATION  CALLS  READERS  IDLE\n" +
		"VDQ3MN2Z  live        1           1      1        12ms\n" +
		"K7TX2B4Q  hibernated  3           0      0        12m14.5s\n"
	if b.String() != want {
		t.Errorf("printList printed\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	created := time.Date(2026, 11, 20, 10, 2, 11, 0, time.UTC)
	printDetails(&b, admin.Details{Sessions: []admin.Detail{{
		Summary:         admin.Summary{Session: "K7TX2B4Q", State: admin.StateHibernated, Generation: 3, IdleSeconds: 734.5},
		ProtocolVersion: "2025-11-25", ReplayFloor: 1, HighWaterMark: 4, Events: 4, Bytes: 572,
		Created: created, Streams: []admin.Stream{},
	}}}, created)
	want = "session           K7TX2B4Q\n" +
		"state             hibernated\n" +
		"generation        3\n" +
		"protocol version  2025-11-25\n" +
		"replay floor      1\n" +
		"high-water mark   4\n" +
		"retained          4 events, 572 bytes\n" +
		"owner             none: hibernated, the next request wakes it\n" +
		"created           2026-11-20T10:02:11Z\n" +
		"idle              12m14.5s\n" +
		"calls in flight   0\n" +
		"readers           0\n" +
		"streams: none open\n"
	if b.String() != want {
		t.Errorf("printDetails printed\n%s\nwant\n%s", b.String(), want)
	}
}

// TestInspectorShowsHibernatedSession: a real tidemark serve with
// --hibernate-after 1s hibernates an idle session, which /debug/sessions
// then lists as hibernated (counted in count and hibernated) and
// /debug/sessions/{prefix} finds with no owner; looking at it wakes
// nothing: the process logs no wake, and the next call wakes it.
func TestInspectorShowsHibernatedSession(t *testing.T) {
	p, endpoint, metricsAddr := startObserved(t, nil, "--hibernate-after", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := (&mcptest.Client{URL: endpoint}).Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	p.WaitFor(t, `msg="session hibernated"`, 20*time.Second)
	prefix := sess.Token[:8]

	for range 2 {
		code, body := get(t, "http://"+metricsAddr+"/debug/sessions")
		var list admin.List
		if err := json.Unmarshal([]byte(body), &list); err != nil || code != http.StatusOK || len(list.Sessions) != 1 {
			t.Fatalf("/debug/sessions: %d %s", code, body)
		}
		s := list.Sessions[0]
		want := admin.List{Count: 1, Hibernated: 1, Sessions: []admin.Summary{{Session: prefix, State: admin.StateHibernated, Generation: 1, IdleSeconds: s.IdleSeconds}}}
		if !reflect.DeepEqual(list, want) || s.IdleSeconds < 1 {
			t.Errorf("/debug/sessions = %+v, want %+v with at least 1 s idle", list, want)
		}
		code, body = get(t, "http://"+metricsAddr+"/debug/sessions/"+prefix)
		var details admin.Details
		if err := json.Unmarshal([]byte(body), &details); err != nil || code != http.StatusOK || len(details.Sessions) != 1 {
			t.Fatalf("/debug/sessions/%s: %d %s", prefix, code, body)
		}
		d := details.Sessions[0]
		wantDetail := admin.Detail{
			Summary:         want.Sessions[0],
			ProtocolVersion: "2025-11-25",
			// initialize's priming event and response.
			ReplayFloor: 1, HighWaterMark: 2, Events: 2, Bytes: d.Bytes,
			Owner: "", Created: d.Created, Streams: []admin.Stream{},
		}
		wantDetail.IdleSeconds = d.IdleSeconds
		if !reflect.DeepEqual(d, wantDetail) || d.Bytes <= 0 || time.Since(d.Created) > time.Minute {
			t.Errorf("/debug/sessions/%s = %+v, want %+v (bytes > 0, created in the last minute)", prefix, d, wantDetail)
		}
	}
	if strings.Contains(p.Output(), `msg="session woke"`) || strings.Contains(p.Output(), `msg="session re-created"`) {
		t.Errorf("inspecting woke the session:\n%s", p.Output())
	}
	call, err := sess.Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "hi"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	call.Collect()
	call.Close()
	if code, body := get(t, "http://"+metricsAddr+"/debug/sessions"); code != http.StatusOK || !strings.Contains(body, `"hibernated": 0`) || !strings.Contains(body, `"state": "live"`) {
		t.Errorf("/debug/sessions after the call: %d %s, want the session live", code, body)
	}
}
