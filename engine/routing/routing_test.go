package routing

// The routing cases of testdata/router, run against the router alone.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestRouter runs the routing cases of testdata/router against the router
// alone, without a server. The commands:
//
//	router gen=N    a new router for generation N (every file starts with one)
//	client          each input line is a message from the client (JSON-RPC,
//	                "jsonrpc":"2.0" implied); the output says what goes to
//	                the server: "unchanged", "as <message>" when
//	                rewritten, or "dropped"
//	server [via=ID] each input line is a message from the server, which
//	                came on the stream of client call ID when via is given;
//	                the output says which client call it relates to ("call
//	                ID", or "standalone" for none), then "unchanged" or
//	                "as <message>"
//	forget id=ID    the delivery of client call ID failed
//	inflight id=ID  whether client call ID is in flight: "true" or "false"
//	state           the calls in flight (with their progress tokens), the
//	                call each progress token relates to, and the
//	                server-to-client requests in flight
//	exit            the calls the end of the server session fails, in order
//
// IDs and tokens in arguments are JSON numbers when they parse as one, and
// strings otherwise.
func TestRouter(t *testing.T) {
	var r *Router
	datadriven.RunTest(t, "testdata/router", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "router" && r == nil {
			t.Fatalf("%s: %s before router", d.Pos, d.Cmd)
		}
		switch d.Cmd {
		case "router":
			var gen uint64
			d.ScanArgs(t, "gen", &gen)
			r = New(gen)
			return ""
		case "client":
			return eachMessage(t, d, func(m jsonrpc.Message) string {
				out, ok := r.FromClient(m)
				if !ok {
					return "dropped"
				}
				return rewritten(t, m, out)
			})
		case "server":
			var via jsonrpc.ID
			if d.HasArg("via") {
				var arg string
				d.ScanArgs(t, "via", &arg)
				via = argID(t, arg)
			}
			return eachMessage(t, d, func(m jsonrpc.Message) string {
				out, related := r.FromServer(m, via)
				to := "standalone"
				if related.IsValid() {
					to = "call " + idText(related)
				}
				return to + " " + rewritten(t, m, out)
			})
		case "forget":
			var id string
			d.ScanArgs(t, "id", &id)
			r.Forget(argID(t, id))
			return ""
		case "inflight":
			var id string
			d.ScanArgs(t, "id", &id)
			return fmt.Sprintln(r.InFlight(argID(t, id)))
		case "state":
			return routerState(r)
		case "exit":
			var ids []string
			for _, id := range r.EndAll() {
				ids = append(ids, idText(id))
			}
			return "fails: " + listOrNone(ids) + "\n"
		default:
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		}
	})
}

// eachMessage decodes each input line of d as a message, adding
// "jsonrpc":"2.0", and returns the lines f gives for them.
func eachMessage(t *testing.T, d *datadriven.TestData, f func(jsonrpc.Message) string) string {
	t.Helper()
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimSpace(d.Input), "\n") {
		full := `{"jsonrpc":"2.0",` + strings.TrimPrefix(line, "{")
		m, err := jsonrpc.DecodeMessage([]byte(full))
		if err != nil {
			t.Fatalf("%s: %s: %v", d.Pos, line, err)
		}
		b.WriteString(f(m) + "\n")
	}
	return b.String()
}

// rewritten returns "unchanged" when out encodes as in does, else "as"
// and out without its "jsonrpc" member.
func rewritten(t *testing.T, in, out jsonrpc.Message) string {
	t.Helper()
	a, err := jsonrpc.EncodeMessage(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := jsonrpc.EncodeMessage(out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, b) {
		return "unchanged"
	}
	return "as {" + strings.TrimPrefix(string(b), `{"jsonrpc":"2.0",`)
}

// argID returns the ID an argument names: a number if it parses as one,
// else a string.
func argID(t *testing.T, s string) jsonrpc.ID {
	t.Helper()
	var v any = s
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		v = n
	}
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatalf("id %q: %v", s, err)
	}
	return id
}

// idText renders an ID as JSON: 3, "A".
func idText(id jsonrpc.ID) string {
	b, _ := json.Marshal(id.Raw())
	return string(b)
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ", ")
}

// routerState renders the tables of r, sorted.
func routerState(r *Router) string {
	var calls, reqs []string
	for id, tok := range r.calls {
		s := idText(id)
		if tok.IsValid() {
			s += " (progress " + idText(tok) + ")"
		}
		calls = append(calls, s)
	}
	for id, sc := range r.outCalls {
		s := fmt.Sprintf("%s = server's %s", idText(id), idText(sc.orig))
		if sc.related.IsValid() {
			s += " (call " + idText(sc.related) + ")"
		}
		reqs = append(reqs, s)
	}
	var toks []string
	for tok, id := range r.progress {
		toks = append(toks, idText(tok)+" → call "+idText(id))
	}
	slices.Sort(calls)
	slices.Sort(toks)
	slices.Sort(reqs)
	return "calls in flight: " + listOrNone(calls) + "\nprogress tokens: " + listOrNone(toks) +
		"\nserver requests in flight: " + listOrNone(reqs) + "\n"
}
