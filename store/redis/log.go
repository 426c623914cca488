package redis

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
)

// boundsFields are the rec fields a bounds reply carries, in order: the
// visible HWM third (vis; a record written before it existed has none,
// and then hwm counts), the HWM of the stored events last.
var boundsFields = [...]string{"gen", "floor", "vis", "cum", "base", "oldest", "hwm"}

// appendNow appends evs and returns when Redis has stored them and, on a
// primary with replicas, once the replicas hold them and their
// publication (replicate.go): one script checks the generation (and the
// failover guard, failover.go), adds the events with IDs HWM+1, HWM+2, …
// and moves the HWM and the byte count; a second script makes them
// visible to readers. The pipelined Append (pipeline.go) uses it for a
// session's first append in this process, which learns the HWM.
func (s *Store) appendNow(ctx context.Context, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	primary, n, err := s.replicas(ctx, "append", token)
	if err != nil {
		return store.Bounds{}, err
	}
	args := appendArgs(gen, s.acked(token, gen), n == 0, evs)
	rest, err := s.runOn(ctx, primary, n, s.scripts.append, "append", token, gen, args...)
	if err != nil {
		if endsWrites(err) {
			s.marks.Delete(token)
		}
		return store.Bounds{}, err
	}
	b := decBounds(rest)
	if len(evs) == 0 {
		return b, nil
	}
	hwm := u64(str(at(rest, 6)))
	// The replicas hold the events: the guard may publish them on a
	// promoted replica, since readers may see them on this primary as
	// soon as publish runs, before its wait returns.
	s.setAcked(token, gen, hwm)
	if n > 0 {
		if b, err = s.publish(ctx, primary, n, token, gen, hwm); err != nil {
			return store.Bounds{}, err
		}
	}
	first := hwm - uint64(len(evs)) + 1
	for i := range evs {
		evs[i].Seq = first + uint64(i)
		evs[i].Generation = gen
		if evs[i].Stream == store.NewStream {
			evs[i].Stream = evs[i].Seq
		}
	}
	return b, nil
}

// appendArgs returns the ARGV of the append script for evs: gen n acked
// visible, then per event stream kind end retry time data. acked is the
// failover guard's mark (failover.go); visible says the events need no
// replication wait and are visible to readers at once.
func appendArgs(gen, acked uint64, visible bool, evs []store.Event) []any {
	vis := "0"
	if visible {
		vis = "1"
	}
	args := make([]any, 0, 5+6*len(evs))
	args = append(args, strconv.FormatUint(gen, 10), strconv.Itoa(len(evs)),
		strconv.FormatUint(acked, 10), vis)
	for _, e := range evs {
		stream := ""
		if e.Stream != store.NewStream {
			stream = strconv.FormatUint(e.Stream, 10)
		}
		end := "0"
		if e.End {
			end = "1"
		}
		args = append(args, stream, strconv.Itoa(int(e.Kind)), end,
			strconv.FormatInt(int64(e.Retry), 10), encTime(e.Time), string(e.Data))
	}
	return args
}

// Read implements store.Log: the bounds and the events come from one
// MULTI/EXEC, so they describe the same moment.
func (s *Store) Read(ctx context.Context, token string, after uint64, max int) ([]store.Event, store.Bounds, error) {
	k := s.keys(token)
	var h *goredis.SliceCmd
	var tomb *goredis.StringCmd
	var xr *goredis.XMessageSliceCmd
	want := max > 0 && after < math.MaxUint64
	if err := s.readTx(ctx, "read", token, func(p goredis.Pipeliner) {
		h = p.HMGet(ctx, k.rec, boundsFields[:]...)
		tomb = p.Get(ctx, k.tomb)
		if want {
			xr = p.XRangeN(ctx, k.log, strconv.FormatUint(after+1, 10), "+", int64(max))
		}
	}); err != nil {
		return nil, store.Bounds{}, err
	}
	vals, err := h.Result()
	if err != nil {
		return nil, store.Bounds{}, fail(ctx, "read", token, err)
	}
	if vals[0] == nil {
		return nil, store.Bounds{}, missing("read", token, tomb)
	}
	b := decBounds(vals)
	if !want {
		return nil, b, nil
	}
	msgs, err := xr.Result()
	if err != nil {
		return nil, store.Bounds{}, fail(ctx, "read", token, err)
	}
	// Events above the visible HWM are not replicated yet.
	for len(msgs) > 0 && seqOf(msgs[len(msgs)-1]) > b.HWM {
		msgs = msgs[:len(msgs)-1]
	}
	if err := checkRetained(token, after, b, msgs); err != nil {
		return nil, store.Bounds{}, err
	}
	if len(msgs) == 0 {
		return nil, b, nil
	}
	out := make([]store.Event, len(msgs))
	for i, m := range msgs {
		out[i] = decEvent(m)
	}
	return out, b, nil
}

// checkRetained returns an error wrapping store.ErrLogLost when msgs, the
// log's entries after after read in one transaction with b, do not start
// with the first sequence b says is retained after after: the log key was
// deleted or evicted (Redis removes a whole key, never part of a stream),
// while the record, a key of its own, kept the bounds.
func checkRetained(token string, after uint64, b store.Bounds, msgs []goredis.XMessage) error {
	want := max(after+1, b.Floor)
	if want > b.HWM {
		return nil // nothing retained after after
	}
	got := "none"
	if len(msgs) > 0 {
		if seqOf(msgs[0]) == want {
			return nil
		}
		got = fmt.Sprintf("sequence %d", seqOf(msgs[0]))
	}
	return fmt.Errorf("redis store: read session %s: %w: the record says sequences %d to %d are retained, the log holds %s at %d "+
		"(its key was deleted, or evicted by Redis: set maxmemory-policy noeviction)", store.Prefix(token), store.ErrLogLost, b.Floor, b.HWM, got, want)
}

// Trim implements store.Log: XTRIM MINID floor, with the floor, the byte
// count, the oldest time and the record's openings (store.Openings)
// moved in the same script.
func (s *Store) Trim(ctx context.Context, token string, gen uint64, floor uint64) (store.Bounds, error) {
	rest, err := s.run(ctx, s.scripts.trim, "trim", token, gen,
		strconv.FormatUint(gen, 10), strconv.FormatUint(floor, 10),
		strconv.Itoa(store.MaxOpenings), strconv.Itoa(store.MaxOpeningBytes))
	if err != nil {
		return store.Bounds{}, err
	}
	return decBounds(rest), nil
}

// Bounds implements store.Log.
func (s *Store) Bounds(ctx context.Context, token string) (store.Bounds, error) {
	k := s.keys(token)
	var h *goredis.SliceCmd
	var tomb *goredis.StringCmd
	if err := s.tx(ctx, "bounds", token, func(p goredis.Pipeliner) {
		h = p.HMGet(ctx, k.rec, boundsFields[:]...)
		tomb = p.Get(ctx, k.tomb)
	}); err != nil {
		return store.Bounds{}, err
	}
	vals, err := h.Result()
	if err != nil {
		return store.Bounds{}, fail(ctx, "bounds", token, err)
	}
	if vals[0] == nil {
		return store.Bounds{}, missing("bounds", token, tomb)
	}
	return decBounds(vals), nil
}

// decBounds builds Bounds from the values of boundsFields; the HWM is the
// visible one.
func decBounds(v []any) store.Bounds {
	vis := str(at(v, 2))
	if vis == "" {
		vis = str(at(v, 6))
	}
	b := store.Bounds{
		Generation: u64(str(at(v, 0))),
		Floor:      u64(str(at(v, 1))),
		HWM:        u64(vis),
		Bytes:      i64(str(at(v, 3))) - i64(str(at(v, 4))),
		Oldest:     decTime(str(at(v, 5))),
	}
	if b.HWM >= b.Floor {
		b.Events = int(b.HWM - b.Floor + 1)
	}
	return b
}

// seqOf returns the sequence of a log entry: its ID's first part.
func seqOf(m goredis.XMessage) uint64 {
	ms, _, _ := strings.Cut(m.ID, "-")
	return u64(ms)
}

// decEvent builds an Event from a log entry (keys.go).
func decEvent(m goredis.XMessage) store.Event {
	get := func(f string) string { return str(m.Values[f]) }
	return store.Event{
		Seq:        seqOf(m),
		Generation: u64(get("gen")),
		Stream:     u64(get("stream")),
		Kind:       store.Kind(u64(get("kind"))),
		End:        get("end") == "1",
		Retry:      time.Duration(i64(get("retry"))),
		Time:       decTime(get("time")),
		Data:       bytesOrNil(get("data")),
	}
}
