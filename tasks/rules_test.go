// rules_test.go holds the drivers of testdata/rules, testdata/settle and
// testdata/gate, which test the task rules on their own.

package tasks

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// epoch is the origin of the times in the testdata: "+10s" is epoch+10s.
var epoch = time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)

// TestRules runs testdata/rules and testdata/settle. Each file is a series
// of scenarios; a scenario starts with "new" and every later command
// continues from the record the one before it left. Times are offsets from
// an epoch ("+10s"); "none" is the zero time (no lease). Commands:
//
//	rules [keep=DUR] [reruns=N]       the deployment's rules (default: none)
//	new exec=R/B [lease=T] [ttl=DUR] [poll=DUR] [owner=S] [idempotent] [upstream=ID]
//	                                  a task created at +0s (ttl 1h, poll 1s by default)
//	apply KIND now=T [gen=N] [msg=M] [lease=T] [result=X] [error=X]
//	      [input=(K,...)] [state=S] [reply=(K,...)] [by=R/B]
//	                                  an event (Rules.Apply); need-input asks
//	                                  for keys K (request "req:K"), reply
//	                                  answers task keys K ("resp:K"), by
//	                                  names the claimant (its lease is lease=)
//	settle now=T reader=R/B [exclusive] [runs] [lease=DUR]
//	                                  Rules.Settle by that reader
//	visible subject=S                 Record.VisibleTo
//
// The output of apply is the effect and the record, or "refused:" with the
// error and the record, which must be the one before the event; settle
// prints the verdict and the record.
func TestRules(t *testing.T) {
	for _, file := range []string{"testdata/rules", "testdata/settle"} {
		t.Run(file, func(t *testing.T) { runRules(t, file) })
	}
}

func runRules(t *testing.T, file string) {
	var (
		rules Rules
		rec   Record
		made  bool
	)
	datadriven.RunTest(t, file, func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "rules" && d.Cmd != "new" && !made {
			t.Fatalf("%s: %s before new", d.Pos, d.Cmd)
		}
		switch d.Cmd {
		case "rules":
			rules = Rules{Keep: durArg(t, d, "keep", 0)}
			if d.HasArg("reruns") {
				d.ScanArgs(t, "reruns", &rules.Reruns)
			}
			return ""
		case "new":
			replica, boot := who(t, strArg(t, d, "exec", ""))
			spec := Spec{
				ID: "t1", Owner: strArg(t, d, "owner", ""), Tool: "countdown", Call: []byte("call"),
				Idempotent:   d.HasArg("idempotent"),
				Executor:     Executor{Replica: replica, Boot: boot, LeaseUntil: timeArg(t, d, "lease", "none")},
				Now:          epoch,
				TTL:          durArg(t, d, "ttl", time.Hour),
				PollInterval: durArg(t, d, "poll", time.Second),
			}
			var err error
			rec, err = New(spec)
			if err != nil {
				return "refused: " + err.Error()
			}
			rec.Upstream = strArg(t, d, "upstream", "")
			made = true
			return show(rec)
		case "apply":
			if len(d.CmdArgs) == 0 {
				t.Fatalf("%s: apply needs an event kind", d.Pos)
			}
			kind, ok := ParseKind(d.CmdArgs[0].Key)
			if !ok {
				t.Fatalf("%s: unknown event kind %q", d.Pos, d.CmdArgs[0].Key)
			}
			ev := Event{Kind: kind, Message: strArg(t, d, "msg", ""), State: bytesArg(t, d, "state")}
			if d.HasArg("gen") {
				d.ScanArgs(t, "gen", &ev.Generation)
			}
			ev.Result, ev.Error = bytesArg(t, d, "result"), bytesArg(t, d, "error")
			for _, k := range listArg(d, "input") {
				if ev.Requests == nil {
					ev.Requests = map[string][]byte{}
				}
				ev.Requests[k] = []byte("req:" + k)
			}
			for _, k := range listArg(d, "reply") {
				if ev.Responses == nil {
					ev.Responses = map[string][]byte{}
				}
				ev.Responses[k] = []byte("resp:" + k)
			}
			lease := timeArg(t, d, "lease", "none")
			if kind == Renew {
				ev.LeaseUntil = lease
			}
			if by := strArg(t, d, "by", ""); by != "" {
				ev.Claimant.Replica, ev.Claimant.Boot = who(t, by)
				ev.Claimant.LeaseUntil = lease
			}
			before := show(rec)
			next, eff, err := rules.Apply(rec, ev, timeArg(t, d, "now", "+0s"))
			if err != nil {
				if got := show(next); got != before || eff != Unchanged {
					t.Fatalf("%s: a refused event changed the record (%s):\n%s\nwant\n%s", d.Pos, eff, got, before)
				}
				return "refused: " + err.Error() + "\n" + before
			}
			if eff == Unchanged && show(next) != before {
				t.Fatalf("%s: an unchanged effect changed the record:\n%s\nwant\n%s", d.Pos, show(next), before)
			}
			rec = next
			return eff.String() + "\n" + show(rec)
		case "settle":
			replica, boot := who(t, strArg(t, d, "reader", ""))
			rd := Reader{Replica: replica, Boot: boot, Exclusive: d.HasArg("exclusive"), Runs: d.HasArg("runs"),
				Lease: durArg(t, d, "lease", 0)}
			before := show(rec)
			next, v := rules.Settle(rec, timeArg(t, d, "now", "+0s"), rd)
			if (v == Keep || v == Delete) && show(next) != before {
				t.Fatalf("%s: verdict %s changed the record:\n%s\nwant\n%s", d.Pos, v, show(next), before)
			}
			rec = next
			return v.String() + "\n" + show(rec)
		case "visible":
			return fmt.Sprint(rec.VisibleTo(strArg(t, d, "subject", "")))
		}
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		return ""
	})
}

// TestGate runs testdata/gate. Each input line of a "gate" command is a
// method, a Support word and "declared" or "-" (the request did not
// declare the extension); each output line repeats it with the admission.
func TestGate(t *testing.T) {
	datadriven.RunTest(t, "testdata/gate", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "gate" {
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		var out strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 || (f[2] != "declared" && f[2] != "-") {
				t.Fatalf("%s: want METHOD SUPPORT declared|-, got %q", d.Pos, line)
			}
			s, ok := ParseSupport(f[1])
			if !ok {
				t.Fatalf("%s: unknown support %q", d.Pos, f[1])
			}
			fmt.Fprintf(&out, "%s %s %s: %s\n", f[0], f[1], f[2], Gate(f[0], s, f[2] == "declared"))
		}
		return out.String()
	})
}

// TestWords checks that every status, support and event kind reads back
// from its word, and that the terminal statuses are exactly completed,
// failed and cancelled.
func TestWords(t *testing.T) {
	var terminal []string
	for s := Working; s <= Cancelled; s++ {
		if got, ok := ParseStatus(s.String()); !ok || got != s {
			t.Errorf("ParseStatus(%q) = %v, %v", s, got, ok)
		}
		if s.Terminal() {
			terminal = append(terminal, s.String())
		}
	}
	if want := []string{"completed", "failed", "cancelled"}; !slices.Equal(terminal, want) {
		t.Errorf("terminal statuses %v, want %v", terminal, want)
	}
	if _, ok := ParseStatus("unknown"); ok {
		t.Error(`ParseStatus("unknown") succeeded`)
	}
	for s := Forbidden; s <= Required; s++ {
		if got, ok := ParseSupport(s.String()); !ok || got != s {
			t.Errorf("ParseSupport(%q) = %v, %v", s, got, ok)
		}
	}
	for k := Progress; k <= Answer; k++ {
		if got, ok := ParseKind(k.String()); !ok || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k, got, ok)
		}
	}
}

// show prints a record on one line, and its input state on a second one
// when it has requests.
func show(r Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s gen=%d executor=%s/%s lease=%s updated=%s ttl=%s",
		r.Status, r.Executor.Generation, r.Executor.Replica, r.Executor.Boot,
		at(r.Executor.LeaseUntil), at(r.Updated), r.TTL)
	if r.CancelRequested {
		b.WriteString(" cancel")
	}
	if r.Cause != NoCause {
		fmt.Fprintf(&b, " cause=%s", r.Cause)
	}
	if r.Reruns > 0 {
		fmt.Fprintf(&b, " reruns=%d", r.Reruns)
	}
	if r.Upstream != "" {
		fmt.Fprintf(&b, " upstream=%s", r.Upstream)
	}
	if r.Result != nil {
		fmt.Fprintf(&b, " result=%s", r.Result)
	}
	if r.Error != nil {
		fmt.Fprintf(&b, " error=%s", r.Error)
	}
	if r.Message != "" {
		fmt.Fprintf(&b, " msg=%q", r.Message)
	}
	if len(r.Input.Slots) > 0 {
		var answered []string
		for k, s := range r.Input.Slots {
			if s.Response != nil {
				answered = append(answered, fmt.Sprintf("%s(%s=%s)", k, s.Key, s.Response))
			}
		}
		slices.Sort(answered)
		var outstanding []string
		for _, k := range r.Outstanding() {
			s := r.Input.Slots[k]
			outstanding = append(outstanding, fmt.Sprintf("%s(%s=%s)", k, s.Key, s.Request))
		}
		fmt.Fprintf(&b, "\ninput round=%d state=%s outstanding=[%s] answered=[%s]",
			r.Input.Round, r.Input.State, strings.Join(outstanding, " "), strings.Join(answered, " "))
	}
	return b.String()
}

func at(tm time.Time) string {
	if tm.IsZero() {
		return "none"
	}
	return "+" + tm.Sub(epoch).String()
}

func strArg(t *testing.T, d *datadriven.TestData, key, def string) string {
	if !d.HasArg(key) {
		return def
	}
	var s string
	d.ScanArgs(t, key, &s)
	return s
}

func bytesArg(t *testing.T, d *datadriven.TestData, key string) []byte {
	if !d.HasArg(key) {
		return nil
	}
	return []byte(strArg(t, d, key, ""))
}

func listArg(d *datadriven.TestData, key string) []string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return a.Vals
		}
	}
	return nil
}

func durArg(t *testing.T, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	if !d.HasArg(key) {
		return def
	}
	v, err := time.ParseDuration(strArg(t, d, key, ""))
	if err != nil {
		t.Fatalf("%s: %s: %v", d.Pos, key, err)
	}
	return v
}

func timeArg(t *testing.T, d *datadriven.TestData, key, def string) time.Time {
	s := strArg(t, d, key, def)
	if s == "none" {
		return time.Time{}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %s: %v", d.Pos, key, err)
	}
	return epoch.Add(v)
}

// who splits "replica/boot".
func who(t *testing.T, s string) (replica, boot string) {
	if s == "" {
		return "", ""
	}
	replica, boot, ok := strings.Cut(s, "/")
	if !ok {
		t.Fatalf("want REPLICA/BOOT, got %q", s)
	}
	return replica, boot
}
