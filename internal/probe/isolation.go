// Check stream-isolation. Rule (MCP 2025-11-25, "Resumability and
// Redelivery"): resuming one stream never replays messages that belong to
// another stream of the same session.

package probe

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func checkStreamIsolation(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	// A server told to keep fewer events than the two calls make must
	// compact call A's cursor, or end a stream whose reader it outran:
	// that is retention, not a failure of isolation, so the check cannot
	// judge.
	if made := 2 * len(e.base.events); e.cfg.RetentionEvents > 0 && made > e.cfg.RetentionEvents {
		return Result{Verdict: NA, Observed: fmt.Sprintf(
			"two calls make about %d events, more than --retention-events %d: raise it or use a shorter call", made, e.cfg.RetentionEvents)}
	}
	s, err := e.p.initialize(ctx)
	if err != nil {
		return failed(nil, err, "initialize")
	}
	reqA, err := e.p.callRequest(e.cfg.Tool, e.cfg.Args, "probe-isolation-a")
	if err != nil {
		return failed(nil, err, "tools/call")
	}
	reqB, err := e.p.callRequest(e.cfg.Tool, e.cfg.Args, "probe-isolation-b")
	if err != nil {
		return failed(nil, err, "tools/call")
	}
	stA, err := s.call(ctx, reqA)
	if err != nil {
		return failed(nil, err, "POST tools/call A")
	}
	stB, err := s.call(ctx, reqB)
	if err != nil {
		stA.close()
		return failed([]int{stA.status}, err, "POST tools/call B")
	}
	statuses := []int{stA.status, stB.status}
	beforeA, err := readFirst(ctx, stA, len(e.base.sigs)/2)
	stA.close()
	if err != nil {
		stB.close()
		return failed(statuses, err, "call A before the cut")
	}
	sleep(ctx, settle)
	evsB, err := readToResponse(ctx, stB, reqB.ID)
	if err != nil {
		return failed(statuses, err, "call B")
	}
	cursor := lastCursor(beforeA)
	if cursor == "" {
		return Result{Verdict: Fail, Statuses: statuses, Observed: "no event of call A carried an ID: the stream cannot be resumed"}
	}
	rs, err := s.resume(ctx, cursor)
	if err != nil {
		return failed(statuses, err, "GET with call A's cursor")
	}
	statuses = append(statuses, rs.status)
	afterA, err := readToResponse(ctx, rs, reqA.ID)
	if err != nil {
		return failed(statuses, err, "call A's resumed stream")
	}
	idsB := map[string]bool{}
	for _, ev := range messagesOf(evsB) {
		if ev.id != "" {
			idsB[ev.id] = true
		}
	}
	foreign := 0
	for _, ev := range messagesOf(afterA) {
		tok, isProgress := progressToken(ev.msg)
		r, isResp := ev.msg.(*jsonrpc.Response)
		if idsB[ev.id] || (isProgress && tok == "probe-isolation-b") || (isResp && r.ID == reqB.ID) {
			foreign++
		}
	}
	all := append(beforeA, afterA...)
	diff := compare(signatures(all), e.base.sigs)
	obs := fmt.Sprintf("two calls on one session; call A cut after %d messages, resumed %d more, %d of them call B's",
		len(messagesOf(beforeA)), len(messagesOf(afterA)), foreign)
	if foreign > 0 || diff != "" {
		if diff != "" {
			obs += "; " + diff
		}
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs}
	}
	return Result{Verdict: Pass, Statuses: statuses, Observed: obs}
}
