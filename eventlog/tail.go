package eventlog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
)

// readBatch is how many events a Reader asks the store for at once.
const readBatch = 256

// A read or wait that fails with store.ErrUnavailable is tried again,
// after a pause that starts at readRetryPause and doubles, until
// readRetryWindow has passed since the first failure: a read changes
// nothing, and a store client that found its primary replaced (a Redis
// failover) answers again once it has read the new topology, which would
// otherwise end a stream that had events to come, or answer a POST with a
// stream holding none. The pauses double so that a store that stays down
// gets a few reads per stream (four), not one every pause: a client's
// connection pool stops dialling for a while after many failed dials.
const (
	readRetryPause  = 50 * time.Millisecond
	readRetryWindow = time.Second
)

// Reader tails one stream of one session: the events of that stream after a
// position, first those already in the log (replay), then new ones as they
// are appended (live), through the same reads. It is not safe for concurrent
// use; one connection owns one Reader.
type Reader struct {
	log    *Log
	token  string
	gen    uint64
	stream uint64
	pos    uint64 // highest sequence examined
	out    []store.Event
	ra     readAppender // the store, when it can read into out
	qw     queuedWaiter // the store, when it knows this process's unstored events
}

// readAppender is implemented by stores that can append what Read returns
// to a caller's buffer (store/memory): a Reader then reads into one buffer
// of its own instead of the store allocating a slice per read.
type readAppender interface {
	ReadAppend(ctx context.Context, token string, after uint64, max int, dst []store.Event) ([]store.Event, store.Bounds, error)
}

// queuedWaiter is implemented by pipelined stores that can tell, without
// a round trip, that the next events a read would find after a position
// are this process's own appends, not yet stored (store/redis): a Reader
// then waits for them before it reads, instead of reading nothing first.
type queuedWaiter interface {
	Queued(token string, after uint64) bool
}

// NewReader returns a Reader of stream in generation gen of the session,
// positioned after sequence after (the cursor the client holds, or the
// sequence before the stream's first event).
func (l *Log) NewReader(token string, gen, stream, after uint64) *Reader {
	ra, _ := l.st.(readAppender)
	qw, _ := l.st.(queuedWaiter)
	return &Reader{log: l, token: token, gen: gen, stream: stream, pos: after, ra: ra, qw: qw}
}

// Position returns the highest sequence the Reader has examined.
func (r *Reader) Position() uint64 { return r.pos }

// Next blocks until the stream has events after the Reader's position and
// returns them in sequence order (at most 256). The slice is valid until the
// next call. Errors: ErrCompacted when retention removed events the Reader
// had not read; ErrGenerationChanged when the session was re-created; the
// store's error when the session ended; ctx.Err() when ctx is done.
func (r *Reader) Next(ctx context.Context) ([]store.Event, error) {
	return r.next(ctx, math.MaxUint64)
}

// NextUpTo is Next for a stream that must end at a known point of the log
// (a server shutting down delivers what its log already holds): once the
// Reader has examined every event up to sequence limit and found none of
// its stream, it returns no events and no error instead of waiting for
// more.
func (r *Reader) NextUpTo(ctx context.Context, limit uint64) ([]store.Event, error) {
	return r.next(ctx, limit)
}

func (r *Reader) next(ctx context.Context, limit uint64) ([]store.Event, error) {
	st := r.log.st
	var retry retryState
	for {
		if r.qw != nil && r.pos < limit && r.qw.Queued(r.token, r.pos) {
			// A read now would find nothing: wait for the store first.
			if err := r.wait(ctx, &retry); err != nil {
				return nil, err
			}
		}
		var evs []store.Event
		var b store.Bounds
		var err error
		if r.ra != nil {
			evs, b, err = r.ra.ReadAppend(ctx, r.token, r.pos, readBatch, r.out[:0])
		} else {
			evs, b, err = st.Read(ctx, r.token, r.pos, readBatch)
		}
		if err != nil {
			if retry.again(ctx, err) {
				continue
			}
			return nil, fmt.Errorf("eventlog: read session %s stream %d after %d: %w", store.Prefix(r.token), r.stream, r.pos, err)
		}
		retry = retryState{}
		if b.Generation != r.gen {
			return nil, fmt.Errorf("%w: session %s gen %d is now gen %d", ErrGenerationChanged, store.Prefix(r.token), r.gen, b.Generation)
		}
		if b.Floor > r.pos+1 {
			return nil, fmt.Errorf("%w: session %s stream %d position %d, floor %d", ErrCompacted, store.Prefix(r.token), r.stream, r.pos, b.Floor)
		}
		// Keep the stream's events. Read into r.out, evs is compacted in
		// its own array (the write index never passes the read index).
		out := r.out[:0]
		if r.ra != nil {
			out = evs[:0]
		}
		for i := range evs {
			if evs[i].Stream == r.stream {
				out = append(out, evs[i])
			}
			r.pos = evs[i].Seq
		}
		r.out = out
		if len(r.out) > 0 {
			return r.out, nil
		}
		if len(evs) > 0 {
			continue // only other streams' events: keep scanning
		}
		if r.pos >= limit {
			return nil, nil
		}
		if err := r.wait(ctx, &retry); err != nil {
			return nil, err
		}
	}
}

// wait waits for the store to have news after the Reader's position
// (store.Log.Wait). A failure that retry lets the Reader try again after
// its pause is not an error: the Reader reads again.
func (r *Reader) wait(ctx context.Context, retry *retryState) error {
	err := r.log.st.Wait(ctx, r.token, r.pos)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case retry.again(ctx, err):
		return nil
	}
	return fmt.Errorf("eventlog: wait session %s stream %d after %d: %w", store.Prefix(r.token), r.stream, r.pos, err)
}

// retryState is a Reader's retries since its last successful read.
type retryState struct {
	by    time.Time     // readRetryWindow after the first failure
	pause time.Duration // the next pause
}

// again reports, after a pause, whether a read that failed with err is
// to be tried again: err wraps store.ErrUnavailable but not store.ErrLost
// (a generation that lost events is over), ctx is not done, and the
// window that began at the first failure has not passed.
func (r *retryState) again(ctx context.Context, err error) bool {
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrLost) {
		return false
	}
	now := time.Now()
	if r.by.IsZero() {
		r.by, r.pause = now.Add(readRetryWindow), readRetryPause
	}
	if !now.Add(r.pause).Before(r.by) {
		return false
	}
	t := time.NewTimer(r.pause)
	defer t.Stop()
	r.pause *= 2
	select {
	case <-t.C:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}
