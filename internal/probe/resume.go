// Check resume-exact. Rule (MCP 2025-11-25, "Resumability and
// Redelivery"; DESIGN.md, "Delivery rules"): GET with Last-Event-ID replays the messages
// sent after that event on its stream, exactly: a call cut and resumed
// delivers the same messages as an uncut call, none missing and none
// repeated.

package probe

import (
	"context"
	"fmt"
)

func checkResumeExact(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	s, req, before, statuses, err := e.cutCall(ctx, "probe-resume")
	if err != nil {
		return failed(statuses, err, "POST tools/call")
	}
	cursor := lastCursor(before)
	if cursor == "" {
		return Result{Verdict: Fail, Statuses: statuses, Observed: "no event before the cut carried an ID: the stream cannot be resumed"}
	}
	rs, err := s.resume(ctx, cursor)
	if err != nil {
		return failed(statuses, err, "GET with Last-Event-ID %s", cursor)
	}
	statuses = append(statuses, rs.status)
	after, err := readToResponse(ctx, rs, req.ID)
	if err != nil {
		return failed(statuses, err, "resumed stream after %d messages", len(messagesOf(after)))
	}
	all := append(before, after...)
	nb, na, rep := len(messagesOf(before)), len(messagesOf(after)), repeats(all)
	if diff := compare(signatures(all), e.base.sigs); diff != "" || rep > 0 {
		return Result{Verdict: Fail, Statuses: statuses,
			Observed: fmt.Sprintf("cut after %d messages, resumed %d more: %s; %d repeated IDs", nb, na, orSame(diff), rep)}
	}
	return Result{Verdict: Pass, Statuses: statuses,
		Observed: fmt.Sprintf("cut after %d messages, resumed the other %d: same as the uncut call, none repeated", nb, na)}
}

func orSame(diff string) string {
	if diff == "" {
		return "same messages as the uncut call"
	}
	return diff
}
