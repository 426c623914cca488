package engine_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
)

// TestStateRule runs testdata/state: every inbound method and its effect on
// a session's State (Fold), and the messages that restore a State in a new
// engine session (Restore).
func TestStateRule(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var st engine.State
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "state":
				st = decodeState(t, d)
				return ""
			case "fold":
				return runFold(t, d, &st)
			case "restore":
				return runRestore(t, d, st)
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
				return ""
			}
		})
	})
}

// decodeState reads d's input as a State in its stored JSON form; no input
// is State{}.
func decodeState(t *testing.T, d *datadriven.TestData) engine.State {
	t.Helper()
	var st engine.State
	if strings.TrimSpace(d.Input) == "" {
		return st
	}
	if err := json.Unmarshal([]byte(d.Input), &st); err != nil {
		t.Fatalf("%s: state: %v", d.Pos, err)
	}
	return st
}

// runFold folds the message d describes into *st: `fold call=METHOD` is a
// request with ID 1, `fold notify=METHOD` a notification. Input lines:
// `params JSON`, and for a call `result JSON` or `error CODE MESSAGE` (no
// such line: not answered yet). It prints ignored (ChangesState is false),
// unchanged or changed, then the state after, as stored.
func runFold(t *testing.T, d *datadriven.TestData, st *engine.State) string {
	req := &jsonrpc.Request{}
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "call":
			req.ID, _ = jsonrpc.MakeID(float64(1))
			req.Method = arg.Vals[0]
		case "notify":
			req.Method = arg.Vals[0]
		default:
			t.Fatalf("%s: unknown argument %q", d.Pos, arg.Key)
		}
	}
	var resp *jsonrpc.Response
	for line := range strings.Lines(d.Input) {
		key, val, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch key {
		case "params":
			req.Params = json.RawMessage(val)
		case "result":
			resp = &jsonrpc.Response{ID: req.ID, Result: json.RawMessage(val)}
		case "error":
			code, msg, _ := strings.Cut(val, " ")
			n, err := strconv.ParseInt(code, 10, 64)
			if err != nil {
				t.Fatalf("%s: error code %q: %v", d.Pos, code, err)
			}
			resp = &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: n, Message: msg}}
		default:
			t.Fatalf("%s: unknown input line %q", d.Pos, line)
		}
	}
	before := encodeState(t, *st)
	next, changed := st.Fold(req, resp)
	if after := encodeState(t, *st); after != before {
		t.Fatalf("%s: Fold modified its receiver: %s, then %s", d.Pos, before, after)
	}
	outcome := "unchanged"
	switch {
	case !engine.ChangesState(req):
		outcome = "ignored"
		if changed {
			t.Errorf("%s: ChangesState is false, yet Fold changed the state", d.Pos)
		}
	case changed:
		outcome = "changed"
	}
	if changed == next.Equal(*st) {
		t.Errorf("%s: Fold reports changed=%v for %s after %s", d.Pos, changed, encodeState(t, next), before)
	}
	*st = next
	return outcome + "\n" + encodeState(t, next) + "\n"
}

// runRestore prints the messages that restore st in an engine session
// holding the state in d's input (none: a fresh session), one per line as
// sent. From a fresh session it also checks that folding the messages,
// each call answered with a result (initialize's naming st's protocol
// version), gives st back.
func runRestore(t *testing.T, d *datadriven.TestData, st engine.State) string {
	from := decodeState(t, d)
	msgs := st.Restore(from)
	var b strings.Builder
	got := from
	for _, m := range msgs {
		data, err := jsonrpc.EncodeMessage(m)
		if err != nil {
			t.Fatalf("%s: encode %s: %v", d.Pos, m.Method, err)
		}
		fmt.Fprintf(&b, "%s\n", data)
		var resp *jsonrpc.Response
		if m.IsCall() {
			resp = &jsonrpc.Response{ID: m.ID, Result: json.RawMessage(`{}`)}
			if m.Method == "initialize" {
				resp.Result = json.RawMessage(fmt.Sprintf(`{"protocolVersion":%q}`, st.ProtocolVersion))
			}
		}
		got, _ = got.Fold(m, resp)
	}
	if len(msgs) > 0 && from.Equal(engine.State{}) && !got.Equal(st) {
		t.Errorf("%s: folding the restore messages gives %s, want %s", d.Pos, encodeState(t, got), encodeState(t, st))
	}
	return b.String()
}

func encodeState(t *testing.T, st engine.State) string {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
