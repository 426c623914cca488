package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"regexp"
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
// a resume takes about a millisecond on loopback, and the messages the
// original connection delivers in that time are legitimately in the
// replay too, so closer messages would be counted as sent twice.
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

// readToResponse reads st until the response to id (included), closing
// it; it fails if the answer ends first or ctx ends.
func readToResponse(ctx context.Context, st *stream, id jsonrpc.ID) ([]event, error) {
	defer st.close()
	stop := context.AfterFunc(ctx, st.close)
	defer stop()
	var evs []event
	for {
		e, err := st.next()
		if err != nil {
			if ctx.Err() != nil {
				return evs, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("the stream ended without the response")
			}
			return evs, err
		}
		evs = append(evs, e)
		if r, ok := e.msg.(*jsonrpc.Response); ok && r.ID == id {
			return evs, nil
		}
	}
}

// readMessages reads st until n message events have come (priming events
// not counted) and returns every event read; the stream stays open.
func readMessages(ctx context.Context, st *stream, n int) ([]event, error) {
	stop := context.AfterFunc(ctx, st.close)
	defer stop()
	var evs []event
	for got := 0; got < n; {
		e, err := st.next()
		if err != nil {
			if ctx.Err() != nil {
				return evs, ctx.Err()
			}
			return evs, fmt.Errorf("the stream ended after %d of %d messages: %w", got, n, err)
		}
		evs = append(evs, e)
		if e.msg != nil {
			got++
		}
	}
	return evs, nil
}

// signatures summarizes the messages of evs, in order, in a form that does
// not depend on request IDs or progress tokens: "progress 3",
// "notifications/message", "response", "error response".
func signatures(evs []event) []string {
	var sigs []string
	for _, e := range evs {
		if e.msg != nil {
			sigs = append(sigs, signature(e.msg))
		}
	}
	return sigs
}

func signature(m jsonrpc.Message) string {
	switch m := m.(type) {
	case *jsonrpc.Request:
		if m.Method == "notifications/progress" {
			var p struct {
				Progress json.Number `json:"progress"`
			}
			json.Unmarshal(m.Params, &p)
			return "progress " + p.Progress.String()
		}
		return m.Method
	case *jsonrpc.Response:
		if m.Error != nil {
			return "error response"
		}
		return "response"
	}
	return "?"
}

// progressToken returns the token of a progress notification.
func progressToken(m jsonrpc.Message) (string, bool) {
	r, ok := m.(*jsonrpc.Request)
	if !ok || r.Method != "notifications/progress" {
		return "", false
	}
	var p struct {
		Token any `json:"progressToken"`
	}
	if json.Unmarshal(r.Params, &p) != nil {
		return "", false
	}
	return fmt.Sprint(p.Token), true
}

// lastCursor returns the ID of the last event of evs that has one.
func lastCursor(evs []event) string {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].id != "" {
			return evs[i].id
		}
	}
	return ""
}

// repeats counts message events of evs whose ID came before (priming
// events, which may echo the cursor, are not counted).
func repeats(evs []event) int {
	seen := map[string]bool{}
	n := 0
	for _, e := range evs {
		if e.msg == nil || e.id == "" {
			continue
		}
		if seen[e.id] {
			n++
		}
		seen[e.id] = true
	}
	return n
}

// messagesOf returns the events of evs that carry a message.
func messagesOf(evs []event) []event {
	var out []event
	for _, e := range evs {
		if e.msg != nil {
			out = append(out, e)
		}
	}
	return out
}

var lastNumber = regexp.MustCompile(`[0-9]+`)

// advance returns cursor with its last decimal number increased by one
// million: for the cursors of Tidemark (tag-generation-stream-sequence),
// the go-sdk (stream_index) and most others, a cursor beyond every event
// the session has. ok is false when the cursor holds no number.
func advance(cursor string) (string, bool) {
	locs := lastNumber.FindAllStringIndex(cursor, -1)
	if len(locs) == 0 {
		return "", false
	}
	l := locs[len(locs)-1]
	n, _ := new(big.Int).SetString(cursor[l[0]:l[1]], 10)
	n.Add(n, big.NewInt(1_000_000))
	return cursor[:l[0]] + n.String() + cursor[l[1]:], true
}
