// replay_test.go runs the decision table and the cursor grammar from
// testdata, and tests the cursor codec's bounds, round trip and hostile
// input.

package replay_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/replay"
)

const (
	testToken  = "session-token-under-test"
	otherToken = "another-session-token"
)

// TestDataDriven runs the cases in testdata/: the decision table (decide),
// the cursor grammar (parse) and the status of an ended session (ended).
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "parse":
				return runParse(d)
			case "decide":
				return runDecide(t, d)
			case "decide-cursor":
				return runDecideCursor(t, d)
			case "ended":
				return runEnded(d)
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
				return ""
			}
		})
	})
}

func runParse(d *datadriven.TestData) string {
	var b strings.Builder
	for _, line := range strings.Split(d.Input, "\n") {
		c, err := replay.Parse(line)
		if err != nil {
			fmt.Fprintf(&b, "%s: error: %v\n", line, err)
			continue
		}
		fmt.Fprintf(&b, "%s: tag=%s generation=%d stream=%d sequence=%d", line, c.Tag, c.Generation, c.Stream, c.Sequence)
		if c.Resume != 0 {
			fmt.Fprintf(&b, " resume=%d", c.Resume)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func runDecide(t *testing.T, d *datadriven.TestData) string {
	in := replay.Input{HasSessionID: true, Session: replay.Session{Tag: replay.Tag(testToken)}}
	for _, arg := range d.CmdArgs {
		val := ""
		if len(arg.Vals) > 0 {
			val = arg.Vals[0]
		}
		num := func() uint64 {
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				t.Fatalf("%s: %s=%q: %v", d.Pos, arg.Key, val, err)
			}
			return n
		}
		switch arg.Key {
		case "sid":
			in.HasSessionID = val != "no"
		case "status":
			in.Session.Status = map[string]replay.Status{
				"live": replay.Live, "evicted": replay.Evicted, "superseded": replay.Superseded, "unknown": replay.Unknown,
				"deleted": replay.Deleted,
			}[val]
		case "gen":
			in.Session.Generation = num()
		case "floor":
			in.Session.Floor = num()
		case "hwm":
			in.Session.HWM = num()
		case "cursor":
			r := strings.NewReplacer("{tag}", replay.Tag(testToken), "{other}", replay.Tag(otherToken))
			in.LastEventID = r.Replace(val)
		case "at":
			switch val {
			case "gone":
				in.At = &replay.EventAt{}
			case "lost":
				in.At = &replay.EventAt{Lost: true}
			default:
				in.At = &replay.EventAt{Found: true, Stream: num()}
			}
		default:
			t.Fatalf("%s: unknown argument %q", d.Pos, arg.Key)
		}
	}
	dec := replay.Decide(in)
	if dec.Outcome == replay.NeedEvent {
		return fmt.Sprintf("need_event %d\n", dec.Cursor.Sequence)
	}
	out := fmt.Sprintf("%d %s", dec.Outcome.HTTPStatus(), dec.Outcome.Reason())
	data := dec.Data()
	keys := make([]string, 0, len(data))
	for k := range data {
		if k != "reason" && k != "detail" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		out += fmt.Sprintf(" %s=%v", k, data[k])
	}
	return out + "\n"
}

// runDecideCursor prints DecideCursor's decision for the cursor of the
// session of testToken, with its detail ({tag} and {other} as in decide),
// and checks that Decide, given that live session with any generation and
// bounds, decides the same.
func runDecideCursor(t *testing.T, d *datadriven.TestData) string {
	var cursor string
	d.ScanArgs(t, "cursor", &cursor)
	tags := strings.NewReplacer("{tag}", replay.Tag(testToken), "{other}", replay.Tag(otherToken))
	cursor = tags.Replace(cursor)
	dec, ok := replay.DecideCursor(replay.Tag(testToken), cursor)
	if !ok {
		return "pass\n"
	}
	full := replay.Decide(replay.Input{HasSessionID: true, LastEventID: cursor,
		Session: replay.Session{Status: replay.Live, Tag: replay.Tag(testToken), Generation: 4, Floor: 10, HWM: 20}})
	if full.Outcome != dec.Outcome || full.Message() != dec.Message() || fmt.Sprint(full.Data()) != fmt.Sprint(dec.Data()) {
		t.Errorf("%s: DecideCursor: %v %q %v; Decide: %v %q %v", d.Pos, dec.Outcome, dec.Message(), dec.Data(), full.Outcome, full.Message(), full.Data())
	}
	detail := strings.NewReplacer(replay.Tag(testToken), "{tag}", replay.Tag(otherToken), "{other}").Replace(dec.Detail)
	return fmt.Sprintf("%d %s detail=%q\n", dec.Outcome.HTTPStatus(), dec.Outcome.Reason(), detail)
}

// runEnded prints, for each end reason of the input (one a line, "-" for
// the empty reason), the status its tombstone means and that status's 404
// message.
func runEnded(d *datadriven.TestData) string {
	var b strings.Builder
	for _, line := range strings.Split(d.Input, "\n") {
		r := replay.Reason(line)
		if line == "-" {
			r = ""
		}
		st := replay.EndedStatus(r)
		fmt.Fprintf(&b, "%s: %s: %s\n", line, st, st.NotFoundMessage())
	}
	return b.String()
}

// TestParseHostile covers inputs that cannot be written in testdata lines:
// control characters, non-ASCII bytes and oversized values.
func TestParseHostile(t *testing.T) {
	tag := replay.Tag(testToken)
	for _, s := range []string{
		tag + "-1-0-1\n",
		tag + "-1-0-1\x00",
		tag + "-1\r-0-1",
		tag + "-1-0-\x7f1",
		tag + "-1-0-١", // Arabic-Indic digit one
		tag + "-1-0-１", // full-width digit one
		strings.Repeat("9", 10*1024),
		tag + "-1-0-" + strings.Repeat("1", 50),
		"\t",
	} {
		_, err := replay.Parse(s)
		if !errors.Is(err, replay.ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want an error wrapping ErrMalformed", s, err)
		}
		if len(s) > replay.MaxCursorLen && err != nil && len(err.Error()) > 100 {
			t.Errorf("Parse of a %d-byte value: error is %d bytes long, want it bounded", len(s), len(err.Error()))
		}
	}
}

func TestTag(t *testing.T) {
	// SHA-256("session-token-under-test") starts with these four bytes.
	if got, want := replay.Tag(testToken), "58aa8801"; got != want {
		t.Errorf("Tag(%q) = %q, want %q", testToken, got, want)
	}
	if replay.Tag(testToken) == replay.Tag(otherToken) {
		t.Errorf("two tokens share a tag")
	}
}

// TestRoundTrip is a property test: every cursor within bounds, with or
// without a resume part, formats to at most 79 visible ASCII bytes and parses
// back to itself.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(max uint64, min uint64) uint64 {
		switch r.IntN(4) {
		case 0:
			return min
		case 1:
			return max
		default:
			return min + r.Uint64N(max-min+1)
		}
	}
	for i := 0; i < 100000; i++ {
		c := replay.Cursor{
			Tag:        replay.Tag(strconv.Itoa(i)),
			Generation: pick(replay.MaxGeneration, 1),
			Stream:     pick(replay.MaxStream, 0),
			Sequence:   pick(replay.MaxSequence, 1),
		}
		if i%2 == 1 {
			c.Resume = pick(replay.MaxResume, 1)
		}
		s := c.String()
		if len(s) > 79 {
			t.Fatalf("%+v formats to %d bytes: %q", c, len(s), s)
		}
		for j := 0; j < len(s); j++ {
			if s[j] < 0x21 || s[j] > 0x7e {
				t.Fatalf("%q has a byte outside visible ASCII at %d", s, j)
			}
		}
		got, err := replay.Parse(s)
		if err != nil || got != c {
			t.Fatalf("Parse(%q) = %+v, %v; want %+v", s, got, err, c)
		}
	}
}

// FuzzParse checks that Parse never panics, and that whatever it accepts
// formats back to exactly the input (so there is one text per cursor).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"3f2a9c01-1-0-1", "3f2a9c01-4294967295-9223372036854775807-9223372036854775807",
		"3f2a9c01-01-0-1", "", "-", "---", "3f2a9c01-1-0-1-1", "x_1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := replay.Parse(s)
		if err != nil {
			if !errors.Is(err, replay.ErrMalformed) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrMalformed", s, err)
			}
			return
		}
		if c.String() != s {
			t.Fatalf("Parse(%q) = %+v, which formats as %q", s, c, c.String())
		}
	})
}

func BenchmarkParse(b *testing.B) {
	s := replay.Cursor{Tag: replay.Tag(testToken), Generation: 4, Stream: 12, Sequence: 123456789}.String()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := replay.Parse(s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFormat(b *testing.B) {
	c := replay.Cursor{Tag: replay.Tag(testToken), Generation: 4, Stream: 12, Sequence: 123456789}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = c.AppendText(buf[:0])
	}
}

func BenchmarkDecide(b *testing.B) {
	tag := replay.Tag(testToken)
	in := replay.Input{
		HasSessionID: true,
		Session:      replay.Session{Status: replay.Live, Tag: tag, Generation: 4, Floor: 10, HWM: 200000},
		LastEventID:  replay.Cursor{Tag: tag, Generation: 4, Stream: 12, Sequence: 123456}.String(),
		At:           &replay.EventAt{Found: true, Stream: 12},
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := replay.Decide(in); d.Outcome != replay.Replay {
			b.Fatal(d.Message())
		}
	}
}

// TestGenerationMismatchMessage: a cursor of an older generation is told
// the state was re-created; one of a generation above the live one (never
// issued: forged, or from a store that lost data) is told no such
// generation was issued, not that the state was re-created.
func TestGenerationMismatchMessage(t *testing.T) {
	tag := replay.Tag("token")
	for _, tc := range []struct {
		gen  uint64
		want string
	}{
		{3, "cursor generation 3 != live generation 4: the session's state was re-created, refusing cross-generation replay; " +
			"the requests the stream carried are lost (error.data.lostRequests lists them, when known): send them again, or initialize a new session"},
		{99, "cursor generation 99 > live generation 4: no such generation was issued, so the store lost events it had confirmed " +
			"(restored from a backup?) or the cursor was not issued here; refusing cross-generation replay; generation 4 ends, " +
			"and the session continues above generation 99: it does not know which requests the stream carried, nor whether " +
			"their calls finished: check each call's effect before sending it again"},
	} {
		d := replay.Decide(replay.Input{
			HasSessionID: true,
			Session:      replay.Session{Status: replay.Live, Tag: tag, Generation: 4, Floor: 10, HWM: 20},
			LastEventID:  fmt.Sprintf("%s-%d-2-15", tag, tc.gen),
		})
		if d.Outcome != replay.GenerationMismatch || d.Message() != tc.want {
			t.Errorf("generation %d: %v %q, want generation_mismatch %q", tc.gen, d.Outcome.Reason(), d.Message(), tc.want)
		}
	}
}

// TestCause: the cause of a 409 is its message without the advice of a
// server that cannot tell which requests are lost, the part a server that
// can tell writes after it (transport); every other outcome's cause is its
// message.
func TestCause(t *testing.T) {
	s := replay.Session{Status: replay.Live, Generation: 4, Floor: 10, HWM: 20}
	for _, tc := range []struct {
		d            replay.Decision
		cause, after string
	}{
		{replay.Decision{Outcome: replay.GenerationMismatch, Session: s, Cursor: replay.Cursor{Generation: 3}},
			"cursor generation 3 != live generation 4: the session's state was re-created, refusing cross-generation replay",
			"; the requests the stream carried are lost (error.data.lostRequests lists them, when known): send them again, or initialize a new session"},
		{replay.Decision{Outcome: replay.GenerationMismatch, Session: s, Cursor: replay.Cursor{Generation: 5}},
			"cursor generation 5 > live generation 4: no such generation was issued, so the store lost events it had confirmed " +
				"(restored from a backup?) or the cursor was not issued here; refusing cross-generation replay",
			"; generation 4 ends, and the session continues above generation 5: it does not know which requests the stream " +
				"carried, nor whether their calls finished: check each call's effect before sending it again"},
		{replay.Decision{Outcome: replay.CursorCompacted, Session: s, Cursor: replay.Cursor{Sequence: 9}},
			"cursor sequence 9 is below the replay floor 10: events were compacted; the stream cannot be resumed",
			": send its requests again, or initialize a new session"},
		{replay.Decision{Outcome: replay.CursorCompacted, Session: s, Cursor: replay.Cursor{Sequence: 12}, Detail: "the log is gone"},
			"the log is gone; the stream cannot be resumed",
			" and its requests are lost: send them again, or initialize a new session"},
		{replay.Decision{Outcome: replay.CursorAhead, Session: s, Cursor: replay.Cursor{Sequence: 21}},
			"cursor sequence 21 is above the high-water mark 20: refusing to clamp; no event above the high-water mark was ever sent, " +
				"so the store lost events it had confirmed (restored from a backup?) or the cursor was not issued here",
			"; generation 4 ends, and the session continues at the next generation: the stream cannot be resumed"},
	} {
		if got := tc.d.Cause(); got != tc.cause {
			t.Errorf("%s: Cause() = %q, want %q", tc.d.Outcome.Reason(), got, tc.cause)
		}
		if got, want := tc.d.Message(), tc.cause+tc.after; got != want {
			t.Errorf("%s: Message() = %q, want %q", tc.d.Outcome.Reason(), got, want)
		}
	}
}

// TestOutcomeReasons pins every final outcome's reason word and status, the
// values clients and alerting rules match on.
func TestOutcomeReasons(t *testing.T) {
	for _, tc := range []struct {
		o      replay.Outcome
		reason replay.Reason
		status int
	}{
		{replay.Replay, "replay", 200},
		{replay.SessionRequired, "session_required", 400},
		{replay.SessionNotFound, "session_not_found", 404},
		{replay.CursorMalformed, "cursor_malformed", 400},
		{replay.GenerationMismatch, "generation_mismatch", 409},
		{replay.CursorCompacted, "cursor_compacted", 409},
		{replay.CursorAhead, "cursor_ahead", 400},
		{replay.NeedEvent, "", 0},
	} {
		if got := tc.o.Reason(); got != tc.reason {
			t.Errorf("outcome %d: reason %q, want %q", tc.o, got, tc.reason)
		}
		if got := tc.o.HTTPStatus(); got != tc.status {
			t.Errorf("outcome %d: status %d, want %d", tc.o, got, tc.status)
		}
	}
}
