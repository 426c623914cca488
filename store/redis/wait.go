package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
)

// unblockRetry is how long the canceller of a Wait pauses before sending
// CLIENT UNBLOCK again when the Wait's XREAD had not reached Redis yet.
const unblockRetry = 5 * time.Millisecond

// waitConn is a connection reserved for blocking reads, with the id Redis
// gave it (CLIENT ID), which CLIENT UNBLOCK names, and the client of the
// server it is connected to (one node of a Cluster).
type waitConn struct {
	conn *goredis.Conn
	id   int64
	node *goredis.Client
}

// snap is what a Wait compares with its cursor: the session's generation,
// floor, visible HWM and the HWM of the stored events, and the ID of the
// newest entry of its wake stream, all read in one MULTI/EXEC.
type snap struct {
	gen, floor, hwm, stored uint64
	wake                    string
}

// Wait implements store.Log. See the package documentation ("Waiting") for
// how it blocks; it returns nil when the HWM exceeds after, the generation
// changed, or the floor rose above after+1; the error of Read for an ended
// or unknown session; ctx.Err() when ctx is done; and an error wrapping
// ErrUnavailable when Redis cannot be reached or the Store was closed.
func (s *Store) Wait(ctx context.Context, token string, after uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("redis store: wait session %s: %w: store closed", store.Prefix(token), store.ErrUnavailable)
	}
	s.waits.Add(1)
	s.mu.Unlock()
	defer s.waits.Done()
	if handled, err := s.waitQueued(ctx, token, after); handled {
		return err
	}

	// wctx ends with ctx or with Close, whichever comes first.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()

	k := s.keys(token)
	first, err := s.snapshot(wctx, k, token)
	// A generation this process lost (pipeline.go) ends the Wait at once.
	lctx, lostErr := s.lostContext(token, first.gen)
	defer context.AfterFunc(lctx, cancel)()
	for cur := first; ; {
		if le := lostErr(); le != nil {
			return le
		}
		if err != nil {
			return s.waitErr(ctx, token, err)
		}
		if cur.gen != first.gen || cur.hwm > after || cur.floor > after+1 {
			return nil
		}
		// Entries up to cur.stored are in the log but not visible yet
		// (replicate.go): only a later append, or the publish's wake
		// entry, is news.
		_, err = s.block(wctx, k, token, max(after, cur.stored), cur.wake)
		if le := lostErr(); le != nil {
			return le
		}
		if err != nil {
			return s.waitErr(ctx, token, err)
		}
		cur, err = s.snapshot(wctx, k, token)
	}
}

// waitErr returns what Wait reports for err: ctx.Err() once ctx is done, a
// closed-store error after Close, else err.
func (s *Store) waitErr(ctx context.Context, token string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if s.closing.Err() != nil {
		return fmt.Errorf("redis store: wait session %s: %w: store closed", store.Prefix(token), store.ErrUnavailable)
	}
	return err
}

// snapshot reads the session's bounds and the newest wake entry's ID ("0-0"
// when the wake stream is empty) in one transaction.
func (s *Store) snapshot(ctx context.Context, k keys, token string) (snap, error) {
	var h *goredis.SliceCmd
	var tomb *goredis.StringCmd
	var wake *goredis.XMessageSliceCmd
	if err := s.readTx(ctx, "wait", token, func(p goredis.Pipeliner) {
		h = p.HMGet(ctx, k.rec, "gen", "floor", "vis", "hwm")
		tomb = p.Get(ctx, k.tomb)
		wake = p.XRevRangeN(ctx, k.wake, "+", "-", 1)
	}); err != nil {
		return snap{}, err
	}
	vals, err := h.Result()
	if err != nil {
		return snap{}, fail(ctx, "wait", token, err)
	}
	if vals[0] == nil {
		return snap{}, missing("wait", token, tomb)
	}
	sn := snap{gen: u64(str(vals[0])), floor: u64(str(vals[1])), hwm: u64(str(vals[2])), stored: u64(str(vals[3])), wake: "0-0"}
	if vals[2] == nil {
		sn.hwm = sn.stored // a record written before vis existed
	}
	if msgs, err := wake.Result(); err == nil && len(msgs) > 0 {
		sn.wake = msgs[0].ID
	}
	return sn, nil
}

// block waits, once, until the log gets an entry above after (then it
// reports appended), the wake stream an entry above wake, WaitBlock passes,
// or ctx ends (then it returns ctx.Err()). Beyond MaxWaits it sleeps
// PollInterval instead.
func (s *Store) block(ctx context.Context, k keys, token string, after uint64, wake string) (appended bool, err error) {
	for attempt := 0; ; attempt++ {
		wc, reused, err := s.getWaitConn(ctx, k.log)
		if err != nil {
			s.reroute(ctx)
			return false, fail(ctx, "wait", token, err)
		}
		if wc == nil {
			t := time.NewTimer(s.poll)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-t.C:
				return false, nil
			}
		}
		appended, err = s.xread(ctx, wc, k, after, wake)
		if err == nil || ctx.Err() != nil {
			s.putWaitConn(wc, err == nil)
			return appended, ctx.Err()
		}
		s.putWaitConn(wc, false)
		// Idle connections may all have died with a Redis restart; drop
		// them and try once more on a fresh one before reporting failure.
		var reply goredis.Error // an error reply from Redis, as opposed to a failed connection
		if reused && attempt == 0 && !errors.As(err, &reply) {
			s.dropIdle()
			continue
		}
		s.reroute(ctx)
		return false, fail(ctx, "wait", token, err)
	}
}

// xread issues the blocking XREAD on wc; CLIENT UNBLOCK, sent on the
// ordinary pool when ctx ends, releases it early. A timeout or an unblock
// is not an error. appended reports that the log had an entry above after.
func (s *Store) xread(ctx context.Context, wc *waitConn, k keys, after uint64, wake string) (appended bool, err error) {
	returned := make(chan struct{})
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(unblocked)
		for {
			uctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			n, err := s.unblock(uctx, k.log, wc.id)
			cancel()
			if err != nil || n == 1 {
				return // released, or Redis is gone and the read fails by itself
			}
			// Not blocked (yet): the XREAD is still on its way, or has
			// just returned.
			select {
			case <-returned:
				return
			case <-time.After(unblockRetry):
			}
		}
	})
	streams, err := wc.conn.XRead(context.WithoutCancel(ctx), &goredis.XReadArgs{
		Streams: []string{k.log, k.wake, strconv.FormatUint(after, 10) + "-0", wake},
		Count:   1,
		Block:   s.blockFor,
	}).Result()
	close(returned)
	if !stop() {
		<-unblocked // the connection must not be reused while CLIENT UNBLOCK may still name it
	}
	if errors.Is(err, goredis.Nil) {
		return false, nil
	}
	for _, st := range streams {
		if st.Stream == k.log && len(st.Messages) > 0 {
			appended = true
		}
	}
	return appended, err
}

// getWaitConn returns an idle wait connection to the server that holds
// key (reused = true), or a new one, or nil when MaxWaits connections are
// in use.
func (s *Store) getWaitConn(ctx context.Context, key string) (wc *waitConn, reused bool, err error) {
	node, err := primaryFor(ctx, s.wdb, key)
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	if n := len(s.idle[node]); n > 0 {
		wc = s.idle[node][n-1]
		s.idle[node] = s.idle[node][:n-1]
		s.inUse++
		s.mu.Unlock()
		return wc, true, nil
	}
	if s.inUse >= s.maxWaits {
		s.mu.Unlock()
		return nil, false, nil
	}
	s.inUse++
	s.mu.Unlock()
	conn := node.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		conn.Close()
		s.mu.Lock()
		s.inUse--
		s.mu.Unlock()
		return nil, false, err
	}
	return &waitConn{conn: conn, id: id, node: node}, false, nil
}

// putWaitConn returns wc to the idle list, or closes it when it failed or
// the Store is closed.
func (s *Store) putWaitConn(wc *waitConn, healthy bool) {
	s.mu.Lock()
	s.inUse--
	if healthy && !s.closed {
		s.idle[wc.node] = append(s.idle[wc.node], wc)
		wc = nil
	}
	s.mu.Unlock()
	if wc != nil {
		wc.conn.Close()
	}
}

// dropIdle closes every idle wait connection.
func (s *Store) dropIdle() {
	s.mu.Lock()
	idle := s.idle
	s.idle = make(map[*goredis.Client][]*waitConn)
	s.mu.Unlock()
	closeIdle(idle)
}

// closeIdle closes the connections of idle.
func closeIdle(idle map[*goredis.Client][]*waitConn) {
	for _, wcs := range idle {
		for _, wc := range wcs {
			wc.conn.Close()
		}
	}
}

// unblock sends CLIENT UNBLOCK id, on the ordinary pool, to the server
// that holds key, and returns how many clients it released.
func (s *Store) unblock(ctx context.Context, key string, id int64) (int64, error) {
	node, err := primaryFor(ctx, s.rdb, key)
	if err != nil {
		return 0, err
	}
	return node.ClientUnblock(ctx, id).Result()
}
