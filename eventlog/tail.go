package eventlog

import (
	"context"
	"fmt"

	"github.com/tidemark-mcp/tidemark/store"
)

// readBatch is how many events a Reader asks the store for at once.
const readBatch = 256

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
}

// NewReader returns a Reader of stream in generation gen of the session,
// positioned after sequence after (the cursor the client holds, or the
// sequence before the stream's first event).
func (l *Log) NewReader(token string, gen, stream, after uint64) *Reader {
	return &Reader{log: l, token: token, gen: gen, stream: stream, pos: after}
}

// Position returns the highest sequence the Reader has examined.
func (r *Reader) Position() uint64 { return r.pos }

// Next blocks until the stream has events after the Reader's position and
// returns them in sequence order (at most 256). The slice is valid until the
// next call. Errors: ErrCompacted when retention removed events the Reader
// had not read; ErrGenerationChanged when the session was re-created; the
// store's error when the session ended; ctx.Err() when ctx is done.
func (r *Reader) Next(ctx context.Context) ([]store.Event, error) {
	st := r.log.st
	for {
		evs, b, err := st.Read(ctx, r.token, r.pos, readBatch)
		if err != nil {
			return nil, fmt.Errorf("eventlog: read session %s stream %d after %d: %w", store.Prefix(r.token), r.stream, r.pos, err)
		}
		if b.Generation != r.gen {
			return nil, fmt.Errorf("%w: session %s gen %d is now gen %d", ErrGenerationChanged, store.Prefix(r.token), r.gen, b.Generation)
		}
		if b.Floor > r.pos+1 {
			return nil, fmt.Errorf("%w: session %s stream %d position %d, floor %d", ErrCompacted, store.Prefix(r.token), r.stream, r.pos, b.Floor)
		}
		r.out = r.out[:0]
		for _, e := range evs {
			if e.Stream == r.stream {
				r.out = append(r.out, e)
			}
			r.pos = e.Seq
		}
		if len(r.out) > 0 {
			return r.out, nil
		}
		if len(evs) > 0 {
			continue // only other streams' events: keep scanning
		}
		if err := st.Wait(ctx, r.token, r.pos); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("eventlog: wait session %s stream %d after %d: %w", store.Prefix(r.token), r.stream, r.pos, err)
		}
	}
}
