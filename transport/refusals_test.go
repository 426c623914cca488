// refusals_test.go drives the refusal table, testdata/refusals, through
// real Handlers over loopback HTTP, and checks README's refusal tables
// against the catalogue of reasons (replay/reason.go).

package transport_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/internal/via"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestRefusalTable runs testdata/refusals: each case is one request to a
// real Handler and the status, reason and JSON-RPC code it is refused
// with. Every refusal must also have a JSON-RPC error body, name no part
// of any session token, leave the session it names as it was, and be
// counted once by its reason (Options.Metrics). The file must produce
// every refusal reason of the catalogue.
func TestRefusalTable(t *testing.T) {
	ctx := testContext(t)
	fx := newRefusalFixture(t, ctx)
	seen := map[replay.Reason]bool{}
	datadriven.RunTest(t, "testdata/refusals", func(t *testing.T, d *datadriven.TestData) string {
		out, reason := fx.run(t, ctx, d)
		seen[reason] = true
		return out
	})
	for _, r := range replay.Refusals() {
		if !seen[r] {
			t.Errorf("testdata/refusals has no case refused with %s (%d)", r, r.Status())
		}
	}
}

// refusalFixture is the world testdata/refusals runs in: servers, the
// sessions on them, and the values its requests cite.
type refusalFixture struct {
	servers  map[string]*refusalServer
	sessions map[string]*refusalSession
	values   map[string]string // {name} in a request → value
}

// refusalServer is one Handler on loopback HTTP.
type refusalServer struct {
	st     *stack
	client *mcptest.Client
}

// refusalSession is a session a case can name.
type refusalSession struct {
	server string
	s      *mcptest.Session
	user   string // the user who created it, "" if none
}

// The servers testdata/refusals runs against.
const (
	mainServer     = "main"     // body limit 8 KiB, body timeout 300 ms, 2 calls per session, 20 events retained; other paths answer PathNotFound
	authServer     = "auth"     // a resource server (Options.Auth; users alice and bob, tokens expired and down); countdown needs scope tools:slow
	gosdkServer    = "gosdk"    // behind the go-sdk's bearer-token middleware (users alice and bob)
	drainingServer = "draining" // draining: takes no new call
	fullServer     = "full"     // one session at most, which has a call in flight; 1,500 request bytes in flight at most (transport.InflightBytes)
	fleetServer    = "fleet"    // replica b of a fleet whose replica a owns session "remote" and cannot be reached
	gatewayServer  = "gateway"  // the upstream gateway engine in front of an address nothing listens on
)

func newRefusalFixture(t *testing.T, ctx context.Context) *refusalFixture {
	fx := &refusalFixture{servers: map[string]*refusalServer{}, sessions: map[string]*refusalSession{}, values: map[string]string{}}
	fx.values["via"] = via.Pseudonym()
	fx.startMain(t, ctx)
	fx.startAuth(t, ctx)
	fx.startGoSDKAuth(t, ctx)
	fx.startDraining(t, ctx)
	fx.startFull(t, ctx)
	fx.startFleet(t, ctx)
	fx.startGateway(t)
	return fx
}

// addSession initializes a session named name on server at version.
func (fx *refusalFixture) addSession(t *testing.T, ctx context.Context, server, name, version string) *mcptest.Session {
	t.Helper()
	srv := fx.servers[server]
	s, err := srv.client.Initialize(ctx, version)
	if err != nil {
		t.Fatalf("session %s on %s: %v", name, server, err)
	}
	fx.sessions[name] = &refusalSession{server: server, s: s}
	fx.values["token:"+name] = s.Token
	return s
}

func (fx *refusalFixture) startMain(t *testing.T, ctx context.Context) {
	server := demo.NewServer()
	g := addGated(server)
	mux := func(h http.Handler) http.Handler {
		m := http.NewServeMux()
		m.Handle("/mcp", h)
		m.Handle("/", h.(*tidemark.Handler).PathNotFound("/mcp"))
		return m
	}
	st := newStack(t, server, &tidemark.Options{
		Transport: transport.Options{MaxBodyBytes: 8 << 10, BodyTimeout: 300 * time.Millisecond},
		Sessions:  session.Options{MaxCallsPerSession: 2},
		Retention: eventlog.Options{MaxEvents: 20},
	}, mux)
	fx.servers[mainServer] = &refusalServer{st: st, client: &mcptest.Client{URL: st.srv.URL + "/mcp", HTTP: st.srv.Client()}}

	live := fx.addSession(t, ctx, mainServer, "live", "")
	evs := countdown(t, ctx, live, 2, 2, "p")
	fx.values["cursor:live"] = evs[1].ID
	last := parseCursor(t, evs[len(evs)-1].ID)
	other := last
	other.Stream = replay.StandaloneStream // the event at that sequence is on the POST stream
	fx.values["other-stream:live"] = other.String()
	// A cursor above the high-water mark ends its generation (the next
	// request claims generation+1), so it has a session of its own.
	ahead := parseCursor(t, countdown(t, ctx, fx.addSession(t, ctx, mainServer, "ahead", ""), 2, 2, "p")[0].ID)
	ahead.Sequence += 1000
	fx.values["ahead:ahead"] = ahead.String()

	old := fx.addSession(t, ctx, mainServer, "old", "2025-03-26")
	fx.values["cursor:old"] = countdown2025(t, ctx, old)

	dup := fx.addSession(t, ctx, mainServer, "dup", "")
	startGated(t, ctx, dup, 10, "dup", 1)
	busy := fx.addSession(t, ctx, mainServer, "busy", "")
	startGated(t, ctx, busy, 10, "busy", 1)
	startGated(t, ctx, busy, 11, "busy", 1)
	t.Cleanup(func() { g.release("dup", 1); g.release("busy", 2) })

	gone := fx.addSession(t, ctx, mainServer, "gone", "")
	fx.values["cursor:gone"] = countdown(t, ctx, gone, 2, 1, "g")[1].ID
	if err := gone.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	superseded := fx.addSession(t, ctx, mainServer, "superseded", "")
	fx.values["cursor:superseded"] = countdown(t, ctx, superseded, 2, 1, "s")[1].ID
	fx.values["token:replacement"] = supersede(t, ctx, superseded)

	recreated := fx.addSession(t, ctx, mainServer, "recreated", "")
	fx.values["gen1:recreated"] = countdown(t, ctx, recreated, 2, 1, "r")[1].ID
	if _, err := st.h.Registry().Recreate(ctx, recreated.Token); err != nil {
		t.Fatal(err)
	}
	compacted := fx.addSession(t, ctx, mainServer, "compacted", "")
	fx.values["first:compacted"] = countdown(t, ctx, compacted, 2, 1, "c")[1].ID
	for id := range int64(10) { // 30 more events, over the 20 retained
		countdown(t, ctx, compacted, 3+id, 1, "c")
	}
}

// countdown2025 runs a countdown of one step on a 2025-03-26 session (no
// priming events) and returns the id of its progress event.
func countdown2025(t *testing.T, ctx context.Context, s *mcptest.Session) string {
	t.Helper()
	str, err := s.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 1}, "o"))
	if err != nil {
		t.Fatal(err)
	}
	defer str.Close()
	evs, err := str.Collect()
	if err != nil || len(evs) != 2 {
		t.Fatalf("countdown on a 2025-03-26 session: %v, %v; want progress and response", evs, err)
	}
	return evs[0].ID
}

// resourceMetadata is the protected resource metadata URL the auth
// server's challenges name.
const resourceMetadata = "http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp"

func (fx *refusalFixture) startAuth(t *testing.T, ctx context.Context) {
	st := newStack(t, nil, &tidemark.Options{Transport: transport.Options{Auth: &transport.Auth{
		Verify: verifier, ResourceMetadata: resourceMetadata, ToolScopes: map[string]string{"countdown": "tools:slow"},
	}}}, nil)
	fx.addAuthServer(t, ctx, authServer, st, "alice")
}

func (fx *refusalFixture) startGoSDKAuth(t *testing.T, ctx context.Context) {
	st := newStack(t, nil, nil, auth.RequireBearerToken(verifier, nil))
	fx.addAuthServer(t, ctx, gosdkServer, st, "alice:gosdk")
}

// addAuthServer adds st as server, with a session of alice's named name.
func (fx *refusalFixture) addAuthServer(t *testing.T, ctx context.Context, server string, st *stack, name string) {
	client := &mcptest.Client{URL: st.srv.URL, HTTP: st.srv.Client()}
	fx.servers[server] = &refusalServer{st: st, client: client}
	alice := &mcptest.Client{URL: st.srv.URL, HTTP: st.srv.Client(), Header: http.Header{"Authorization": {"Bearer alice"}}}
	s, err := alice.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	fx.sessions[name] = &refusalSession{server: server, s: s, user: "alice"}
	fx.values["token:"+name] = s.Token
}

func (fx *refusalFixture) startDraining(t *testing.T, ctx context.Context) {
	st := newStack(t, nil, nil, nil)
	fx.servers[drainingServer] = &refusalServer{st: st, client: st.client}
	fx.addSession(t, ctx, drainingServer, "draining", "")
	if err := st.h.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}

func (fx *refusalFixture) startFull(t *testing.T, ctx context.Context) {
	server := demo.NewServer()
	g := addGated(server)
	st := newStack(t, server, &tidemark.Options{
		Sessions:  session.Options{MaxSessions: 1},
		Transport: transport.Options{MaxInflightBytes: 1500},
	}, nil)
	fx.servers[fullServer] = &refusalServer{st: st, client: st.client}
	holder := fx.addSession(t, ctx, fullServer, "holder", "")
	startGated(t, ctx, holder, 10, "holder", 1)
	t.Cleanup(func() { g.release("holder", 1) })
}

func (fx *refusalFixture) startFleet(t *testing.T, ctx context.Context) {
	p := newPair(t, 500*time.Millisecond, 0)
	s, err := p.a.client.Initialize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	p.dir.set("a", deadURL(t)) // a renews its lease but cannot be reached
	fx.servers[fleetServer] = &refusalServer{st: p.b, client: p.b.client}
	fx.sessions["remote"] = &refusalSession{server: fleetServer, s: p.b.client.SessionFor(s.Token, s.ProtocolVersion)}
	fx.values["token:remote"] = s.Token
}

func (fx *refusalFixture) startGateway(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	eng, err := upstream.New(upstream.Options{URL: deadURL(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h := tidemark.NewEngineHandler(eng, &tidemark.Options{
		Transport: transport.Options{Logger: quiet}, Sessions: session.Options{Logger: quiet},
		Metrics: refusals,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		eng.Close()
		h.Close()
	})
	fx.servers[gatewayServer] = &refusalServer{client: &mcptest.Client{URL: srv.URL, HTTP: srv.Client()}}
}

// defaultBody is the body of a POST case that gives none: one tools/call.
const defaultBody = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`

// run sends the request of case d and returns its outcome line and reason.
//
// The command is the method (post, get, delete, put) with arguments:
// server=NAME (default main), session=NAME (its Mcp-Session-Id and
// MCP-Protocol-Version; absent: none), user=NAME (Authorization: Bearer
// NAME), path=PATH (instead of the endpoint), stall (the body stops half
// way and never ends). The input is header lines, "Name: value" to set,
// "+Name: value" to add another value, "-Name" to delete ("Host" sets the
// request's host), then the body, from the first line that starts with {
// or [. {name} anywhere is replaced as expand says.
func (fx *refusalFixture) run(t *testing.T, ctx context.Context, d *datadriven.TestData) (string, replay.Reason) {
	t.Helper()
	server, sess, user, path, stall := mainServer, "", "", "", false
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "server":
			server = a.Vals[0]
		case "session":
			sess = a.Vals[0]
		case "user":
			user = a.Vals[0]
		case "path":
			path = a.Vals[0]
		case "stall":
			stall = true
		default:
			t.Fatalf("%s: unknown argument %q", d.Pos, a.Key)
		}
	}
	srv := fx.servers[server]
	if srv == nil {
		t.Fatalf("%s: unknown server %q", d.Pos, server)
	}
	headers, body := splitInput(fx.expand(t, d.Input))
	if body == "" && strings.ToUpper(d.Cmd) == http.MethodPost {
		body = defaultBody
	}
	req := fx.request(t, ctx, d, srv, sess, user, path, body, stall)
	for line := range strings.SplitSeq(headers, "\n") {
		applyHeader(t, req, line)
	}

	var before map[string]string
	if rs := fx.sessions[sess]; rs != nil {
		before = fx.logBounds(ctx, rs)
	}
	counted := refusals.snapshot()
	resp, err := srv.client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", d.Pos, err)
	}
	se := mcptest.ReadStatusError(resp)
	fx.checkRefusal(t, d, se)
	checkCounted(t, d, counted, se.Reason())
	if rs := fx.sessions[sess]; rs != nil {
		if after := fx.logBounds(ctx, rs); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("%s: the refusal changed session %s's log: %v → %v", d.Pos, sess, before, after)
		}
	}
	return outcome(se), replay.Reason(se.Reason())
}

// request builds the request of a case with the headers of a conforming
// client of session sess.
func (fx *refusalFixture) request(t *testing.T, ctx context.Context, d *datadriven.TestData, srv *refusalServer, sess, user, path, body string, stall bool) *http.Request {
	t.Helper()
	method := strings.ToUpper(d.Cmd)
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
		if stall {
			pr, pw := io.Pipe()
			go func() {
				pw.Write([]byte(body[:len(body)/2]))
				<-ctx.Done()
				pw.CloseWithError(ctx.Err())
			}()
			rd = pr
		}
	}
	req, err := srv.client.NewRequest(ctx, method, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Body = io.NopCloser(rd)
		req.ContentLength = int64(len(body))
	}
	if sess != "" {
		rs := fx.sessions[sess]
		if rs == nil {
			t.Fatalf("%s: unknown session %q", d.Pos, sess)
		}
		sreq, _ := rs.s.NewRequest(ctx, method, nil)
		for _, k := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version"} {
			if v := sreq.Header.Get(k); v != "" {
				req.Header.Set(k, v)
			}
		}
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+user)
	}
	if path != "" {
		req.URL.Path = path
	}
	return req
}

// splitInput splits a case's input into its header lines and its body,
// which starts at the first line that starts with { or [.
func splitInput(in string) (headers, body string) {
	lines := strings.Split(in, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "{") || strings.HasPrefix(l, "[") {
			return strings.Join(lines[:i], "\n"), strings.Join(lines[i:], "\n")
		}
	}
	return in, ""
}

// applyHeader applies one header line of a case to req.
func applyHeader(t *testing.T, req *http.Request, line string) {
	t.Helper()
	if line = strings.TrimSpace(line); line == "" {
		return
	}
	if name, ok := strings.CutPrefix(line, "-"); ok {
		req.Header.Del(name)
		return
	}
	name, value, ok := strings.Cut(line, ":")
	if !ok {
		t.Fatalf("header line %q: want Name: value, +Name: value or -Name", line)
	}
	value = strings.TrimSpace(value)
	switch {
	case strings.HasPrefix(name, "+"):
		req.Header.Add(strings.TrimPrefix(name, "+"), value)
	case strings.EqualFold(name, "Host"):
		req.Host = value
	default:
		req.Header.Set(name, value)
	}
}

var placeholder = regexp.MustCompile(`\{([a-z0-9:*-]+)\}`)

// expand replaces {name} by the fixture's values, {x*N} by N x's and
// {deep*N} by N nested arrays.
func (fx *refusalFixture) expand(t *testing.T, s string) string {
	return placeholder.ReplaceAllStringFunc(s, func(m string) string {
		name := m[1 : len(m)-1]
		if kind, n, ok := strings.Cut(name, "*"); ok {
			k, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("%s: %v", m, err)
			}
			switch kind {
			case "x":
				return strings.Repeat("x", k)
			case "deep":
				return strings.Repeat("[", k) + strings.Repeat("]", k)
			}
		}
		v, ok := fx.values[name]
		if !ok {
			t.Fatalf("no value named %s", m)
		}
		return v
	})
}

// logBounds returns the log bounds of a session by its server's registry,
// or the error that says it has none.
func (fx *refusalFixture) logBounds(ctx context.Context, rs *refusalSession) map[string]string {
	b, err := fx.servers[rs.server].st.h.Registry().Log().Bounds(ctx, rs.s.Token)
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	return map[string]string{"bounds": fmt.Sprintf("%+v", b)}
}

// checkRefusal checks what every refusal shares: a JSON-RPC error body with
// a reason, and no part of any session token the fixture knows.
func (fx *refusalFixture) checkRefusal(t *testing.T, d *datadriven.TestData, se *mcptest.StatusError) {
	t.Helper()
	if se.Reason() == "" || se.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: HTTP %d %s: want a JSON-RPC error body with error.data.reason", d.Pos, se.Status, se.RawBody)
	}
	for name, v := range fx.values {
		if strings.HasPrefix(name, "token:") && v != "" && strings.Contains(string(se.RawBody), v[:8]) {
			t.Fatalf("%s: the refusal %s names the prefix of session %s's token", d.Pos, se.RawBody, strings.TrimPrefix(name, "token:"))
		}
	}
}

// checkCounted checks that the refusal of case d, whose reason is reason,
// is the one refusal counted (metrics.Transport.Refused) since before.
func checkCounted(t *testing.T, d *datadriven.TestData, before map[replay.Reason]int, reason string) {
	t.Helper()
	after := refusals.snapshot()
	for r, n := range after {
		want := before[r]
		if r == replay.Reason(reason) {
			want++
		}
		if n != want {
			t.Fatalf("%s: %s refusals counted %d → %d, want %d: each refusal is counted once, by its reason", d.Pos, r, before[r], n, want)
		}
	}
	if after[replay.Reason(reason)] == 0 {
		t.Fatalf("%s: the %s refusal is not counted", d.Pos, reason)
	}
}

// outcome renders a refusal as a case's expected output: status, reason
// and JSON-RPC code, then the request id, Retry-After and Allow when
// present.
func outcome(se *mcptest.StatusError) string {
	out := fmt.Sprintf("%d %s %d", se.Status, se.Reason(), se.Body.Code)
	if id := string(se.Body.ID); id != "null" {
		out += " id=" + id
	}
	if ra := se.Header.Get("Retry-After"); ra != "" {
		out += " retry-after=" + ra
	}
	if allow := se.Header.Get("Allow"); allow != "" {
		out += " allow=" + strconv.Quote(allow)
	}
	if c := se.Header.Get("WWW-Authenticate"); c != "" {
		out += "\nwww-authenticate: " + c + "\nmessage: " + se.Body.Message
	}
	return out + "\n"
}

// TestREADMERefusals checks README's tables "The replay decision" and
// "Refusals" against the catalogue: every status and reason they name is
// the catalogue's (replay.Reason.Status), and every refusal reason of the
// catalogue is in one of them.
func TestREADMERefusals(t *testing.T) {
	// The decision's table has a row per refusal of replay.Decide (7), the
	// refusals' table at least one per HTTP status the handler refuses with.
	rows := readmeRefusals(t, "The replay decision", 7)
	rows = append(rows, readmeRefusals(t, "Refusals", 20)...)
	documented := map[replay.Reason]bool{}
	for _, row := range rows {
		for _, r := range row.reasons {
			documented[r] = true
			if r.Status() == 0 {
				t.Errorf("README: %q is not a refusal reason of the catalogue (replay/reason.go)", r)
				continue
			}
			if !containsInt(row.statuses, r.Status()) {
				t.Errorf("README: %s is documented as %v, the catalogue says %d", r, row.statuses, r.Status())
			}
		}
	}
	var missing []string
	for _, r := range replay.Refusals() {
		if !documented[r] {
			missing = append(missing, fmt.Sprintf("%d %s", r.Status(), r))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("README's refusal tables lack %v", missing)
	}
}

// readmeRow is one row of a README refusal table.
type readmeRow struct {
	statuses []int
	reasons  []replay.Reason
}

var (
	readmeStatus = regexp.MustCompile(`^\d{3}$`)
	readmeReason = regexp.MustCompile("`([a-z_]+)`")
)

// readmeRefusals returns the rows of the tables in README's section under
// heading whose cells hold an HTTP status and backquoted reasons; it fails
// the test when there are fewer than atLeast.
func readmeRefusals(t *testing.T, heading string, atLeast int) []readmeRow {
	t.Helper()
	var rows []readmeRow
	for line := range strings.SplitSeq(testenv.DocSection(t, "README.md", heading), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		var row readmeRow
		for _, cell := range strings.Split(strings.Trim(line, "|"), "|") {
			cell = strings.TrimSpace(cell)
			var statuses []int
			for _, s := range strings.Split(cell, ", ") {
				if readmeStatus.MatchString(s) {
					n, _ := strconv.Atoi(s)
					statuses = append(statuses, n)
				}
			}
			switch {
			case len(statuses) > 0 && len(row.statuses) == 0:
				row.statuses = statuses
			case len(row.statuses) > 0 && row.reasons == nil:
				for _, m := range readmeReason.FindAllStringSubmatch(cell, -1) {
					row.reasons = append(row.reasons, replay.Reason(m[1]))
				}
			}
		}
		if len(row.statuses) > 0 && len(row.reasons) > 0 {
			rows = append(rows, row)
		}
	}
	if len(rows) < atLeast {
		t.Fatalf("found %d refusal rows in README's %q, want at least %d; its tables moved or changed shape", len(rows), heading, atLeast)
	}
	return rows
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
