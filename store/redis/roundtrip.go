package redis

// roundtrip.go holds the committer's round trips (pipeline.go): the
// batches of one commit go, grouped by the primary that holds each
// session's keys, to that primary as pipelined script calls followed by
// one WAIT for all of them; on a primary with replicas to wait for
// (replicate.go) the sessions whose events the replicas hold are then
// published in a second pipelined round trip, again with one WAIT. So a
// round trip costs two replication waits however many sessions and
// events it carries, and an event becomes visible to readers only once
// the replicas a failover may promote hold it, as with an unpipelined
// append (appendNow).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
)

// call is one script call of a round trip: its keys and ARGV, then its
// reply or its error.
type call struct {
	keys  []string
	args  []any
	reply []any
	err   error
}

// send stores bs, one round trip (two with a replication wait) per
// primary, the primaries in parallel, and records each outcome (settle).
func (s *Store) send(bs []*batch) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	groups := make(map[*goredis.Client][]*batch)
	var down bool
	for _, b := range bs {
		primary, err := primaryFor(ctx, s.rdb, s.keys(b.ps.token).rec)
		if err != nil {
			b.err, b.unsent, down = fail(ctx, "append", b.ps.token, err), true, true
			continue
		}
		groups[primary] = append(groups[primary], b)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for primary, g := range groups {
		wg.Go(func() {
			if !s.sendTo(ctx, primary, g) {
				mu.Lock()
				down = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if down {
		s.reroute(ctx)
	}
	s.pl.down.Store(down)
	var lost []*store.LostError
	resend := false
	for _, b := range bs {
		if le := s.settle(b); le != nil {
			lost = append(lost, le)
		}
		resend = resend || b.resend
	}
	s.pl.mu.Lock()
	f := s.pl.onLost
	s.pl.mu.Unlock()
	for _, le := range lost {
		if f != nil {
			f(le.Token, le.Generation, le)
		}
	}
	for _, b := range bs {
		if !b.resend && !b.released {
			b.ps.pend.Release(b.n, b.b)
		}
	}
	if !resend {
		s.pl.pause = 0
		return
	}
	// Give the slot map's reload (reroute) time to finish before the
	// batches go again.
	s.pl.pause = max(resendPause, 2*s.pl.pause)
	t := time.NewTimer(s.pl.pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.closing.Done():
	}
}

// sendTo stores bs, whose sessions primary holds, and sets each batch's
// rest or err. The replicas' acknowledgement of the events feeds the
// failover guard (setAcked) before their publication, as appendNow does.
// It reports whether primary answered every round trip and the replicas
// acknowledged it.
func (s *Store) sendTo(ctx context.Context, primary *goredis.Client, bs []*batch) bool {
	n, err := s.repl.need(ctx, primary)
	if err != nil {
		for _, b := range bs {
			b.err, b.unsent = fail(ctx, "append", b.ps.token, err), true
		}
		return false
	}
	calls := make([]*call, len(bs))
	for i, b := range bs {
		args := appendArgs(b.gen, s.acked(b.ps.token, b.gen), n == 0, b.evs)
		args = append(args, strconv.FormatUint(b.evs[0].Seq, 10))
		calls[i] = &call{keys: s.keys(b.ps.token).all(), args: args}
	}
	werr := s.roundTrip(ctx, primary, n, s.pl.script, calls)
	var pub []*batch
	var pcalls []*call
	for i, b := range bs {
		if b.rest, b.err = s.outcome(ctx, b, calls[i], werr); b.err != nil {
			b.unsent = calls[i].err != nil && unexecuted(calls[i].err)
			continue
		}
		hwm := u64(str(at(b.rest, 6)))
		s.setAcked(b.ps.token, b.gen, hwm)
		if n > 0 {
			pub = append(pub, b)
			pcalls = append(pcalls, &call{keys: calls[i].keys,
				args: []any{strconv.FormatUint(b.gen, 10), strconv.FormatUint(hwm, 10)}})
		}
	}
	if len(pub) == 0 {
		return werr == nil
	}
	perr := s.roundTrip(ctx, primary, n, s.scripts.publish, pcalls)
	for i, b := range pub {
		b.rest, b.err = s.outcome(ctx, b, pcalls[i], perr)
	}
	return werr == nil && perr == nil
}

// roundTrip sends calls of sc to primary as one pipeline followed by
// WAIT n (no WAIT when n is 0), loading sc once when primary lacks it (a
// restart emptied its script cache), and sets each call's reply or error.
// It returns the pipeline's error, or the WAIT's, or an error wrapping
// store.ErrUnavailable when fewer than n replicas acknowledged within
// Options.ReplicationTimeout; nil when all went through.
func (s *Store) roundTrip(ctx context.Context, primary *goredis.Client, n int, sc *goredis.Script, calls []*call) error {
	for attempt := 0; ; attempt++ {
		cmds := make([]*goredis.Cmd, len(calls))
		var wait *goredis.Cmd
		_, err := primary.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, c := range calls {
				cmds[i] = sc.EvalSha(ctx, p, c.keys, c.args...)
			}
			if n > 0 {
				wait = p.Do(ctx, "WAIT", n, s.repl.timeout.Milliseconds())
			}
			return nil
		})
		if goredis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
			if lerr := sc.Load(ctx, primary).Err(); lerr == nil {
				continue
			}
		}
		for i, c := range calls {
			c.reply, c.err = cmds[i].Slice()
		}
		if n == 0 {
			return err
		}
		acks, werr := wait.Int64()
		switch {
		case werr != nil:
			return werr
		case int(acks) < n:
			return fmt.Errorf("%w: replicated to %d of %d replicas within %v",
				store.ErrUnavailable, acks, n, s.repl.timeout)
		}
		return err
	}
}

// outcome returns the bounds of c's reply (what follows "ok"), or why b
// is not stored and acknowledged: c's error, its script's status
// (status), a gap before the batch (appendAtLua), or werr, the round
// trip's error, which covers a call that Redis stored but the replicas
// did not acknowledge.
func (s *Store) outcome(ctx context.Context, b *batch, c *call, werr error) ([]any, error) {
	token := b.ps.token
	if c.err != nil {
		return nil, fail(ctx, "append", token, c.err)
	}
	if str(at(c.reply, 0)) == "gap" {
		return nil, fmt.Errorf("redis store: append session %s: %w: Redis holds HWM %s, the batch starts at %d",
			store.Prefix(token), store.ErrUnavailable, str(at(c.reply, 1)), b.evs[0].Seq)
	}
	rest, err := status("append", token, b.gen, c.reply)
	if err != nil {
		return nil, err
	}
	if werr != nil && errors.Is(werr, store.ErrUnavailable) {
		return nil, fmt.Errorf("redis store: append session %s: %w", store.Prefix(token), werr)
	}
	if werr != nil {
		return nil, fail(ctx, "append", token, werr)
	}
	return rest, nil
}

// unexecuted reports whether err, a script call's error, means Redis
// never ran the script: the connection could not be made, or the node
// refused the command before running it because the slot is not served
// there (MOVED, ASK, a replica's READONLY), the cluster is down
// (CLUSTERDOWN), or the node is not ready (TRYAGAIN, LOADING,
// MASTERDOWN). Such a call can be sent again, after the slot map is read
// again, without storing an event twice. A timeout or a connection lost
// after the command went out is not one of these: Redis may have run it.
func unexecuted(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	for _, prefix := range []string{"MOVED ", "ASK ", "READONLY ", "CLUSTERDOWN ", "TRYAGAIN ", "LOADING ", "MASTERDOWN "} {
		if goredis.HasErrorPrefix(err, strings.TrimSpace(prefix)) {
			return true
		}
	}
	return false
}
