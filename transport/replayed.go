// replayed.go holds the measure of a resumed stream's replay: the events
// it writes up to the high-water mark its resume found, and the time from
// the decision until the reader has passed that mark.

package transport

import (
	"time"

	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/store"
)

// replayed measures a resumed stream's replay: the events up to the
// high-water mark the resume found (to), and the time from the resume's
// decision (at) until the reader has passed it
// (tidemark_replay_duration_seconds). A zero to means there is nothing to
// measure (not a resumed stream), or it has been recorded.
type replayed struct {
	to uint64
	at time.Time
	n  int
}

// count adds the events of evs up to r.to, then checks the reader's
// position pos.
func (r *replayed) count(rec metrics.Transport, evs []store.Event, pos uint64) {
	if r.to == 0 {
		return
	}
	for i := range evs {
		if evs[i].Seq <= r.to {
			r.n++
		}
	}
	r.check(rec, pos)
}

// check records the replay once pos has reached r.to.
func (r *replayed) check(rec metrics.Transport, pos uint64) {
	if r.to == 0 || pos < r.to {
		return
	}
	rec.Replayed(r.n, time.Since(r.at))
	r.to = 0
}
