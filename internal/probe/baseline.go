// The baseline: one uncut run of the tool call, whose messages every cut
// and resumed run must reproduce, and the conditions under which it can
// serve as that reference.

package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// baseline is one uncut run of the tool call: what every resumed run must
// reproduce.
type baseline struct {
	sess   *session
	sse    bool
	events []event
	sigs   []string // signatures of its messages, in order
	// firstMsgCursor is the ID of the first message event; lastCursor the
	// ID of the last event.
	firstMsgCursor, lastCursor string
	// gap is the call's time from its POST to its response divided by its
	// messages: about the tool's delay between messages.
	gap time.Duration
}

// minGap is the least baseline gap between messages at which the checks
// with two readers of one stream (takeover, concurrent-resume) can judge:
// a resume takes about a millisecond on loopback, and the original
// connection delivers the messages of that time before the takeover (the
// replay repeats them, see replayed), so with closer messages the original
// would often deliver the call's response before any resume took over.
const minGap = 2 * time.Millisecond

// runBaseline opens a session and runs the tool call to its response.
func runBaseline(ctx context.Context, p *peer, cfg Config) (*baseline, error) {
	s, err := p.initialize(ctx)
	if err != nil {
		return nil, err
	}
	req, err := p.callRequest(cfg.Tool, cfg.Args, "probe-baseline")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	st, err := s.call(ctx, req)
	if err != nil {
		return nil, err
	}
	evs, err := readToResponse(ctx, st, req.ID)
	if err != nil {
		return nil, fmt.Errorf("tools/call %s: %w", cfg.Tool, err)
	}
	took := time.Since(start)
	if err := usableBaseline(evs, cfg.Tool); err != nil {
		return nil, err
	}
	b := &baseline{sess: s, sse: st.sse, events: evs, sigs: signatures(evs),
		gap: took / time.Duration(max(1, len(messagesOf(evs))))}
	for _, e := range evs {
		if e.msg != nil && e.id != "" && b.firstMsgCursor == "" {
			b.firstMsgCursor = e.id
		}
		if e.id != "" {
			b.lastCursor = e.id
		}
	}
	return b, nil
}

// minBaselineMessages is how many messages the baseline call must send
// before its result: the checks cut a stream after half of them.
const minBaselineMessages = 2

// usableBaseline reports why the baseline call's events cannot serve as the
// reference of the checks: the call failed (a JSON-RPC error or a result
// with isError), or it sent too few messages to cut a stream between them.
// Judging a server by a call that failed would blame the server for the
// tool's arguments.
func usableBaseline(evs []event, tool string) error {
	resp, _ := evs[len(evs)-1].msg.(*jsonrpc.Response)
	if resp.Error != nil {
		return fmt.Errorf("tools/call %s answered with an error (%v): choose a tool and arguments that succeed (--tool, --args)", tool, resp.Error)
	}
	var res struct {
		IsError bool `json:"isError"`
	}
	if json.Unmarshal(resp.Result, &res) == nil && res.IsError {
		return fmt.Errorf("tools/call %s returned a result with isError true (%s): choose a tool and arguments that succeed (--tool, --args)", tool, resp.Result)
	}
	msgs := 0
	for _, e := range evs[:len(evs)-1] {
		if e.msg != nil {
			msgs++
		}
	}
	if msgs < minBaselineMessages {
		return fmt.Errorf("tools/call %s sent %d messages before its result; the checks need at least %d (a tool that sends progress notifications, with a progress token)", tool, msgs, minBaselineMessages)
	}
	return nil
}
