package session_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// TestHibernateRules runs testdata/hibernate: the rules of hibernation,
// pure (session/hibernaterule.go). Commands:
//
//	choose engine=E [initialized] busy=N [served=S] idle=DUR after=DUR [room] [handover] [failures=F since=DUR]
//	    whether the sweep (or, with room, the making of room for another
//	    session; with handover, a graceful shutdown) hibernates such a
//	    session, busy with N things of which S (default 0) are requests
//	    already served whose hold is not released yet, whose last F
//	    hibernations the store refused, the latest DUR ago: "hibernate" or
//	    "keep"
//	retry engine=E failures=N after=DUR
//	    how long the sweep waits after the N-th refused hibernation in a
//	    row
//	failed engine=E err=ERR
//	    what becomes of a session whose hibernation failed with ERR
//	    (unavailable, lost, fenced, ended or not_found): "stays awake" or
//	    "generation ends"
//	wake engine=E owner=O [exact]
//	    at which generation a session whose record has owner O (none: "")
//	    and the exact mark or not wakes: "same generation" or "generation+1"
//
// E is never, exact or lossy (engine.Hibernation).
func TestHibernateRules(t *testing.T) {
	datadriven.RunTest(t, "testdata/hibernate", func(t *testing.T, d *datadriven.TestData) string {
		engines := map[string]engine.Hibernation{"never": engine.HibernateNever, "exact": engine.HibernateExact, "lossy": engine.HibernateLossy}
		var name string
		d.ScanArgs(t, "engine", &name)
		eng, ok := engines[name]
		if !ok {
			d.Fatalf(t, "engine %q: want never, exact or lossy", name)
		}
		switch d.Cmd {
		case "choose":
			var busy, served int
			var idle, after string
			d.ScanArgs(t, "busy", &busy)
			if d.HasArg("served") {
				d.ScanArgs(t, "served", &served)
			}
			d.ScanArgs(t, "idle", &idle)
			d.ScanArgs(t, "after", &after)
			failures, since := 0, "0s"
			if d.HasArg("failures") {
				d.ScanArgs(t, "failures", &failures)
				d.ScanArgs(t, "since", &since)
			}
			if session.MayHibernate(d.HasArg("initialized"), busy, served, duration(t, d, idle), duration(t, d, after), eng, d.HasArg("room"), d.HasArg("handover"), failures, duration(t, d, since)) {
				return "hibernate\n"
			}
			return "keep\n"
		case "retry":
			var failures int
			var after string
			d.ScanArgs(t, "failures", &failures)
			d.ScanArgs(t, "after", &after)
			return session.HibernateRetry(failures, duration(t, d, after)).String() + "\n"
		case "failed":
			var name string
			d.ScanArgs(t, "err", &name)
			errs := map[string]error{
				"unavailable": fmt.Errorf("redis store: bounds session X: %w", store.ErrUnavailable),
				"lost":        &store.LostError{Token: "X", Generation: 1, Seq: 3, Err: store.ErrUnavailable},
				"fenced":      &store.FencedError{Token: "X", Op: "hibernate", Have: 1, Want: 2},
				"ended":       &store.EndedError{Token: "X", Reason: store.EndDeleted},
				"not_found":   store.ErrNotFound,
			}
			err, ok := errs[name]
			if !ok {
				d.Fatalf(t, "err %q: want unavailable, lost, fenced, ended or not_found", name)
			}
			if session.KeepsAwake(err) {
				return "stays awake\n"
			}
			return "generation ends\n"
		case "wake":
			var owner string
			d.ScanArgs(t, "owner", &owner)
			if session.WakesAtSameGeneration(owner, d.HasArg("exact"), eng) {
				return "same generation\n"
			}
			return "generation+1\n"
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func duration(t *testing.T, d *datadriven.TestData, s string) time.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s", fmt.Errorf("duration %q: %w", s, err))
	}
	return v
}
