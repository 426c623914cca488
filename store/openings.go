package store

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/tidemark-mcp/tidemark/replay"
)

// Which requests a stream carried must outlive the stream's opening event
// (DESIGN.md, "The replay decision"): that event's Data is the only place
// the ids of the stream's requests are stored, and retention (Trim, or a
// backend's own bound) removes it like any other event, while the stream's
// calls may still run. A session whose owner then dies would not know
// which of its calls were lost. So a store that removes the opening event
// of a stream whose end it has not removed too keeps that event's Data in
// the record (Record.Openings), in the same atomic step as the removal.

// MaxOpenings is the most streams whose ids a record keeps in
// Record.Openings: an unfinished stream has at least one call in flight,
// so a session rarely has more. Past it the oldest stream's ids go first,
// and the record's mark (Openings.Dropped) rises to that stream: a
// refused resume of it after a takeover then says that the session no
// longer knows which requests it carried.
const MaxOpenings = 64

// MaxOpeningBytes is the longest opening event Data a record keeps (the
// JSON array of one stream's request ids, a few bytes per id); a longer
// one is not kept, and the mark rises to its stream as past MaxOpenings.
const MaxOpeningBytes = 1024

// Opening is what a record keeps of one stream whose opening event
// retention removed before the stream's end was removed: the stream's
// number and the Data of its opening event. An Opening with empty Data is
// the record's mark instead (Openings.Dropped).
type Opening struct {
	// Stream is the stream's number (its opening event's Seq).
	Stream uint64
	// Data is the opening event's Data (the stream's request ids as a
	// JSON array); empty for the mark.
	Data []byte
}

// Openings are the openings a record keeps, by ascending Stream, at most
// MaxOpenings with Data, none longer than MaxOpeningBytes, and at most
// one mark (an Opening with empty Data): the highest stream whose
// opening retention removed without keeping its ids, past either bound.
// A stream at or below the mark that Openings does not keep may have
// been such a stream, so which requests it carried is not known; the
// mark stays until Claim, since those streams' ends tell nothing of their
// ids. The stores keep
// them as Trimmed says, with one latitude: a store may drop a stream's
// opening at any trim once the stream's end is stored, before a trim
// removes that end (store/redis does: it then needs to read only the
// entries that open streams, not every entry it removes), since the end
// in the log tells as much. Claim empties them (they belong to the
// generation it ends) and every other write leaves them.
type Openings []Opening

// IsOpening reports whether an event with these fields opens a POST
// stream whose request ids its Data holds: a priming event that is its
// stream's first (Stream == Seq), carries data and does not end the
// stream at once.
func IsOpening(seq, stream uint64, kind Kind, end bool, data []byte) bool {
	return kind == KindPriming && stream == seq && stream != replay.StandaloneStream && !end && len(data) > 0
}

// Trimmed returns o after retention removed one event, whose fields are
// given; a store calls it for each event it removes, in sequence order.
// An opening event (IsOpening) of at most MaxOpeningBytes is added (its
// data copied), the oldest opening's ids going once there are more than
// MaxOpenings; the mark rises to the stream of a longer one, or of the
// oldest that went. An event that ends a stream (End) removes that
// stream's opening, which no longer tells anything (its stream's whole
// life is gone). It never modifies o: it returns o itself and changed
// false when the event changes nothing, else a new slice and changed
// true.
func (o Openings) Trimmed(seq, stream uint64, kind Kind, end bool, data []byte) (out Openings, changed bool) {
	switch {
	case IsOpening(seq, stream, kind, end, data):
		if o.index(stream) >= 0 {
			return o, false
		}
		if len(data) > MaxOpeningBytes {
			return o.marked(stream)
		}
		out = append(slices.Clone(o), Opening{Stream: stream, Data: bytes.Clone(data)})
		slices.SortFunc(out, func(a, b Opening) int { return cmp.Compare(a.Stream, b.Stream) })
		if out.kept() > MaxOpenings {
			i := slices.IndexFunc(out, func(op Opening) bool { return len(op.Data) > 0 })
			oldest := out[i].Stream
			out = slices.Delete(out, i, i+1)
			out, _ = out.marked(oldest)
		}
		return out, true
	case end:
		i := o.index(stream)
		if i < 0 {
			return o, false
		}
		return slices.Delete(slices.Clone(o), i, i+1), true
	}
	return o, false
}

// Dropped returns the record's mark: the highest stream whose opening
// retention removed without keeping its ids (past MaxOpenings or
// MaxOpeningBytes); 0 when there is none. Which requests a stream at or
// below it that o does not keep carried is not known.
func (o Openings) Dropped() uint64 {
	for _, op := range o {
		if len(op.Data) == 0 {
			return op.Stream
		}
	}
	return 0
}

// marked returns o with its mark at stream, unless the mark is that high
// already.
func (o Openings) marked(stream uint64) (Openings, bool) {
	if o.Dropped() >= stream {
		return o, false
	}
	out := slices.DeleteFunc(slices.Clone(o), func(op Opening) bool { return len(op.Data) == 0 })
	i, _ := slices.BinarySearchFunc(out, stream, func(op Opening, n uint64) int { return cmp.Compare(op.Stream, n) })
	return slices.Insert(out, i, Opening{Stream: stream}), true
}

// kept returns how many streams' ids o keeps: every opening but the mark.
func (o Openings) kept() int {
	n := 0
	for _, op := range o {
		if len(op.Data) > 0 {
			n++
		}
	}
	return n
}

// index returns the position of the opening that keeps stream's ids; -1
// when o keeps none (the mark keeps no ids).
func (o Openings) index(stream uint64) int {
	for i := range o {
		if o[i].Stream == stream && len(o[i].Data) > 0 {
			return i
		}
	}
	return -1
}
