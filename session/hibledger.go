// hibledger.go holds the live generation's ledger (lost.go) as a
// hibernated record keeps it, so that a 409 on a resume says of the
// generation's streams after its hibernation what it said before.

package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// ledgerKey is the member of a hibernated record's State that holds the
// ledger of the generation that hibernated, absent when it had no
// stream. Hibernate writes it whether or not the hibernation is exact; a
// wake at the same generation starts its live ledger from it (newLive,
// hibernatedLive), and a claim of generation+1 adds it to the ledger it
// reads back from the log (recreate, summarizeLog), whose events
// retention may have removed, or the hibernation dropped. It holds what
// the live ledger held, so it keeps the same bound (ledgerFinished). A
// record woken and held again loses the member at its next state write
// (saveState), and a record without it wakes with an empty ledger.
const ledgerKey = "hibernatedLedger"

// savedLedger is a ledger as a hibernated record keeps it under
// ledgerKey: the JSON array [generation, stream, stream, …], its streams
// by ascending number, each the array [number, ids, answered] with a
// fourth element, 1, when its end is stored and a call of it has no
// response (streamCalls.Ended says nothing more of a stream whose calls
// all have theirs); e.g. [4,[3,[2],[5]],[6,["a",7],[8,0],1]]. The
// generation keeps a record claimed by a later generation, and not
// written since, from lending the ledger to that one. A record stays in
// the store for as long as its session hibernates, in process memory
// with the memory store: this shape is about a quarter of the size of the
// ledger's members written out.
type savedLedger ledger

// MarshalJSON encodes g as savedLedger describes.
func (g savedLedger) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 4+16*len(g.Streams))
	b = strconv.AppendUint(append(b, '['), g.Generation, 10)
	for _, s := range g.Streams {
		ids, err := s.IDs.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b = strconv.AppendUint(append(b, ",["...), s.Stream, 10)
		b = append(append(append(b, ','), ids...), ",["...)
		for j, a := range s.Answered {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, a, 10)
		}
		b = append(b, ']')
		if s.Ended && slices.Contains(s.Answered, 0) {
			b = append(b, ",1"...)
		}
		b = append(b, ']')
	}
	return append(b, ']'), nil
}

// UnmarshalJSON decodes what MarshalJSON encodes: streams by ascending
// number, each with as many ids as answered sequences, or it fails.
func (g *savedLedger) UnmarshalJSON(b []byte) error {
	var top []json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return fmt.Errorf("saved ledger: %w", err)
	}
	if len(top) == 0 {
		return errors.New("saved ledger: no generation")
	}
	out := savedLedger{}
	if err := json.Unmarshal(top[0], &out.Generation); err != nil {
		return fmt.Errorf("saved ledger: generation: %w", err)
	}
	for _, raw := range top[1:] {
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return fmt.Errorf("saved ledger: stream: %w", err)
		}
		if len(parts) != 3 && len(parts) != 4 {
			return fmt.Errorf("saved ledger: a stream has %d members, want 3 or 4", len(parts))
		}
		var s streamCalls
		if err := json.Unmarshal(parts[0], &s.Stream); err != nil {
			return fmt.Errorf("saved ledger: stream number: %w", err)
		}
		if err := s.IDs.UnmarshalJSON(parts[1]); err != nil {
			return fmt.Errorf("saved ledger: stream %d: %w", s.Stream, err)
		}
		if err := json.Unmarshal(parts[2], &s.Answered); err != nil {
			return fmt.Errorf("saved ledger: stream %d: answered: %w", s.Stream, err)
		}
		if len(parts) == 4 {
			if string(parts[3]) != "1" {
				return fmt.Errorf("saved ledger: stream %d: end flag %s, want 1", s.Stream, parts[3])
			}
			s.Ended = true
		}
		if s.IDs == nil {
			s.IDs = RequestIDs{}
		}
		if s.Answered == nil {
			s.Answered = []uint64{}
		}
		switch n := len(out.Streams); {
		case len(s.IDs) != len(s.Answered):
			return fmt.Errorf("saved ledger: stream %d: %d ids, %d answered", s.Stream, len(s.IDs), len(s.Answered))
		case n > 0 && s.Stream <= out.Streams[n-1].Stream:
			return fmt.Errorf("saved ledger: stream %d after %d", s.Stream, out.Streams[n-1].Stream)
		}
		out.Streams = append(out.Streams, s)
	}
	*g = out
	return nil
}

// savedLedgerOf returns the ledger of generation gen that member, the
// value under ledgerKey of a record's State (hibernatedLive), holds: one
// with no streams when there is none, it is another generation's, or it
// cannot be read (the 409s of its streams then say they are forgotten,
// as when the ledger dropped them).
func savedLedgerOf(member []byte, gen uint64) ledger {
	var saved savedLedger
	if len(member) == 0 || saved.UnmarshalJSON(member) != nil || saved.Generation != gen {
		return ledger{Generation: gen}
	}
	return ledger(saved)
}

// merge adds saved's streams, the generation's ledger as its hibernation
// stored it, to g, read back from the log: saved's account of a stream
// replaces g's, since the log may have lost the stream's responses to
// retention, and g then keeps its bound (prune).
func (g *ledger) merge(saved ledger) {
	for _, s := range saved.Streams {
		i, found := slices.BinarySearchFunc(g.Streams, s.Stream, byStream)
		if found {
			g.Streams[i] = s
		} else {
			g.Streams = slices.Insert(g.Streams, i, s)
		}
	}
	g.prune()
}
