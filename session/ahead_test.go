package session_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// TestEndAhead: a resume that named a cursor of the live generation above
// the high-water mark ends that generation: its appends fail with
// *store.LostError (ErrConfirmedLost), one WARN line names the session,
// the generation, the cursor and the high-water mark, a second EndAhead
// logs nothing, and the next lookup re-creates the session at
// generation+1 with reason generation_lost.
func TestEndAhead(t *testing.T) {
	ctx := context.Background()
	f, logs, l, b := loggedSession(t)
	c := replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: 1, Sequence: b.HWM + 5}
	l.EndAhead(c, b.HWM)
	l.EndAhead(c, b.HWM)

	call := request(t, 2, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}})
	_, err := l.OpenStream(ctx, []*jsonrpc.Request{call}, false, 0)
	var lost *store.LostError
	if !errors.As(err, &lost) || !errors.Is(err, session.ErrConfirmedLost) || lost.Generation != 1 || lost.Seq != b.HWM+1 {
		t.Fatalf("append after EndAhead: %v; want a *store.LostError of generation 1 from %d, wrapping ErrConfirmedLost", err, b.HWM+1)
	}
	if after, _ := f.st.Bounds(ctx, l.Token()); after != b {
		t.Fatalf("bounds after EndAhead: %+v, want %+v", after, b)
	}

	l2, err := f.reg.Get(ctx, l.Token(), "")
	if err != nil {
		t.Fatal(err)
	}
	if l2 == l || l2.Generation() != 2 {
		t.Fatalf("lookup after EndAhead: generation %d (same Live: %v), want a new Live at generation 2", l2.Generation(), l2 == l)
	}
	warn := "level=WARN msg=\"live state dropped: the store lost events it had confirmed: restored from a backup?"
	if n := strings.Count(logs.String(), warn); n != 1 {
		t.Fatalf("%d lines %s, want 1; log:\n%s", n, warn, logs)
	}
	wantLog(t, logs, `level=WARN msg="live state dropped: the store lost events it had confirmed: restored from a backup\? .*" `+
		`session=`+regexp.QuoteMeta(store.Prefix(l.Token()))+` generation=1 reason=generation_lost cursor=`+regexp.QuoteMeta(c.String())+
		` hwm=`+strconv.FormatUint(b.HWM, 10)+`\n`)
	wantLog(t, logs, `msg="session re-created" session=\S+ generation=2 previous_generation=1 \S+ reason=generation_lost`)
}

// TestEndAbove: a resume that named a cursor of a generation above the
// live one ends the live generation as EndAhead does, its WARN line says
// the cursor is of a later generation, and the next lookup re-creates the
// session above that generation: 5 for a cursor of generation 4, and at
// most 16 generations past the record's for a cursor of a far one.
func TestEndAbove(t *testing.T) {
	ctx := context.Background()
	f, logs, l, b := loggedSession(t)
	l.EndAbove(replay.Cursor{Tag: l.Tag(), Generation: 4, Stream: 1, Sequence: 1}, b.HWM)
	l2, err := f.reg.Get(ctx, l.Token(), "")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Generation() != 5 {
		t.Fatalf("lookup after EndAbove of a generation-4 cursor: generation %d, want 5", l2.Generation())
	}
	wantLog(t, logs, `level=WARN msg="live state dropped: the store lost events it had confirmed: restored from a backup\? A client holds a cursor of a generation above this one, .*" `+
		`session=`+regexp.QuoteMeta(store.Prefix(l.Token()))+` generation=1 reason=generation_lost`)

	l2.EndAbove(replay.Cursor{Tag: l.Tag(), Generation: 1 << 40, Stream: 1, Sequence: 1}, b.HWM)
	l3, err := f.reg.Get(ctx, l.Token(), "")
	if err != nil {
		t.Fatal(err)
	}
	if l3.Generation() != 5+1+16 {
		t.Fatalf("lookup after EndAbove of a far generation: generation %d, want %d (16 past the record's claim)", l3.Generation(), 5+1+16)
	}
}

// TestEndAheadWarnsOncePerSecond: made-up cursors end one generation
// each, and the process logs one WARN line per second of each kind: 60
// cursors above the high-water mark give one line, a cursor of a later
// generation one of its own, and the next cursor above the high-water
// mark a second later one more, which counts the 59 held back.
func TestEndAheadWarnsOncePerSecond(t *testing.T) {
	ctx := context.Background()
	f, logs, l, _ := loggedSession(t)
	token := l.Token()
	ahead := func() {
		t.Helper()
		l, err := f.reg.Get(ctx, token, "")
		if err != nil {
			t.Fatal(err)
		}
		b, err := f.st.Bounds(ctx, token)
		if err != nil {
			t.Fatal(err)
		}
		l.EndAhead(replay.Cursor{Tag: l.Tag(), Generation: l.Generation(), Stream: 1, Sequence: b.HWM + 5}, b.HWM)
	}
	for range 60 {
		ahead()
	}
	l, err := f.reg.Get(ctx, token, "")
	if err != nil {
		t.Fatal(err)
	}
	l.EndAbove(replay.Cursor{Tag: l.Tag(), Generation: l.Generation() + 1, Stream: 1, Sequence: 1}, 0)
	f.clk.Advance(time.Second)
	ahead()

	var warns []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") {
			warns = append(warns, line)
		}
	}
	aheadLine := regexp.MustCompile(`^time=\S+ level=WARN msg="live state dropped: the store lost events it had confirmed: restored from a backup\? A client holds a cursor above the high-water mark, .*" session=\S+ generation=(\d+) reason=generation_lost cursor=\S+ hwm=\d+( suppressed=\d+)?\n$`)
	aboveLine := regexp.MustCompile(`^time=\S+ level=WARN msg="live state dropped: the store lost events it had confirmed: restored from a backup\? A client holds a cursor of a generation above this one, .*" session=\S+ generation=61 reason=generation_lost cursor=\S+ hwm=0\n$`)
	if len(warns) != 3 {
		t.Fatalf("%d WARN lines, want 3; log:\n%s", len(warns), logs)
	}
	if m := aheadLine.FindStringSubmatch(warns[0]); m == nil || m[1] != "1" || m[2] != "" {
		t.Errorf("first WARN line %q: want generation 1's, without suppressed", warns[0])
	}
	if !aboveLine.MatchString(warns[1]) {
		t.Errorf("second WARN line %q: want generation 61's, of a cursor of a later generation", warns[1])
	}
	if m := aheadLine.FindStringSubmatch(warns[2]); m == nil || m[2] != " suppressed=59" {
		t.Errorf("third WARN line %q: want a cursor above the high-water mark, suppressed=59", warns[2])
	}
}

// loggedSession returns a fixture whose registry logs to logs, and an
// initialized session of it with its bounds.
func loggedSession(t *testing.T) (*fixture, *testenv.LogBuffer, *session.Live, store.Bounds) {
	t.Helper()
	logs := &testenv.LogBuffer{}
	f := newFixture(t, session.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	b, err := f.st.Bounds(context.Background(), l.Token())
	if err != nil {
		t.Fatal(err)
	}
	return f, logs, l, b
}
