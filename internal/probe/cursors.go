// Checks cursor-ahead, cursor-malformed and foreign-cursor: cursors a
// careful server refuses. Rules: a cursor beyond the newest event is an
// error (4xx), never clamped to the high-water mark (DESIGN.md,
// "Where the rule comes from"); a cursor that does not parse answers 400, since 404 or 409
// would make the client drop a live session (DESIGN.md, "The replay
// decision"); another session's cursor is refused with a 4xx other than
// 404, never replayed, since replay validity is a function of the session,
// the generation and the cursor range (DESIGN.md, "Where the rule comes
// from").

package probe

import (
	"context"
	"fmt"
	"net/http"
)

// malformedCursor is a Last-Event-ID no server issues: no digits, no
// separators of the usual cursor formats.
const malformedCursor = "%%probe%%not%%a%%cursor%%"

func checkCursorAhead(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	ahead, ok := advance(e.base.lastCursor)
	if !ok {
		return Result{Verdict: NA, Observed: fmt.Sprintf("the server's cursors (%q) hold no number to advance", e.base.lastCursor)}
	}
	rs, err := e.base.sess.resume(ctx, ahead)
	return refusalResult(ctx, nil, rs, err, "a cursor beyond the newest event",
		func(s int) bool { return s >= 400 && s < 500 }, "want 4xx: an error, never a clamp")
}

func checkCursorMalformed(ctx context.Context, e *env) Result {
	rs, err := e.base.sess.resume(ctx, malformedCursor)
	return refusalResult(ctx, nil, rs, err, "a malformed cursor",
		func(s int) bool { return s == http.StatusBadRequest }, "want 400")
}

func checkForeignCursor(ctx context.Context, e *env) Result {
	if r, ok := e.noSession(); ok {
		return r
	}
	if r, ok := e.noStream(); ok {
		return r
	}
	cursor := e.base.firstMsgCursor
	if cursor == "" {
		cursor = e.base.lastCursor
	}
	if cursor == "" {
		return Result{Verdict: NA, Observed: "the server's events carry no IDs"}
	}
	other, err := e.p.initialize(ctx)
	if err != nil {
		return failed(nil, err, "initialize a second session")
	}
	rs, err := other.resume(ctx, cursor)
	return refusalResult(ctx, nil, rs, err, "another session's cursor",
		func(s int) bool { return s >= 400 && s < 500 && s != http.StatusNotFound },
		"want 4xx but 404: 404 tells the client its own live session is gone")
}
