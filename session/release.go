// release.go holds the end of a generation's live state in this process:
// its engine session closes, and the server spans of the calls it leaves
// in flight end, since no answer will end them.

package session

import (
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// close closes l's engine session, then ends the spans of the calls still
// in flight on it with reason (why the generation ended here).
func (l *Live) close(reason replay.Reason) {
	l.eng.Close()
	l.releaseSpans(reason)
}

// releaseSpans ends the span of every call in flight on l with reason
// (tracing.Span.EndReleased). The calls stay registered, so an answer
// the engine still sends is routed as before; its span is gone from the
// call, so each span ends once.
func (l *Live) releaseSpans(reason replay.Reason) {
	if l.reg.opts.Tracer == nil {
		return
	}
	var spans []tracing.Span
	l.mu.Lock()
	for id, c := range l.calls {
		spans = append(spans, c.span) // a span ended already is the zero Span, which EndReleased ignores
		c.span = tracing.Span{}
		l.calls[id] = c
	}
	l.mu.Unlock()
	endReleased(spans, reason)
}

// endReleased ends spans, of calls that get no answer, with reason.
func endReleased(spans []tracing.Span, reason replay.Reason) {
	for _, s := range spans {
		s.EndReleased(reason)
	}
}

// storeReason returns the reason a store error gives a call it stops:
// fenced or session_not_found when the generation is over (lostReason),
// else unavailable.
func storeReason(err error) replay.Reason {
	if r := fleet.LostReason(err); r != "" {
		return r
	}
	return replay.ReasonUnavailable
}
