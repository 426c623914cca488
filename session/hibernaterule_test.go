package session_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/session"
)

// TestHibernateRules runs testdata/hibernate: the rules of hibernation,
// pure (session/hibernaterule.go). Commands:
//
//	choose engine=E [initialized] busy=N idle=DUR after=DUR [room]
//	    whether the sweep (or, with room, the making of room for another
//	    session) hibernates such a session: "hibernate" or "keep"
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
			var busy int
			var idle, after string
			d.ScanArgs(t, "busy", &busy)
			d.ScanArgs(t, "idle", &idle)
			d.ScanArgs(t, "after", &after)
			if session.MayHibernate(d.HasArg("initialized"), busy, duration(t, d, idle), duration(t, d, after), eng, d.HasArg("room")) {
				return "hibernate\n"
			}
			return "keep\n"
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
