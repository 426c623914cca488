package fleettest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/faultproxy"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// Lease timings of the test fleets: short, so that takeovers happen within
// a test's patience; --lease-renew well below --lease-ttl.
const (
	leaseTTL   = 2 * time.Second
	leaseRenew = 400 * time.Millisecond
)

// version is the protocol version the tests speak.
const version = "2025-11-25"

// replica is one `tidemark serve --redis` process, reached by the test's
// clients through a faultproxy that can cut a connection inside a chosen
// event. Replicas reach one another directly, at their advertised URLs.
type replica struct {
	id     string
	proc   *testenv.Process
	url    string // the endpoint, as the replica logged it
	cut    *cutter
	proxy  *faultproxy.Proxy
	client *mcptest.Client // through the proxy
}

// cutter cuts a connection in the middle of the first chunk that carries
// the progress notification whose progress is at (0: never), so the client
// gets part of that event and then the end of the connection.
type cutter struct{ at atomic.Int64 }

func (c *cutter) filter(_ int, chunk []byte) faultproxy.Decision {
	if at := c.at.Load(); at > 0 {
		if i := bytes.Index(chunk, []byte(`"progress":`+strconv.FormatInt(at, 10)+`,`)); i >= 0 && c.at.CompareAndSwap(at, 0) {
			return faultproxy.Decision{Forward: i, Cut: true}
		}
	}
	return faultproxy.Decision{Forward: len(chunk)}
}

// fleet is a redis-server (or a Sentinel or Cluster deployment) and
// replicas r0, r1, … of `tidemark serve`.
type fleet struct {
	t     *testing.T
	bin   string
	redis *redistest.Server // nil on Sentinel and Cluster
	url   string            // --redis
	extra []string          // more serve flags
	r     []*replica
	st    *redis.Store // the test's own view of Redis
}

// newFleet starts redis-server and n replicas with IDs r0 … r(n-1),
// --lease-ttl 2s and --lease-renew 400ms unless extra says otherwise.
func newFleet(t *testing.T, n int, ropts redistest.Options, extra ...string) *fleet {
	t.Helper()
	srv := redistest.Start(t, ropts)
	f := newFleetOn(t, srv.URL(), n, extra...)
	f.redis = srv
	return f
}

// newFleetOn starts n replicas as newFleet does, on the Redis deployment
// at url (a Sentinel or Cluster URL).
func newFleetOn(t *testing.T, url string, n int, extra ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, bin: testenv.BuildTidemark(t), url: url, extra: extra}
	for i := range n {
		f.r = append(f.r, f.start(fmt.Sprintf("r%d", i)))
	}
	st, err := redis.New(context.Background(), redis.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f.st = st
	return f
}

// start starts the replica id and waits until it serves.
func (f *fleet) start(id string) *replica {
	f.t.Helper()
	return f.startAt(id, "127.0.0.1:0")
}

// startAt starts the replica id listening on addr and waits until it
// serves.
func (f *fleet) startAt(id, addr string) *replica {
	f.t.Helper()
	args := append([]string{"serve", "--addr", addr, "--redis", f.url, "--replica-id", id,
		"--lease-ttl", leaseTTL.String(), "--lease-renew", leaseRenew.String(), "--log-level", "DEBUG"}, f.extra...)
	p := testenv.StartProcess(f.t, f.bin, args...)
	endpoint := testenv.ServeURL(f.t, p)
	u, err := url.Parse(endpoint)
	if err != nil {
		f.t.Fatal(err)
	}
	p.WaitFor(f.t, `msg=serving url=\S+ store=redis replica=`+id+` .*advertise=`+regexp.QuoteMeta(endpoint), 5*time.Second)
	r := &replica{id: id, proc: p, url: endpoint, cut: &cutter{}}
	r.proxy, err = faultproxy.New(u.Host, r.cut.filter)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { r.proxy.Close() })
	hc := &http.Client{Transport: &http.Transport{}}
	f.t.Cleanup(hc.CloseIdleConnections)
	r.client = &mcptest.Client{URL: "http://" + r.proxy.Addr() + u.Path, HTTP: hc}
	return r
}

// on returns the session token as a client holds it, sending to replica i.
func (f *fleet) on(i int, token string) *mcptest.Session {
	return f.r[i].client.SessionFor(token, version)
}

// record returns the session's record as Redis holds it.
func (f *fleet) record(token string) store.Record {
	f.t.Helper()
	rec, err := f.st.Get(context.Background(), token)
	if err != nil {
		f.t.Fatalf("record of %s: %v", store.Prefix(token), err)
	}
	return rec
}

// roundRobin hands out replica indexes in turn: each request goes to the
// next replica, with no stickiness.
type roundRobin struct{ n, of int }

func (rr *roundRobin) next() int {
	i := rr.n % rr.of
	rr.n++
	return i
}

// initialize POSTs initialize to replica a and notifications/initialized to
// replica b, and returns the session token.
func (f *fleet) initialize(ctx context.Context, a, b int) string {
	f.t.Helper()
	body, err := mcptest.Encode(mcptest.MustCall(1, "initialize", &mcp.InitializeParams{
		ProtocolVersion: version,
		ClientInfo:      &mcp.Implementation{Name: "fleettest", Version: "1.0.0"},
		Capabilities:    &mcp.ClientCapabilities{},
	}))
	if err != nil {
		f.t.Fatal(err)
	}
	req, err := f.r[a].client.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := f.r[a].client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil {
		f.t.Fatalf("initialize on %s: %v", f.r[a].id, err)
	}
	token := resp.Header.Get("Mcp-Session-Id")
	if len(msgs) != 1 || token == "" {
		f.t.Fatalf("initialize on %s answered %v with token %q", f.r[a].id, msgs, token)
	}
	if r, ok := msgs[0].(*jsonrpc.Response); !ok || r.Error != nil {
		f.t.Fatalf("initialize on %s answered %v", f.r[a].id, msgs[0])
	}
	resp, err = f.on(b, token).Post(ctx, mcptest.MustNotify("notifications/initialized", nil))
	if err != nil {
		f.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusAccepted {
		f.t.Fatalf("notifications/initialized on %s: %v", f.r[b].id, mcptest.ReadStatusError(resp))
	}
	resp.Body.Close()
	return token
}

// ledger records every event a client received, and fails the test on the
// second delivery of any progress notification or event ID.
type ledger struct {
	t        *testing.T
	mu       sync.Mutex
	progress map[string]bool // token/progress
	ids      map[string]bool
}

func newLedger(t *testing.T) *ledger {
	return &ledger{t: t, progress: map[string]bool{}, ids: map[string]bool{}}
}

// note records ev, received on a stream that did not start at ev (so not
// the repeated cursor of a resumed stream's priming event), and returns
// its progress value (0 when it is not a progress notification).
func (l *ledger) note(ev mcptest.Event) int {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if ev.HasID && ev.ID != "" && !ev.IsPriming() {
		if l.ids[ev.ID] {
			l.t.Fatalf("event %s delivered twice", ev.ID)
		}
		l.ids[ev.ID] = true
	}
	n, tok := progressOf(l.t, ev)
	if n == 0 {
		return 0
	}
	key := fmt.Sprintf("%v/%d", tok, n)
	if l.progress[key] {
		l.t.Fatalf("progress %s delivered twice (event %s)", key, ev.ID)
	}
	l.progress[key] = true
	return n
}

// progressOf returns the progress value and token of a progress
// notification, or 0.
func progressOf(t *testing.T, ev mcptest.Event) (int, any) {
	t.Helper()
	req, ok := ev.Request()
	if !ok || req.Method != "notifications/progress" {
		return 0, nil
	}
	var p struct {
		ProgressToken any     `json:"progressToken"`
		Progress      float64 `json:"progress"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil {
		t.Fatalf("progress params %s: %v", req.Params, err)
	}
	return int(p.Progress), p.ProgressToken
}

func cursor(t *testing.T, id string) replay.Cursor {
	t.Helper()
	c, err := replay.Parse(id)
	if err != nil {
		t.Fatalf("cursor %q: %v", id, err)
	}
	return c
}

// read reads st until it ends, recording each event in l, and returns the
// events, the progress values in order, and the ID of the last complete
// event (including the events read before an error, such as a cut).
func read(l *ledger, st *mcptest.Stream, first bool) (evs []mcptest.Event, steps []int, last string, err error) {
	defer st.Close()
	for {
		ev, err := st.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return evs, steps, last, err
		}
		// A resumed stream opens with a priming event that repeats the
		// client's cursor; it is not a new delivery.
		if !(len(evs) == 0 && !first && ev.IsPriming()) {
			if n := l.note(ev); n > 0 {
				steps = append(steps, n)
			}
		}
		evs = append(evs, ev)
		if ev.HasID && ev.ID != "" {
			last = ev.ID
		}
	}
}

func wantRefusal(t *testing.T, err error, status int, reason string) *mcptest.StatusError {
	t.Helper()
	se, ok := mcptest.AsStatusError(err)
	if !ok {
		t.Fatalf("got %v, want HTTP %d %s", err, status, reason)
	}
	if se.Status != status || se.Reason() != reason {
		t.Fatalf("got HTTP %d reason %q (%s), want %d %s", se.Status, se.Reason(), se.RawBody, status, reason)
	}
	return se
}

// call POSTs a tools/call on replica i and reads its whole answer.
func call(t *testing.T, ctx context.Context, l *ledger, s *mcptest.Session, req *jsonrpc.Request) ([]mcptest.Event, error) {
	t.Helper()
	st, err := s.Call(ctx, req)
	if err != nil {
		return nil, err
	}
	evs, _, _, err := read(l, st, true)
	return evs, err
}

// echo POSTs echo{text} and checks the answer: a priming event and the
// response, at generation gen. It returns the events.
func echo(t *testing.T, ctx context.Context, l *ledger, s *mcptest.Session, id int64, text string, gen uint64) []mcptest.Event {
	t.Helper()
	evs, err := call(t, ctx, l, s, mcptest.ToolCall(id, "echo", map[string]any{"text": text}, nil))
	if err != nil {
		t.Fatalf("echo %q: %v", text, err)
	}
	if len(evs) != 2 || !evs[0].IsPriming() || !evs[1].IsResponseTo(mcptest.ID(id)) {
		t.Fatalf("echo %q answered %d events %v, want priming + response", text, len(evs), evs)
	}
	if g := cursor(t, evs[0].ID).Generation; g != gen {
		t.Fatalf("echo %q answered at generation %d, want %d", text, g, gen)
	}
	if res, _ := evs[1].Response(); res.Error != nil || !strings.Contains(string(res.Result), strconv.Quote(text)) {
		t.Fatalf("echo %q result %s %v", text, res.Result, res.Error)
	}
	return evs
}

func checkSteps(t *testing.T, what string, steps []int, from, to int) {
	t.Helper()
	ok := len(steps) == to-from+1
	for i := 0; ok && i < len(steps); i++ {
		ok = steps[i] == from+i
	}
	if !ok {
		t.Fatalf("%s: progress %v, want %d..%d each once, in order", what, steps, from, to)
	}
}

func isResult(evs []mcptest.Event, id int64, text string) bool {
	if len(evs) == 0 || !evs[len(evs)-1].IsResponseTo(mcptest.ID(id)) {
		return false
	}
	res, _ := evs[len(evs)-1].Response()
	return res.Error == nil && strings.Contains(string(res.Result), text)
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestRoundRobin: three replicas, a client that sends each HTTP request to
// the next replica in turn. The session stays where it was created (its
// owner, at generation 1); the other replicas forward to it. Every progress
// notification arrives once, in order, across cuts and resumptions on any
// replica, and replays from any replica are exact.
func TestRoundRobin(t *testing.T) {
	testenv.NeedRedis(t)
	roundRobinScenario(t, newFleet(t, 3, redistest.Options{}))
}

// roundRobinScenario is the scenario of TestRoundRobin on the fleet f.
func roundRobinScenario(t *testing.T, f *fleet) {
	ctx := testCtx(t, 60*time.Second)
	l := newLedger(t)
	rr := &roundRobin{of: 3}

	token := f.initialize(ctx, rr.next(), rr.next()) // r0, r1

	// countdown on r2, forwarded to r0; r2's proxy cuts the connection in
	// the middle of progress 8.
	const n = 24
	f.r[2].cut.at.Store(8)
	st, err := f.on(rr.next(), token).Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": n, "delay_ms": 40}, "rr"))
	if err != nil {
		t.Fatal(err)
	}
	evs, steps, last, err := read(l, st, true)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the cut stream ended with %v after %d events, want io.ErrUnexpectedEOF", err, len(evs))
	}
	checkSteps(t, "POST stream on r2 until the cut", steps, 1, 7)
	all := steps

	// The standalone GET stream on r0: a priming event of generation 1.
	get, err := f.on(rr.next(), token).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := get.Next(); err != nil || !ev.IsPriming() || cursor(t, ev.ID).Generation != 1 {
		t.Fatalf("standalone GET on r0: %v %v, want a priming event of generation 1", ev, err)
	}

	// Resume on r1, cut inside progress 16.
	f.r[1].cut.at.Store(16)
	st, err = f.on(rr.next(), token).Resume(ctx, last)
	if err != nil {
		t.Fatalf("resume on r1: %v", err)
	}
	evs, steps, last, err = read(l, st, false)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(evs) == 0 || !evs[0].IsPriming() {
		t.Fatalf("resumed stream on r1 ended with %v after %v, want a priming event, events, then a cut", err, evs)
	}
	checkSteps(t, "resumed stream on r1 until the cut", steps, 8, 15)
	all = append(all, steps...)

	// Resume on r2, to the end.
	st, err = f.on(rr.next(), token).Resume(ctx, last)
	if err != nil {
		t.Fatalf("resume on r2: %v", err)
	}
	evs, steps, _, err = read(l, st, false)
	if err != nil || !isResult(evs, 2, fmt.Sprintf("countdown of %d finished", n)) {
		t.Fatalf("resumed stream on r2: %v, %d events, want the countdown's result last", err, len(evs))
	}
	checkSteps(t, "resumed stream on r2", steps, 16, n)
	all = append(all, steps...)
	checkSteps(t, "all streams", all, 1, n)

	// Replays of the finished stream, from the cursor of progress 4, on
	// every replica: exactly progress 5..n and the result.
	at4 := idOfProgress(t, f, token, 4)
	for range 3 {
		i := rr.next()
		st, err := f.on(i, token).Resume(ctx, at4)
		if err != nil {
			t.Fatalf("replay on %s: %v", f.r[i].id, err)
		}
		evs, err := st.Collect()
		st.Close()
		if err != nil || len(evs) != n-4+2 || !evs[0].ResumesFrom(at4) || !isResult(evs, 2, "finished") {
			t.Fatalf("replay on %s from progress 4: %v, %d events, want priming + %d progress + result", f.r[i].id, err, len(evs), n-4)
		}
		for k, ev := range evs[1 : len(evs)-1] {
			if p, _ := progressOf(t, ev); p != 5+k {
				t.Fatalf("replay on %s: event %d is progress %d, want %d", f.r[i].id, k+1, p, 5+k)
			}
		}
	}

	// Nothing else reached the standalone stream; the session never moved.
	get.Close()
	if rec := f.record(token); rec.Owner != "r0" || rec.Generation != 1 {
		t.Fatalf("record after round robin: owner %q gen %d, want r0 gen 1", rec.Owner, rec.Generation)
	}
	for _, i := range []int{1, 2} {
		if !strings.Contains(f.r[i].proc.Output(), `msg="forwarding request" session=`+store.Prefix(token)) {
			t.Fatalf("%s did not log forwarding requests for the session to r0", f.r[i].id)
		}
	}

	t.Run("one reader per stream across replicas", func(t *testing.T) {
		token := f.initialize(ctx, 1, 1) // owned by r1
		const n = 30
		st, err := f.on(2, token).Call(ctx, mcptest.ToolCall(3, "countdown", map[string]any{"n": n, "delay_ms": 40}, "one"))
		if err != nil {
			t.Fatal(err)
		}
		var at3 string
		if _, err := st.Until(func(ev mcptest.Event) bool {
			at3 = ev.ID
			p, _ := progressOf(t, ev)
			return p == 3
		}); err != nil {
			t.Fatal(err)
		}
		// A resume on r0 takes the stream over: the r2 connection ends
		// cleanly, and r0's gets everything after progress 3.
		taken, err := f.on(0, token).Resume(ctx, at3)
		if err != nil {
			t.Fatal(err)
		}
		old := make(chan error, 1)
		var oldSteps []int
		go func() {
			for {
				ev, err := st.Next()
				if err != nil {
					old <- err
					return
				}
				if p, _ := progressOf(t, ev); p > 0 {
					oldSteps = append(oldSteps, p)
				}
			}
		}()
		select {
		case err := <-old:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the taken-over stream ended with %v, want a clean end", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the stream on r2 was not closed when r0 took it over")
		}
		st.Close()
		evs, err := taken.Collect()
		taken.Close()
		if err != nil || !isResult(evs, 3, "finished") {
			t.Fatalf("stream taken over on r0: %v, want the result last", err)
		}
		var newSteps []int
		for _, ev := range evs[1:] {
			if p, _ := progressOf(t, ev); p > 0 {
				newSteps = append(newSteps, p)
			}
		}
		checkSteps(t, "stream taken over on r0", newSteps, 4, n)
		// What the old connection still got after progress 3 was written
		// before the takeover: a prefix of what the new one replays.
		checkSteps(t, "old connection after progress 3", oldSteps, 4, 3+len(oldSteps))
		if len(oldSteps) > 5 {
			t.Fatalf("the old connection kept getting events after the takeover: %v", oldSteps)
		}
	})
}

// idOfProgress returns the cursor of the event that carries progress p of
// the session's current generation, read from Redis.
func idOfProgress(t *testing.T, f *fleet, token string, p int) string {
	t.Helper()
	evs, _, err := f.st.Read(context.Background(), token, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte(`"progress":` + strconv.Itoa(p) + `,`)
	for _, e := range evs {
		if bytes.Contains(e.Data, want) {
			return replay.Cursor{Tag: replay.Tag(token), Generation: e.Generation, Stream: e.Stream, Sequence: e.Seq}.String()
		}
	}
	t.Fatalf("no event carries progress %d", p)
	return ""
}
