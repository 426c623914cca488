// Checks takeover and concurrent-resume: two readers of one stream. Rules
// (MCP 2025-11-25, "Multiple Connections" and "Resumability and
// Redelivery"; DESIGN.md, "Delivery rules"): one reader per stream: a
// resume while the stream's old connection still looks open takes the
// stream over (a half-open connection must not lock the client out), and a
// message goes on one connection only: a message reaches a second
// connection only as the replay, from the resume's cursor, of what the
// first delivered before the takeover.

package probe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// conn is what one connection of the takeover and concurrent-resume
// checks saw.
type conn struct {
	label  string
	status int
	reason string
	evs    []event // the events it delivered
	err    error   // the refusal or failure of a resume; nil if it streamed
}

func (c *conn) describe() string {
	switch {
	case c.err != nil && c.status != 0:
		return fmt.Sprintf("%s %d%s", c.label, c.status, withReason(c.reason))
	case c.err != nil:
		return c.label + " failed: " + c.err.Error()
	}
	return fmt.Sprintf("%s %d with %d messages", c.label, c.status, len(messagesOf(c.evs)))
}

// follow reads st into c until the response to id, the end of the answer,
// or done is closed (plus a grace of 500 ms, for what it would still
// deliver); it reports whether it got the response.
func follow(ctx context.Context, st *stream, c *conn, id jsonrpc.ID, done <-chan struct{}) bool {
	defer st.closeWith(ctx)()
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		select {
		case <-done:
			select {
			case <-time.After(500 * time.Millisecond):
			case <-quit:
			}
		case <-quit:
		case <-ctx.Done():
		}
		st.close()
	}()
	for {
		ev, err := st.next()
		if err != nil {
			return false
		}
		c.evs = append(c.evs, ev)
		if r, ok := ev.msg.(*jsonrpc.Response); ok && r.ID == id {
			return true
		}
	}
}

// readers runs the stream of req, whose connection orig has delivered
// before, on orig and on len(labels) resumes from the newest cursor sent
// at once, all read until one of them delivers the call's response. It
// returns the connections (orig first) and the one that delivered the
// response (nil if none).
func readers(ctx context.Context, s *session, req *jsonrpc.Request, orig *stream, before []event, labels ...string) ([]*conn, *conn) {
	cursor := lastCursor(before)
	conns := []*conn{{label: "original", status: orig.status}}
	for _, l := range labels {
		conns = append(conns, &conn{label: l})
	}
	answered := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var winner *conn
	got := func(c *conn) {
		mu.Lock()
		if winner == nil {
			winner = c
		}
		mu.Unlock()
		once.Do(func() { close(answered) })
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if follow(ctx, orig, conns[0], req.ID, answered) {
			got(conns[0])
		}
	})
	for _, c := range conns[1:] {
		wg.Go(func() {
			rs, err := s.resume(ctx, cursor)
			if err != nil {
				c.status, c.reason, c.err = statusOf(err), reasonOf(err), err
				return
			}
			c.status = rs.status
			if follow(ctx, rs, c, req.ID, answered) {
				got(c)
			}
		})
	}
	wg.Wait()
	return conns, winner
}

// shared counts the message events (by ID) that reached more than one
// connection.
func shared(conns []*conn) int {
	seen := map[string]int{}
	n := 0
	for _, c := range conns {
		for _, ev := range messagesOf(c.evs) {
			if ev.id == "" {
				continue
			}
			seen[ev.id]++
			if seen[ev.id] == 2 {
				n++
			}
		}
	}
	return n
}

// replayed reports whether the messages loser delivered are the first
// messages winner delivered, and fewer: winner, resumed from the cursor
// the probe sent, replays what loser delivered before the server took the
// stream over, and from the takeover point (winner's first message that
// loser lacks) on, loser delivers nothing. The takeover point is judged by
// event IDs, not by when the probe read each connection: a message the
// server wrote before the takeover may reach the probe after the resume's
// first events, and a resume the server processes late (a loaded machine)
// rightly replays the messages the original delivered meanwhile.
func replayed(loser, winner []event) bool {
	l, w := messagesOf(loser), messagesOf(winner)
	if len(l) >= len(w) {
		return false
	}
	for i := range l {
		if l[i].id == "" || l[i].id != w[i].id {
			return false
		}
	}
	return true
}

// startForReaders opens a session, starts the call and reads half the
// baseline's messages, leaving the connection open.
func (e *env) startForReaders(ctx context.Context, token string) (*session, *jsonrpc.Request, *stream, []event, error) {
	s, req, st, err := e.startCall(ctx, token)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	// Resume right after a message arrives, from that newest cursor:
	// nothing is owed to a new connection yet, so an event two
	// connections both receive was sent to both.
	before, err := readFirst(ctx, st, max(1, len(e.base.sigs)/2))
	if err != nil {
		st.close()
		return nil, nil, nil, nil, fmt.Errorf("before the resume: %w", err)
	}
	if lastCursor(before) == "" {
		st.close()
		return nil, nil, nil, nil, fmt.Errorf("no event carried an ID: the stream cannot be resumed")
	}
	return s, req, st, before, nil
}

// tooFast is the result of the two-reader checks when the tool's messages
// come too close together to judge them (see minGap): with a tool without
// delay (--args '{"n":20}'), both checks would count as sent twice the
// messages a correct server rightly replays, and fail it.
func (e *env) tooFast() (Result, bool) {
	if e.base.gap >= minGap {
		return Result{}, false
	}
	return Result{Verdict: NA, Observed: fmt.Sprintf(
		"the baseline call's %d messages came about %v apart, closer than a resume takes (%v): give the tool a delay between messages (e.g. delay_ms 10 in --args)",
		len(messagesOf(e.base.events)), e.base.gap.Round(time.Microsecond), minGap)}, true
}

func checkTakeover(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	if r, ok := e.tooFast(); ok {
		return r
	}
	s, req, orig, before, err := e.startForReaders(ctx, "probe-takeover")
	if err != nil {
		return failed(nil, err, "tools/call")
	}
	conns, winner := readers(ctx, s, req, orig, before, "GET")
	get := conns[1]
	statuses := []int{conns[0].status, get.status}
	obs := fmt.Sprintf("resumed while the original connection was open: %s; the original then delivered %d more messages",
		get.describe(), len(messagesOf(conns[0].evs)))
	if get.err != nil {
		return Result{Verdict: Fail, Statuses: statuses,
			Observed: obs + "; a client whose connection died unseen (half-open) cannot resume"}
	}
	if winner != get {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; the resumed stream did not deliver the call's response"}
	}
	if n := shared(conns); n > 0 {
		if !replayed(conns[0].evs, get.evs) {
			return Result{Verdict: Fail, Statuses: statuses, Observed: obs + fmt.Sprintf("; %d events on both, the original's not all before the takeover point", n)}
		}
		obs += fmt.Sprintf("; the resume replayed those %d from its cursor", n)
	}
	if diff := compare(signatures(append(before, get.evs...)), e.base.sigs); diff != "" {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; " + diff}
	}
	return Result{Verdict: Pass, Statuses: statuses, Observed: obs + "; the resumed stream completed the call"}
}

func checkConcurrentResume(ctx context.Context, e *env) Result {
	if r, ok := e.noStream(); ok {
		return r
	}
	if r, ok := e.tooFast(); ok {
		return r
	}
	s, req, orig, before, err := e.startForReaders(ctx, "probe-concurrent")
	if err != nil {
		return failed(nil, err, "tools/call")
	}
	conns, winner := readers(ctx, s, req, orig, before, "GET", "GET")
	var statuses []int
	var parts []string
	for _, c := range conns {
		statuses = append(statuses, c.status)
		parts = append(parts, c.describe())
	}
	n := shared(conns)
	obs := fmt.Sprintf("two resumes at once while the original stays open: %s; %d events on two connections", strings.Join(parts, ", "), n)
	if winner == nil {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; none delivered the call's response"}
	}
	// The original delivered before; the winner (the original or a
	// resume from before's last cursor) must deliver the rest.
	if diff := compare(signatures(append(before, winner.evs...)), e.base.sigs); diff != "" {
		return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; the connection that finished: " + diff}
	}
	if n > 0 {
		for _, c := range conns {
			if c != winner && !replayed(c.evs, winner.evs) {
				return Result{Verdict: Fail, Statuses: statuses, Observed: obs + "; " + c.label + " delivered events after the takeover point"}
			}
		}
		obs += "; the connection that finished replayed them from its cursor"
	}
	return Result{Verdict: Pass, Statuses: statuses, Observed: obs}
}
