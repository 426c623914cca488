// admit.go holds the bound on the host's calls in flight toward the
// server, and the queue of those beyond it (DESIGN.md, "The connect
// bridge"): a host's burst waits in the bridge instead of meeting the
// server's per-session bound (Tidemark: 429 too_many_calls).

package connect

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
)

// Defaults of Options.MaxCalls and Options.MaxQueued.
const (
	// DefaultMaxCalls is the default of Options.MaxCalls: a quarter of
	// Tidemark's default per-session bound (128,
	// session.DefaultMaxCallsPerSession), far above the handful of calls
	// a desktop host's model runs at once, and few enough connections for
	// a desktop process (a call in flight holds one HTTP/1.1 connection
	// for its stream; macOS gives a process 256 file descriptors by
	// default).
	DefaultMaxCalls = 32
	// DefaultMaxQueued is the default of Options.MaxQueued: a burst of a
	// few thousand calls waits whole. A queued call holds its decoded
	// message only (typically under a kilobyte).
	DefaultMaxQueued = 4096
)

// Admission is what becomes of a host's call when it is read (Admit).
type Admission string

// Values of Admission.
const (
	// AdmitStart: the call is sent now.
	AdmitStart Admission = "start"
	// AdmitQueue: the call waits until a call in flight is answered.
	AdmitQueue Admission = "queue"
	// AdmitRefuse: the call is answered by the bridge with an error,
	// never sent (reason too_many_calls).
	AdmitRefuse Admission = "refuse"
)

// Admit is the rule for a host's call read while inFlight calls are in
// flight toward the server and queued wait: sent when fewer than maxCalls
// are in flight and none waits (the queue is first in, first out),
// queued while fewer than maxQueued wait, refused otherwise.
func Admit(inFlight, queued, maxCalls, maxQueued int) Admission {
	switch {
	case inFlight < maxCalls && queued == 0:
		return AdmitStart
	case queued < maxQueued:
		return AdmitQueue
	}
	return AdmitRefuse
}

// gate applies Admit to the host's calls: a call holds a slot from its
// start until done is called with its id (its answer reached the host,
// or the host cancelled it); a queued call starts when a slot frees, in
// the order the calls came.
type gate struct {
	maxCalls, maxQueued int

	mu      sync.Mutex
	running map[jsonrpc.ID]bool
	queue   []queuedCall
	// watches are the sets of calls that watch returned a channel for,
	// each closed once its set is empty.
	watches []*watch
}

// watch is a set of calls in flight, and the channel closed once each of
// them is done.
type watch struct {
	calls map[jsonrpc.ID]bool
	ended chan struct{}
}

type queuedCall struct {
	id    jsonrpc.ID
	start func()
}

func newGate(maxCalls, maxQueued int) *gate {
	return &gate{maxCalls: maxCalls, maxQueued: maxQueued, running: make(map[jsonrpc.ID]bool)}
}

// admit starts the call id (start runs it, and must not block), queues
// it, or refuses it, as Admit says; it returns the admission and the
// numbers in flight and queued it was decided on.
func (g *gate) admit(id jsonrpc.ID, start func()) (a Admission, inFlight, queued int) {
	g.mu.Lock()
	inFlight, queued = len(g.running), len(g.queue)
	a = Admit(inFlight, queued, g.maxCalls, g.maxQueued)
	switch a {
	case AdmitStart:
		g.running[id] = true
	case AdmitQueue:
		g.queue = append(g.queue, queuedCall{id: id, start: start})
	}
	g.mu.Unlock()
	if a == AdmitStart {
		start()
	}
	return a, inFlight, queued
}

// done frees the slot of the call id, if it holds one, and starts the
// queued calls that now fit.
func (g *gate) done(id jsonrpc.ID) {
	g.mu.Lock()
	if !g.running[id] {
		g.mu.Unlock()
		return
	}
	delete(g.running, id)
	kept := g.watches[:0]
	for _, w := range g.watches {
		delete(w.calls, id)
		if len(w.calls) == 0 {
			close(w.ended)
			continue
		}
		kept = append(kept, w)
	}
	g.watches = kept
	var next []func()
	for len(g.queue) > 0 && len(g.running) < g.maxCalls {
		q := g.queue[0]
		g.queue = g.queue[1:]
		g.running[q.id] = true
		next = append(next, q.start)
	}
	g.mu.Unlock()
	for _, start := range next {
		start()
	}
}

// watch returns a channel closed once each call in flight now is done
// (at once when none is): answered, cancelled by the host, or failed. The
// calls queued now, and those started later, are not waited for.
func (g *gate) watch() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := &watch{calls: make(map[jsonrpc.ID]bool, len(g.running)), ended: make(chan struct{})}
	for id := range g.running {
		w.calls[id] = true
	}
	if len(w.calls) == 0 {
		close(w.ended)
		return w.ended
	}
	g.watches = append(g.watches, w)
	return w.ended
}

// drop removes the call id from the queue, reporting whether it was
// there: a call the host cancelled before it started is never sent.
func (g *gate) drop(id jsonrpc.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q.id == id {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// busyError is the answer to a call Admit refused: never sent, so sending
// it again runs it once.
func busyError(maxCalls, maxQueued int) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]string{"reason": replay.ReasonTooManyCalls.String()}) // a string always encodes
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Data: data,
		Message: "tidemark connect has the most calls in flight to the MCP server (--max-calls " + strconv.Itoa(maxCalls) + ") and waiting (--max-queued-calls " +
			strconv.Itoa(maxQueued) + "), and did not send this one: send it again once earlier calls are answered, or raise --max-queued-calls"}
}
