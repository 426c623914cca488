// Check priming. Rule (MCP 2025-11-25, basic/transports, SEP-1699): an SSE
// stream starts with a priming event, an event with an ID and empty data,
// so that the client holds a cursor to resume from before the first message
// arrives.

package probe

import (
	"context"
	"fmt"
	"net/http"
)

func checkPriming(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	if v := e.base.sess.version; v < ProtocolVersion {
		return Result{Verdict: NA, Statuses: []int{http.StatusOK},
			Observed: "the server negotiated " + v + "; priming events begin with 2025-11-25"}
	}
	first := e.base.events[0]
	if first.id != "" && first.priming() {
		obs := fmt.Sprintf("first event: id %s, empty data", first.id)
		if first.retry > 0 {
			obs += fmt.Sprintf(", retry %dms", first.retry.Milliseconds())
		}
		return Result{Verdict: Pass, Statuses: []int{http.StatusOK}, Observed: obs}
	}
	return Result{Verdict: Fail, Statuses: []int{http.StatusOK},
		Observed: fmt.Sprintf("first event: id %q with %d bytes of data, not a priming event", first.id, len(first.data))}
}
