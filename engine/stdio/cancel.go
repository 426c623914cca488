package stdio

// This file holds the calls the client cancelled: the grace in which the
// subprocess may still answer one (Options.CancelGrace), the answer the
// engine gives it after that, and the late answers it drops.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
)

// maxAbandoned bounds how many calls answered as cancelled a subprocess
// remembers, to drop their late answers: a server that follows MCP
// 2025-11-25 (utilities/cancellation) never answers them, so without a
// bound the set would grow with every cancelled call of a long session.
// The oldest are forgotten first; a late answer to one of those reaches
// the client's stream for its ID, which has ended.
const maxAbandoned = 1024

// abandonedCalls is the set of calls answered as cancelled whose late
// answer is dropped, in the order they were answered. Its zero value is an
// empty set.
type abandonedCalls struct {
	ids   map[jsonrpc.ID]struct{}
	order []jsonrpc.ID // oldest first; may hold IDs removed from ids
}

// add records id, forgetting the oldest beyond maxAbandoned.
func (a *abandonedCalls) add(id jsonrpc.ID) {
	if a.ids == nil {
		a.ids = make(map[jsonrpc.ID]struct{})
	}
	a.ids[id] = struct{}{}
	a.order = append(a.order, id)
	for len(a.ids) > maxAbandoned {
		delete(a.ids, a.order[0])
		a.order = a.order[1:]
	}
	if len(a.order) > 2*maxAbandoned {
		// IDs removed by take stay in order; compact it now and then.
		kept := make([]jsonrpc.ID, 0, len(a.ids))
		for _, x := range a.order {
			if _, ok := a.ids[x]; ok {
				kept = append(kept, x)
			}
		}
		a.order = kept
	}
}

// has reports whether id is in the set.
func (a *abandonedCalls) has(id jsonrpc.ID) bool {
	_, ok := a.ids[id]
	return ok
}

// take removes id and reports whether it was there.
func (a *abandonedCalls) take(id jsonrpc.ID) bool {
	if _, ok := a.ids[id]; !ok {
		return false
	}
	delete(a.ids, id)
	return true
}

// cancelLocked starts the grace of call id, which the client just
// cancelled while it was in flight: unanswered at its end, the call is
// answered as cancelled (cancelExpired).
func (s *proc) cancelLocked(id jsonrpc.ID) {
	if t, ok := s.cancelled[id]; ok {
		t.Stop()
	}
	s.cancelled[id] = time.AfterFunc(s.e.opts.CancelGrace, func() { s.cancelExpired(id) })
}

// aliasLocked returns client call r as the subprocess gets it: as it is,
// unless the engine answered an earlier call with its ID as cancelled and
// the subprocess never answered that one, so may still run it. Then r
// goes under an ID of the engine's ("tidemark-<generation>-call-<n>"): the
// subprocess never holds two calls with one ID, and the late answer to the
// old call is told apart from the answer to r.
func (s *proc) aliasLocked(r *jsonrpc.Request) *jsonrpc.Request {
	if !s.abandoned.has(r.ID) {
		return r
	}
	s.nextAlias++
	a, _ := jsonrpc.MakeID(fmt.Sprintf("tidemark-%d-call-%d", s.gen, s.nextAlias)) // a string is always a valid ID
	s.aliases[r.ID] = a
	s.unalias[a] = r.ID
	return &jsonrpc.Request{ID: a, Method: r.Method, Params: r.Params}
}

// cancelAliasLocked returns the client's notifications/cancelled r as the
// subprocess gets it: naming the ID the subprocess knows the call by.
func (s *proc) cancelAliasLocked(r *jsonrpc.Request, id jsonrpc.ID) *jsonrpc.Request {
	a, ok := s.aliases[id]
	if !ok {
		return r
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(r.Params, &p) != nil {
		return r
	}
	p["requestId"], _ = json.Marshal(a.Raw())
	params, err := json.Marshal(p)
	if err != nil {
		return r
	}
	return &jsonrpc.Request{Method: r.Method, Params: params}
}

// forgetAliasLocked ends the alias of client call id, if it has one, and
// returns the ID the subprocess knows the call by.
func (s *proc) forgetAliasLocked(id jsonrpc.ID) jsonrpc.ID {
	a, ok := s.aliases[id]
	if !ok {
		return id
	}
	delete(s.aliases, id)
	delete(s.unalias, a)
	return a
}

// answeredLocked decides what becomes of the subprocess's answer with ID
// sub: it returns the ID of the client call it answers, and false when the
// answer is dropped because the engine answered that call as cancelled
// already. An answer within the grace of a cancelled call ends the grace
// and reaches the client.
func (s *proc) answeredLocked(sub jsonrpc.ID) (jsonrpc.ID, bool) {
	id, aliased := s.unalias[sub]
	switch {
	case aliased:
		s.forgetAliasLocked(id)
	case s.abandoned.take(sub):
		return sub, false
	default:
		id = sub
	}
	if t, ok := s.cancelled[id]; ok {
		t.Stop()
		delete(s.cancelled, id)
	}
	return id, true
}

// cancelExpired answers call id, cancelled by the client and still
// unanswered at the end of its grace, with a JSON-RPC internal error whose
// reason is replay.ReasonCancelled; a later answer of the subprocess is
// dropped. A subprocess that is ending leaves the call to supervise.
func (s *proc) cancelExpired(id jsonrpc.ID) {
	s.mu.Lock()
	if _, ok := s.cancelled[id]; !ok || s.ended {
		s.mu.Unlock()
		return
	}
	delete(s.cancelled, id)
	s.abandoned.add(s.forgetAliasLocked(id))
	s.mu.Unlock()
	msg := fmt.Sprintf("the call was cancelled, and the MCP server process of this session did not answer it within %v", s.e.opts.CancelGrace)
	s.logger.Info("call failed", "id", id.Raw(), "reason", replay.ReasonCancelled, "detail", msg)
	s.fail([]jsonrpc.ID{id}, replay.ReasonCancelled, msg)
}

// endCancelledLocked stops the graces still running when the subprocess
// ends and returns their calls, sorted as the router sorts the calls it
// ends.
func (s *proc) endCancelledLocked() []jsonrpc.ID {
	ids := make([]jsonrpc.ID, 0, len(s.cancelled))
	for id, t := range s.cancelled {
		t.Stop()
		ids = append(ids, id)
	}
	clear(s.cancelled)
	sortIDs(ids)
	return ids
}

// sortIDs sorts ids by the text of their values.
func sortIDs(ids []jsonrpc.ID) {
	slices.SortFunc(ids, func(a, b jsonrpc.ID) int {
		return cmp.Compare(fmt.Sprint(a.Raw()), fmt.Sprint(b.Raw()))
	})
}
