// lease_test.go holds the driver of testdata/lease, which tests the lease
// rules (Leases, lease.go) on their own: given a record, the time and the
// store's answers, what a replica decides.

package fleet_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// TestLeaseRules runs testdata/lease. Times are offsets from an
// epoch (+10s), "none" is the zero time (no lease). Commands:
//
//	rules owner=O lease=DUR                  the replica's identity and lease
//	lookup owner=O gen=G lease=T now=T [since=T] [ended=REASON]
//	                                         a replica that does not hold the
//	                                         session meets its record; its
//	                                         store answered again at since
//	                                         after a break (default none); it
//	                                         saw the generation end itself,
//	                                         for REASON (default: it did not)
//	contact                                  what a replica sees of its store:
//	T answered|unanswered                    one line per call, each printed
//	                                         with since (Contact.Answering)
//	serve lease=T now=T                      a generation it holds serves a request
//	renewed err=none|fenced|ended|not_found|unavailable
//	                                         what a renewal's (or append's) error means
//	release now=T                            the replica closes
//	await held=O/G seen=T sent=T record=O/G lease=T now=T [since=T] [json]
//	                                         a request forwarded at sent to O's
//	                                         generation G, whose lease was seen
//	                                         lapsing at seen, waits for its answer;
//	                                         the record now says record, lease
func TestLeaseRules(t *testing.T) {
	epoch := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(s string) time.Time {
		if s == "none" {
			return time.Time{}
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("time %q: %v", s, err)
		}
		return epoch.Add(d)
	}
	show := func(tm time.Time) string {
		if tm.IsZero() {
			return "none"
		}
		return "+" + tm.Sub(epoch).String()
	}
	var lr fleet.Leases
	since := func(d *datadriven.TestData) time.Time {
		if !d.HasArg("since") {
			return time.Time{}
		}
		var s string
		d.ScanArgs(t, "since", &s)
		return at(s)
	}
	datadriven.RunTest(t, "testdata/lease", func(t *testing.T, d *datadriven.TestData) string {
		str := func(key string) string {
			var s string
			d.ScanArgs(t, key, &s)
			return s
		}
		switch d.Cmd {
		case "rules":
			ttl, err := time.ParseDuration(str("lease"))
			if err != nil {
				t.Fatal(err)
			}
			lr = fleet.Leases{Owner: str("owner"), TTL: ttl}
			return ""
		case "lookup":
			var gen uint64
			d.ScanArgs(t, "gen", &gen)
			rec := store.Record{Token: "tok", Owner: str("owner"), Generation: gen, LeaseUntil: at(str("lease"))}
			now := at(str("now"))
			if re := lr.Remote(rec, now, since(d)); re != nil {
				return fmt.Sprintf("remote: owner %s, generation %d, lease until %s\n", re.Owner, re.Generation, show(re.LeaseUntil))
			}
			return fmt.Sprintf("claim generation %d, lease until %s; previous generation over: %s\n",
				gen+1, show(lr.Grant(now)), lr.TakeoverReason(rec, endedHere(t, d)))
		case "serve":
			now := at(str("now"))
			if lr.MustRenew(at(str("lease")), now) {
				return fmt.Sprintf("renew first, lease until %s\n", show(lr.Grant(now)))
			}
			return "serve\n"
		case "renewed":
			errs := map[string]error{
				"none": nil, "fenced": &store.FencedError{Op: "renew", Have: 1, Want: 2},
				"ended": &store.EndedError{Reason: store.EndDeleted}, "not_found": store.ErrNotFound,
				"unavailable": store.ErrUnavailable,
			}
			err, ok := errs[str("err")]
			if !ok {
				t.Fatalf("unknown err %q", str("err"))
			}
			switch reason := fleet.LostReason(err); {
			case err == nil:
				return "kept\n"
			case reason != "":
				return "drop the generation: " + reason.String() + "\n"
			default:
				return "keep the generation, renew again next round\n"
			}
		case "contact":
			var c fleet.Contact
			var out strings.Builder
			for line := range strings.Lines(strings.TrimSpace(d.Input)) {
				tm, what, _ := strings.Cut(strings.TrimSpace(line), " ")
				if what != "answered" && what != "unanswered" {
					t.Fatalf("contact line %q: want T answered|unanswered", line)
				}
				now := at(tm)
				c = lr.Heard(c, what == "answered", now)
				fmt.Fprintf(&out, "%s %s: since %s\n", tm, what, show(c.Answering(now)))
			}
			return out.String()
		case "release":
			return "lease until " + show(lr.Release(at(str("now")))) + "\n"
		case "await":
			ownerGen := func(key string) (string, uint64) {
				o, g, ok := strings.Cut(str(key), "/")
				n, err := strconv.ParseUint(g, 10, 64)
				if !ok || err != nil {
					t.Fatalf("%s=%q: want OWNER/GENERATION", key, str(key))
				}
				return o, n
			}
			owner, gen := ownerGen("held")
			held := fleet.RemoteError{Token: "tok", Owner: owner, Generation: gen, LeaseUntil: at(str("seen"))}
			owner, gen = ownerGen("record")
			rec := store.Record{Token: "tok", Owner: owner, Generation: gen, LeaseUntil: at(str("lease"))}
			w, until := lr.Await(held, rec, at(str("sent")), at(str("now")), since(d), d.HasArg("json"))
			if w == fleet.WaitOn {
				return fmt.Sprintf("%s until %s\n", w, show(until))
			}
			return w.String() + "\n"
		}
		t.Fatalf("unknown command %q", d.Cmd)
		return ""
	})
}

// endedHere returns the value of d's ended argument, the reason the
// lookup's process saw the previous generation end itself ("" without it).
func endedHere(t *testing.T, d *datadriven.TestData) replay.Reason {
	if !d.HasArg("ended") {
		return ""
	}
	var s string
	d.ScanArgs(t, "ended", &s)
	return replay.Reason(s)
}
