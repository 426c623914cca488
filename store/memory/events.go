package memory

import "github.com/tidemark-mcp/tidemark/store"

// chunkEvents is how many events one chunk of a session's log holds: 256
// events of 96 bytes, 24 KiB.
const chunkEvents = 256

// firstChunkEvents is the capacity a session's first chunk starts with; it
// doubles up to chunkEvents. Most sessions hold a handful of events (an
// idle session: its initialize's opening event and response), so a full
// chunk up front would cost 24 KiB per session.
const firstChunkEvents = 2

// events is a session's retained events in fixed-size chunks. Appending
// never copies the events already held, as a growing slice does at each
// doubling (a copy of the whole log, and the old array left to the
// collector), and trimming releases whole chunks. Every chunk but the last
// holds exactly chunkEvents events; chunks[0] starts small and grows while
// it is the only one. Not safe for concurrent use: the session's lock
// guards it.
type events struct {
	chunks [][]store.Event
	head   int // position of the first retained event in chunks[0]
	n      int // retained events
}

// at returns the i-th retained event (0 is the oldest).
func (q *events) at(i int) *store.Event {
	p := q.head + i
	return &q.chunks[p/chunkEvents][p%chunkEvents]
}

// push appends evs.
func (q *events) push(evs []store.Event) {
	for len(evs) > 0 {
		k := len(q.chunks) - 1
		if k < 0 || len(q.chunks[k]) == chunkEvents {
			c := chunkEvents
			if k < 0 {
				c = min(chunkEvents, max(firstChunkEvents, len(evs)))
			}
			q.chunks = append(q.chunks, make([]store.Event, 0, c))
			k++
		}
		c := q.chunks[k]
		take := min(chunkEvents-len(c), len(evs))
		if len(c)+take > cap(c) {
			// Only a first chunk is below chunkEvents: grow it by doubling.
			grown := make([]store.Event, len(c), min(chunkEvents, max(2*cap(c), len(c)+take)))
			copy(grown, c)
			c = grown
		}
		q.chunks[k] = append(c, evs[:take]...)
		q.n += take
		evs = evs[take:]
	}
}

// appendTo appends the retained events from the i-th, at most max of
// them, to dst.
func (q *events) appendTo(dst []store.Event, i, max int) []store.Event {
	end := min(q.n, i+max)
	for i < end {
		p := q.head + i
		c := q.chunks[p/chunkEvents]
		off := p % chunkEvents
		k := min(len(c)-off, end-i)
		dst = append(dst, c[off:off+k]...)
		i += k
	}
	return dst
}

// trim drops the k oldest events and returns the sum of their sizes
// (store.Event.Size). Their data is released at once: a trimmed event's
// slot is zeroed, and a chunk whose events are all trimmed is dropped.
func (q *events) trim(k int) int64 {
	k = min(k, q.n)
	var size int64
	for i := range k {
		e := q.at(i)
		size += e.Size()
		*e = store.Event{}
	}
	q.head += k
	q.n -= k
	if q.n == 0 {
		*q = events{}
		return size
	}
	for q.head >= chunkEvents {
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		q.head -= chunkEvents
	}
	return size
}

// oldest returns the oldest retained event, or nil when there is none.
func (q *events) oldest() *store.Event {
	if q.n == 0 {
		return nil
	}
	return q.at(0)
}
