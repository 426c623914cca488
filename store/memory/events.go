package memory

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
)

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
	head   int    // position of the first retained event in chunks[0]
	n      int    // retained events
	frozen []byte // the n events encoded (freeze), chunks empty; nil when not frozen
}

// at returns the i-th retained event (0 is the oldest).
func (q *events) at(i int) *store.Event {
	p := q.head + i
	return &q.chunks[p/chunkEvents][p%chunkEvents]
}

// push appends evs.
func (q *events) push(evs []store.Event) {
	q.thaw()
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
	q.thaw()
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
	q.thaw()
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

// freezeMax is the most data (bytes) freeze encodes: a session idle
// until it hibernates holds a few hundred bytes (an initialize and a call
// answered: 4 events, 315 bytes), and beyond a few KiB the encoding costs
// more than the room it saves.
const freezeMax = 4 << 10

// freeze encodes the retained events, when they are in one chunk and
// their data is at most freezeMax bytes, into one array of bytes, and
// lets go of the events: a session that hibernates keeps 96 bytes of
// store.Event per event, each with its data in an array of its own and
// two pointers the collector follows, where the encoding is one array
// with no pointer, 384 bytes of heap for 704 (4 events: an initialize
// and a call answered). The next call that needs them decodes them
// (thaw), unchanged but for Time, which keeps its wall clock reading
// and its location only when UTC (time.Local otherwise).
func (q *events) freeze() {
	if q.n == 0 || len(q.chunks) != 1 || q.frozen != nil {
		return
	}
	held := q.chunks[0][q.head : q.head+q.n]
	size := 0
	for i := range held {
		size += len(held[i].Data)
	}
	if size > freezeMax {
		return
	}
	b := make([]byte, 0, size+24*len(held))
	for i := range held {
		b = appendEvent(b, &held[i])
	}
	*q = events{n: q.n, frozen: slices.Clip(b)}
}

// Flags of an event's encoding (appendEvent).
const (
	frozenEnd     = 1 << iota // store.Event.End
	frozenNoTime              // Time is the zero time
	frozenUTC                 // Time's location is UTC
	frozenNilData             // Data is nil
)

// appendEvent appends the encoding of e to b: Seq, Generation and Stream
// as unsigned varints, Kind and the flags a byte each, Retry and Time
// (Unix nanoseconds) as varints, then Data's length as a varint and its
// bytes.
func appendEvent(b []byte, e *store.Event) []byte {
	var flags byte
	if e.End {
		flags |= frozenEnd
	}
	if e.Time.IsZero() {
		flags |= frozenNoTime
	} else if e.Time.Location() == time.UTC {
		flags |= frozenUTC
	}
	if e.Data == nil {
		flags |= frozenNilData
	}
	b = binary.AppendUvarint(b, e.Seq)
	b = binary.AppendUvarint(b, e.Generation)
	b = binary.AppendUvarint(b, e.Stream)
	b = append(b, byte(e.Kind), flags)
	b = binary.AppendVarint(b, int64(e.Retry))
	if flags&frozenNoTime == 0 {
		b = binary.AppendVarint(b, e.Time.UnixNano())
	}
	b = binary.AppendUvarint(b, uint64(len(e.Data)))
	return append(b, e.Data...)
}

// thaw decodes the events freeze encoded back into a chunk, each with its
// data a slice of one new array. Every method that reads or changes the
// events calls it first.
func (q *events) thaw() {
	if q.frozen == nil {
		return
	}
	b := q.frozen
	c := make([]store.Event, q.n)
	data := make([]byte, 0, len(b))
	for i := range c {
		e := &c[i]
		var k int
		e.Seq, k = binary.Uvarint(b)
		b = b[k:]
		e.Generation, k = binary.Uvarint(b)
		b = b[k:]
		e.Stream, k = binary.Uvarint(b)
		b = b[k:]
		e.Kind = store.Kind(b[0])
		flags := b[1]
		b = b[2:]
		e.End = flags&frozenEnd != 0
		retry, k := binary.Varint(b)
		e.Retry = time.Duration(retry)
		b = b[k:]
		if flags&frozenNoTime == 0 {
			ns, k := binary.Varint(b)
			b = b[k:]
			e.Time = time.Unix(0, ns)
			if flags&frozenUTC != 0 {
				e.Time = e.Time.UTC()
			}
		}
		n, k := binary.Uvarint(b)
		b = b[k:]
		if flags&frozenNilData == 0 {
			at := len(data)
			data = append(data, b[:n]...)
			e.Data = data[at:len(data):len(data)]
		}
		b = b[n:]
	}
	*q = events{chunks: [][]store.Event{c}, n: q.n}
}

// oldest returns the oldest retained event, or nil when there is none.
func (q *events) oldest() *store.Event {
	q.thaw()
	if q.n == 0 {
		return nil
	}
	return q.at(0)
}
