package redis

// failover.go holds the failover guard: what a Store does when Redis
// comes back with less than it acknowledged. Redis replicates
// asynchronously, so a promoted replica (Sentinel, Cluster) or a primary
// restarted from an older file can lack events a writer had seen
// stored; the next events would then get the same sequences, and a
// client holding a cursor of a lost event would be served another event
// under it. The guard keeps, per session this Store appended to, the
// generation and the highest sequence the replicas acknowledged holding
// (acked: the append's WAIT succeeded, whether or not the publication's
// did), and compares it with the record before every append (guardLua,
// inside appendLua) and whenever the primary changes (watch, comparing
// each primary's replication ID every second). A record whose high-water
// mark went below acked moves to a new generation in the same script, as
// Claim does: cursors of the old generation answer 409 and no cursor
// names two events. A record that kept the events but lost their
// publication is published again: readers may have seen them on the old
// primary between its publication and the replicas' acknowledgement of
// it, and the promoted replica shows them again under the same cursors.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
)

// watchInterval is how often watch reads each primary's replication ID.
const watchInterval = time.Second

// guardLua defines guard(acked), used by appendLua after its fencing
// check. It returns nil when the record holds every event up to acked
// (publishing them again if only the publication was lost), or, when some
// are gone, moves the session to generation+1 with floor HWM+1 and an
// empty log (as claimLua does) and returns {'lost', newgen, hwm}.
const guardLua = `
local function guard(acked)
  local a = tonumber(acked)
  local h = redis.call('HMGET', rec, 'hwm', 'vis', 'cum')
  local hwm = tonumber(h[1])
  if a == 0 or tonumber(h[2] or h[1]) >= a then return nil end
  if hwm >= a then
    redis.call('HSET', rec, 'vis', int(a))
    poke('publish')
    keep(wake)
    return nil
  end
  local g = redis.call('HINCRBY', rec, 'gen', 1)
  redis.call('HSET', rec, 'floor', int(hwm + 1), 'vis', int(hwm), 'base', h[3], 'oldest', '')
  redis.call('DEL', log)
  poke('claim')
  keep(wake)
  return {'lost', int(g), int(hwm)}
end
`

// ackMark is what a Store knows the replicas hold of one session: the
// highest sequence appended in generation gen whose replication wait
// succeeded.
type ackMark struct {
	gen, hwm uint64
}

// acked returns the acknowledged sequence of token in generation gen, 0
// when this Store has had nothing of that generation acknowledged.
func (s *Store) acked(token string, gen uint64) uint64 {
	if v, ok := s.marks.Load(token); ok && v.(ackMark).gen == gen {
		return v.(ackMark).hwm
	}
	return 0
}

// setAcked records hwm as held by the replicas in generation gen of
// token, unless the mark already holds a higher sequence of gen or a
// later generation: appends of one session run concurrently, and their
// acknowledgements can arrive out of order.
func (s *Store) setAcked(token string, gen, hwm uint64) {
	m := ackMark{gen: gen, hwm: hwm}
	for {
		v, loaded := s.marks.LoadOrStore(token, m)
		if !loaded {
			return
		}
		old := v.(ackMark)
		if old.gen > gen || old.gen == gen && old.hwm >= hwm || s.marks.CompareAndSwap(token, old, m) {
			return
		}
	}
}

// endsWrites reports whether err, a write's error, means this Store no
// longer writes to that generation (fenced, ended, unknown): its mark is
// then dropped.
func endsWrites(err error) bool {
	return errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrEnded) || errors.Is(err, store.ErrNotFound)
}

// watch compares every primary's replication ID each watchInterval until
// the Store closes; when one changed (a replica was promoted, or the
// primary restarted) it runs the guard on every session with a mark. seen
// holds the IDs read when the Store opened (primary address → ID).
func (s *Store) watch(seen map[string]string) {
	defer s.waits.Done()
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closing.Done():
			return
		case <-t.C:
		}
		if s.replIDsChanged(seen) {
			s.reroute(s.closing)
			s.checkMarks()
		}
	}
}

// replIDsChanged reads the replication ID of every primary into seen and
// reports whether one that was known changed, or a primary appeared that
// was not known (on a Cluster a promoted replica has its own address).
// Unreachable primaries are skipped: they are checked again next round.
func (s *Store) replIDsChanged(seen map[string]string) bool {
	ctx, cancel := context.WithTimeout(s.closing, s.timeout)
	defer cancel()
	var mu sync.Mutex
	changed, known := false, len(seen) > 0
	each := func(ctx context.Context, c *goredis.Client) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return nil
		}
		id := infoField(info, "master_replid")
		mu.Lock()
		defer mu.Unlock()
		addr := c.Options().Addr
		if old, ok := seen[addr]; ok && old != id || !ok && known {
			changed = true
		}
		seen[addr] = id
		return nil
	}
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		cc.ForEachMaster(ctx, each)
	} else {
		each(ctx, s.rdb.(*goredis.Client))
	}
	return changed
}

// checkMarks runs the guard (an append of no events) on every session
// with a mark. A lost session moves to generation+1 there; its owner
// learns it at its next append or lease renewal (fenced).
func (s *Store) checkMarks() {
	s.marks.Range(func(k, v any) bool {
		ctx, cancel := context.WithTimeout(s.closing, s.timeout)
		defer cancel()
		token, m := k.(string), v.(ackMark)
		_, err := s.runReplicated(ctx, s.scripts.append, "append", token, m.gen,
			strconv.FormatUint(m.gen, 10), "0", strconv.FormatUint(m.hwm, 10), "0")
		if endsWrites(err) {
			s.marks.Delete(token)
		}
		return s.closing.Err() == nil
	})
}

// infoField returns the value of name in an INFO reply ("" if absent).
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
