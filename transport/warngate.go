// warngate.go holds how often a refusal of the server's own (5xx) is
// logged: a store outage refuses every request, and one WARN line per
// request would flood the log with lines that say the same thing.

package transport

import (
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
)

// warnInterval is the least time between two WARN lines of one refusal
// reason; the lines between are counted in the next one's suppressed.
const warnInterval = time.Second

// warnGate lets one WARN line per reason through per warnInterval and
// counts the ones it holds back.
type warnGate struct {
	now func() time.Time

	mu      sync.Mutex
	reasons map[replay.Reason]*warnState
}

type warnState struct {
	last       time.Time // when the last line went through
	suppressed int       // lines held back since
}

func newWarnGate(now func() time.Time) *warnGate {
	return &warnGate{now: now, reasons: make(map[replay.Reason]*warnState)}
}

// pass reports whether a WARN line of reason goes through now, and how
// many of that reason's lines were held back since the last one that did.
// A nil gate lets every line through.
func (g *warnGate) pass(reason replay.Reason) (ok bool, suppressed int) {
	if g == nil {
		return true, 0
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.reasons[reason]
	if st == nil {
		st = &warnState{}
		g.reasons[reason] = st
	}
	if !st.last.IsZero() && now.Sub(st.last) < warnInterval {
		st.suppressed++
		return false, 0
	}
	suppressed = st.suppressed
	st.last, st.suppressed = now, 0
	return true, suppressed
}
