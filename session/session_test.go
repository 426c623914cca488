// session_test.go holds the tests of a session's life in a registry:
// creation, recorded state, re-creation, eviction, user binding, routing
// of messages to streams, and dead engine sessions.

package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

func TestCreateRecordsStateAndRecreateRestoresIt(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l, err := f.reg.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if l.Generation() != 1 || len(l.Token()) != 26 || l.Tag() != replay.Tag(l.Token()) {
		t.Fatalf("new session: generation %d, token %q", l.Generation(), l.Token())
	}
	initialize(t, f, l)
	out := roundTrip(t, f, l, request(t, 2, "logging/setLevel", map[string]any{"level": "warning"}))
	if len(out) != 1 || out[0] != `{"jsonrpc":"2.0","id":2,"result":{}}` {
		t.Fatalf("setLevel answered %v", out)
	}
	rec, err := f.st.Get(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	var st engine.State
	if err := json.Unmarshal(rec.State, &st); err != nil {
		t.Fatal(err)
	}
	if st.ProtocolVersion != "2025-11-25" || st.LogLevel != "warning" || !st.Initialized ||
		!strings.Contains(string(st.InitializeParams), `"name":"test"`) {
		t.Fatalf("stored state = %s", rec.State)
	}

	l2, err := f.reg.Recreate(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	if l2.Generation() != 2 || l2.Token() != l.Token() {
		t.Fatalf("re-created: token %q generation %d, want same token, generation 2", l2.Token(), l2.Generation())
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("generation 1's live state did not end")
	}
	// Generation 2 answers without a new initialize, with the same level.
	out = roundTrip(t, f, l2, request(t, 3, "tools/call", map[string]any{
		"name": "echo", "arguments": map[string]any{"text": "after restart"},
	}))
	if len(out) != 1 || !strings.Contains(out[0], `"text":"after restart"`) {
		t.Fatalf("tools/call on generation 2 answered %v", out)
	}
	if got := l2.State(); got.LogLevel != "warning" || got.ProtocolVersion != "2025-11-25" {
		t.Fatalf("generation 2 state = %+v", got)
	}
	// Generation 1 is fenced: its writes fail and store nothing.
	err = session.OutboxOf(l).Send(ctx, &jsonrpc.Request{Method: "notifications/message"}, jsonrpc.ID{})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a generation-1 send after the re-creation = %v, want ErrFenced", err)
	}
}

func TestEngineDeathRecreatesOnNextGet(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l, _ := f.reg.Create(ctx, "")
	initialize(t, f, l)
	for ss := range f.server.Sessions() {
		ss.Close() // the SDK session dies on its own
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the SDK session closed")
	}
	var l2 *session.Live
	var err error
	for range 100 { // the registry notices the death asynchronously
		l2, err = f.reg.Get(ctx, l.Token(), "")
		if err != nil || l2.Generation() == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil || l2.Generation() != 2 {
		t.Fatalf("Get after the engine died: generation %d, %v; want 2", l2.Generation(), err)
	}
}

func TestEviction(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{MaxSessions: 2, IdleTTL: time.Minute, TombstoneTTL: time.Hour})
	a, _ := f.reg.Create(ctx, "")
	f.clk.Advance(time.Second)
	b, _ := f.reg.Create(ctx, "")
	f.clk.Advance(time.Second)
	if _, err := f.reg.Get(ctx, a.Token(), ""); err != nil { // a is now the most recent
		t.Fatal(err)
	}
	c, err := f.reg.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var ended *store.EndedError
	if _, err := f.reg.Get(ctx, b.Token(), ""); !errors.As(err, &ended) || ended.Reason != store.EndCapacity {
		t.Fatalf("least recently used session after a third Create: %v, want ended by capacity", err)
	}
	if st, _, _ := f.reg.Status(ctx, b.Token()); st != replay.Evicted {
		t.Fatalf("Status of the evicted token = %v", st)
	}
	// Idle: c is touched, a is not.
	f.clk.Advance(50 * time.Second)
	c.Touch()
	f.clk.Advance(20 * time.Second)
	f.reg.Sweep(ctx)
	if _, err := f.reg.Get(ctx, a.Token(), ""); !errors.As(err, &ended) || ended.Reason != store.EndIdle {
		t.Fatalf("idle session after Sweep: %v, want ended idle", err)
	}
	if _, err := f.reg.Get(ctx, c.Token(), ""); err != nil {
		t.Fatalf("recently touched session after Sweep: %v", err)
	}
	// An attached connection keeps a session alive however long it is idle.
	detach := c.Attach()
	f.clk.Advance(10 * time.Minute)
	f.reg.Sweep(ctx)
	if _, err := f.reg.Get(ctx, c.Token(), ""); err != nil {
		t.Fatalf("session with an open stream after Sweep: %v", err)
	}
	detach()
	// The tombstone expires: the token is unknown, never a fresh session.
	f.clk.Advance(2 * time.Hour)
	if _, err := f.reg.Get(ctx, b.Token(), ""); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Get after the tombstone expired: %v, want ErrNotFound", err)
	}
}

func TestUserBindingAndSupersede(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l, _ := f.reg.Create(ctx, "alice")
	if _, err := f.reg.Get(ctx, l.Token(), "bob"); !errors.Is(err, session.ErrForbidden) {
		t.Fatalf("Get by another user: %v, want ErrForbidden", err)
	}
	if _, err := f.reg.Get(ctx, l.Token(), ""); !errors.Is(err, session.ErrForbidden) {
		t.Fatalf("Get without a user: %v, want ErrForbidden", err)
	}
	if _, err := f.reg.Get(ctx, l.Token(), "alice"); err != nil {
		t.Fatal(err)
	}
	if err := f.reg.End(ctx, l.Token(), store.EndSuperseded); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := f.reg.Status(ctx, l.Token()); st != replay.Superseded {
		t.Fatalf("Status after supersede = %v", st)
	}
}

func TestRouting(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l, _ := f.reg.Create(ctx, "")
	initialize(t, f, l)
	// countdown with a progress token: progress and the response share the
	// call's stream; the response ends it.
	out := roundTrip(t, f, l, request(t, "c1", "tools/call", map[string]any{
		"name": "countdown", "arguments": map[string]any{"n": 3}, "_meta": map[string]any{"progressToken": "tok"},
	}))
	want := []string{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","message":"step 1 of 3","progress":1,"total":3}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","message":"step 2 of 3","progress":2,"total":3}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","message":"step 3 of 3","progress":3,"total":3}}`,
		`{"jsonrpc":"2.0","id":"c1","result":{"content":[{"type":"text","text":"countdown of 3 finished"}]}}`,
	}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("countdown stream:\n got %q\nwant %q", out, want)
	}
	// A request ID in flight cannot be reused.
	r := request(t, "dup", "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": 1, "delay_ms": 1000}})
	if _, err := l.OpenStream(ctx, []*jsonrpc.Request{r}, false, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenStream(ctx, []*jsonrpc.Request{r}, false, 0); !errors.Is(err, session.ErrDuplicateID) {
		t.Fatalf("second stream with an in-flight ID: %v, want ErrDuplicateID", err)
	}
	// Messages related to a request answered as JSON go to the standalone
	// stream; only the response goes to its stream.
	j := request(t, "j1", "tools/call", map[string]any{
		"name": "countdown", "arguments": map[string]any{"n": 2}, "_meta": map[string]any{"progressToken": "jt"},
	})
	s, err := l.OpenStream(ctx, []*jsonrpc.Request{j}, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Deliver(ctx, j, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	rd := l.Reader(s, s)
	evs, err := rd.Next(ctx)
	if err != nil || len(evs) != 1 || !evs[0].End || !strings.Contains(string(evs[0].Data), `"id":"j1"`) {
		t.Fatalf("JSON stream events: %v %v", evs, err)
	}
	standalone := l.Reader(replay.StandaloneStream, s)
	evs, err = standalone.Next(ctx)
	if err != nil || len(evs) != 2 || !strings.Contains(string(evs[1].Data), `"progress":2`) {
		t.Fatalf("standalone stream events: %v %v", evs, err)
	}
}

// killEngine closes the SDK session of token, as if it died on its own.
func killEngine(t *testing.T, f *fixture, l *session.Live) {
	t.Helper()
	for ss := range f.server.Sessions() {
		if ss.ID() == l.Token() {
			ss.Close()
		}
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the SDK session closed")
	}
}

// TestDeadEngineMakesRoomWithoutEnding: a session whose engine session died
// is not held any more: it does not count against MaxSessions (a new
// session takes its place instead of evicting a live one), Len leaves it
// out, and its token is not ended: its next request re-creates it at
// generation 2.
func TestDeadEngineMakesRoomWithoutEnding(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{MaxSessions: 2})
	a, _ := f.reg.Create(ctx, "")
	initialize(t, f, a)
	f.clk.Advance(time.Second)
	b, _ := f.reg.Create(ctx, "")
	killEngine(t, f, a)
	if n := f.reg.Len(); n != 1 {
		t.Fatalf("Len after a's engine died = %d, want 1", n)
	}
	c, err := f.reg.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := f.reg.Get(ctx, b.Token(), ""); err != nil || l != b {
		t.Fatalf("b after a third Create: %v (same live state: %v), want b still held", err, l == b)
	}
	// a comes back at generation 2; c, the least recently used, makes
	// room for it, and only c: the token being re-created takes one room,
	// not two.
	a2, err := f.reg.Get(ctx, a.Token(), "")
	if err != nil || a2.Generation() != 2 {
		t.Fatalf("Get of a: %v, want generation 2", err)
	}
	if _, err := f.reg.Get(ctx, b.Token(), ""); err != nil {
		t.Fatalf("b after a's re-creation: %v, want still held", err)
	}
	if n := f.reg.Len(); n != 2 {
		t.Fatalf("Len after a's re-creation = %d, want 2 (a and b)", n)
	}
	var ended *store.EndedError
	if _, err := f.reg.Get(ctx, c.Token(), ""); !errors.As(err, &ended) || ended.Reason != store.EndCapacity {
		t.Fatalf("c after a's re-creation: %v, want ended by capacity", err)
	}
}

// TestSweepLetsGoOfDeadEngines: Sweep removes a session whose engine died
// without ending it, and the next Get re-creates it.
func TestSweepLetsGoOfDeadEngines(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	a, _ := f.reg.Create(ctx, "")
	initialize(t, f, a)
	killEngine(t, f, a)
	f.reg.Sweep(ctx)
	if st, _, _ := f.reg.Status(ctx, a.Token()); st != replay.Live {
		t.Fatalf("Status after Sweep = %v, want live (not ended)", st)
	}
	a2, err := f.reg.Get(ctx, a.Token(), "")
	if err != nil || a2.Generation() != 2 {
		t.Fatalf("Get after Sweep: %v, want generation 2", err)
	}
}

// TestReleaseCalls: calls registered by OpenStream but never delivered are
// forgotten, so their ids can be sent again (the retry a 503 asks for is
// not refused as a duplicate); the stream then ends with its last
// delivered call.
func TestReleaseCalls(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l, _ := f.reg.Create(ctx, "")
	initialize(t, f, l)
	echo := func(id string) *jsonrpc.Request {
		return request(t, id, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": id}})
	}
	a, b := echo("a"), echo("b")
	s, err := l.OpenStream(ctx, []*jsonrpc.Request{a, b}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Deliver(ctx, a, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	l.ReleaseCalls(ctx, s, []*jsonrpc.Request{b}, replay.ReasonClientGone)
	// a's response, then the end: on a's response when it came after the
	// release, else on an id-only event appended by the release.
	var got []store.Event
	rd := l.Reader(s, s)
	for len(got) == 0 || !got[len(got)-1].End {
		evs, err := rd.Next(ctx)
		if err != nil {
			t.Fatalf("stream after releasing b: %v (events so far %v)", err, got)
		}
		got = append(got, evs...)
	}
	if !strings.Contains(string(got[0].Data), `"id":"a"`) || len(got) > 2 || (len(got) == 2 && (got[1].Kind != store.KindPriming || len(got[1].Data) != 0)) {
		t.Fatalf("stream after releasing b: %v, want a's response, then the end (on it, or on an id-only event)", got)
	}
	if out := roundTrip(t, f, l, echo("b")); len(out) != 1 || !strings.Contains(out[0], `"id":"b"`) {
		t.Fatalf("b sent again: %q", out)
	}
}

// TestMaxCallsPerSession: OpenStream refuses calls beyond
// Options.MaxCallsPerSession with ErrTooManyCalls and registers none of them.
func TestMaxCallsPerSession(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{MaxCallsPerSession: 2})
	l, _ := f.reg.Create(ctx, "")
	initialize(t, f, l)
	slow := func(id string) *jsonrpc.Request {
		return request(t, id, "tools/call", map[string]any{"name": "countdown", "arguments": map[string]any{"n": 1, "delay_ms": 50}})
	}
	if _, err := l.OpenStream(ctx, []*jsonrpc.Request{slow("1")}, false, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenStream(ctx, []*jsonrpc.Request{slow("2"), slow("3")}, false, 0); !errors.Is(err, session.ErrTooManyCalls) {
		t.Fatalf("two more calls with one in flight and a limit of 2: %v, want ErrTooManyCalls", err)
	}
	// Neither id of the refused batch was registered.
	if _, err := l.OpenStream(ctx, []*jsonrpc.Request{slow("2")}, false, 0); err != nil {
		t.Fatalf("id 2 after the refusal: %v", err)
	}
}

// TestDeadEngineLoggedAsEngineEnded: the re-creation that follows an engine
// session's own end (a gateway subprocess that exited) says so in its log
// line, reason=engine_ended, not owner_gone (the reason for a previous
// process's session).
func TestDeadEngineLoggedAsEngineEnded(t *testing.T) {
	ctx := context.Background()
	logs := &testenv.LogBuffer{}
	f := newFixture(t, session.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	a, _ := f.reg.Create(ctx, "")
	initialize(t, f, a)
	killEngine(t, f, a)
	a2, err := f.reg.Get(ctx, a.Token(), "")
	if err != nil || a2.Generation() != 2 {
		t.Fatalf("Get after the engine ended: %v, want generation 2", err)
	}
	wantLog(t, logs, `msg="session re-created" session=\S+ generation=2 previous_generation=1 previous_owner=\S+ reason=engine_ended\n`)
}

// TestStatusOf: the errors of Get map to the replay decision's session
// status, and the others are not a status.
func TestStatusOf(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	live := mustCreate(t, f.reg)
	deleted := mustCreate(t, f.reg)
	superseded := mustCreate(t, f.reg)
	bound, err := f.reg.Create(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	f.reg.End(ctx, deleted.Token(), store.EndDeleted)
	f.reg.End(ctx, superseded.Token(), store.EndSuperseded)
	for _, c := range []struct {
		token string
		want  replay.Status
		ok    bool
	}{
		{live.Token(), replay.Live, true},
		{deleted.Token(), replay.Deleted, true},
		{superseded.Token(), replay.Superseded, true},
		{session.NewToken(), replay.Unknown, true},
		{bound.Token(), replay.Unknown, false}, // ErrForbidden
	} {
		_, err := f.reg.Get(ctx, c.token, "")
		st, ok := session.StatusOf(err)
		if st != c.want || ok != c.ok {
			t.Errorf("StatusOf(%v) = %v, %v; want %v, %v", err, st, ok, c.want, c.ok)
		}
		if !c.ok {
			continue
		}
		if st, _, err := f.reg.Status(ctx, c.token); st != c.want || err != nil {
			t.Errorf("Status of the same token = %v, %v; want %v", st, err, c.want)
		}
	}
}
