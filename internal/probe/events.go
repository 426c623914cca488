// What the checks compute from the events they read: message signatures
// that do not depend on ids, progress tokens, cursors, repeated ids, and a
// cursor advanced beyond the newest event.

package probe

import (
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

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
