package session_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"

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
	logs := &testenv.LogBuffer{}
	f := newFixture(t, session.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	b, err := f.st.Bounds(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
	c := replay.Cursor{Tag: l.Tag(), Generation: 1, Stream: 1, Sequence: b.HWM + 5}
	l.EndAhead(c, b.HWM)
	l.EndAhead(c, b.HWM)

	call := request(t, 2, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}})
	_, err = l.OpenStream(ctx, []*jsonrpc.Request{call}, false, 0)
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
	logs := &testenv.LogBuffer{}
	f := newFixture(t, session.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	b, err := f.st.Bounds(ctx, l.Token())
	if err != nil {
		t.Fatal(err)
	}
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
