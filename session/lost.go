// lost.go holds what a refused stream's requests became (Live.Refused):
// the ledger each generation keeps of its streams.

package session

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// Which requests a refused stream carried that are now lost (DESIGN.md,
// "The replay decision"): a 409 on a resume says, in
// error.data.lostRequests, the ids of the requests of that stream whose
// calls did not finish in a generation that has ended (no response of
// theirs was stored), so that a client fails exactly those calls at once,
// and may send them again. A call whose response was stored ran to its
// end: sending it again would run it twice, so it is never listed, even
// when the client has not read that response (its cursor is before it)
// and the 409 means it never will (error.data.answeredRequests). Nor is a
// call the live generation still runs, whose stream retention compacted
// under its reader (error.data.runningRequests): it will finish, and
// sending it again would run it twice too. A client fails both kinds as
// calls whose stream is lost, not as calls to send again.
//
// A generation keeps a ledger of its streams: the ids each POST stream
// carried and the sequence of each one's response. It is built as the
// generation runs (OpenStream, Send), and the ids are also written into
// the Data of the stream's opening event, which no connection ever sends
// (priming events go out with empty data). When a later generation claims
// the session, the old generation's events are discarded; before that,
// the claim reads them back into a ledger of that generation
// (summarizeLog) and saves it with the session's state in the record
// (record.go), so that it holds across a restart on a durable store and
// across a takeover in a fleet. Retention may remove a stream's opening
// event while its calls still run; the store then keeps that event's
// data in the record (store.Record.Openings), in the same write, until
// it removes the stream's end too, and summarizeLog reads it there. Past
// the record's bounds (store.MaxOpenings, store.MaxOpeningBytes) the
// store keeps only a mark, the highest stream whose ids it did not keep
// (store.Openings.Dropped); the ledger keeps it too (ledger.Dropped), and
// a 409 for a stream at or below it that the ledger does not know has no
// lists: the session cannot tell which requests that stream carried, and
// an empty list would tell the client that none is lost.

// ledgerFinished is the most finished streams (every call answered, or
// released) a ledger keeps, the newest; streams with a call unanswered
// are all kept (at most Options.MaxCallsPerSession of them). A 409 on an
// older finished stream has no lostRequests: the server cannot tell.
const ledgerFinished = 32

// priorGenerations is the most earlier generations whose ledgers a
// session keeps (in its record); a 409 for a cursor of an older one has no
// lostRequests.
const priorGenerations = 4

// RequestIDs are JSON-RPC request ids, each a string or an integer exactly
// as the client sent it. They encode as a JSON array, [] when empty.
type RequestIDs []jsonrpc.ID

// MarshalJSON encodes ids as a JSON array of strings and integers. It
// appends integers itself (the ids of most clients), and leaves anything
// else to encoding/json.
func (ids RequestIDs) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+8*len(ids))
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		if n, ok := id.Raw().(int64); ok {
			b = strconv.AppendInt(b, n, 10)
			continue
		}
		v, err := json.Marshal(id.Raw())
		if err != nil {
			return nil, err
		}
		b = append(b, v...)
	}
	return append(b, ']'), nil
}

// LogValue renders ids in log lines as their JSON array, e.g. [3,"a"].
func (ids RequestIDs) LogValue() slog.Value {
	b, err := ids.MarshalJSON()
	if err != nil {
		return slog.AnyValue([]jsonrpc.ID(ids))
	}
	return slog.StringValue(string(b))
}

// UnmarshalJSON decodes a JSON array of strings and integers, as the
// go-sdk decodes request ids.
func (ids *RequestIDs) UnmarshalJSON(b []byte) error {
	var raw []any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(RequestIDs, len(raw))
	for i, r := range raw {
		id, err := jsonrpc.MakeID(r)
		if err != nil || !id.IsValid() {
			return fmt.Errorf("request id %v: not a string or an integer", r)
		}
		out[i] = id
	}
	*ids = out
	return nil
}

// streamCalls is what a ledger knows of one POST stream.
type streamCalls struct {
	// Stream is the stream's number (its opening event's sequence).
	Stream uint64 `json:"stream"`
	// IDs are the ids of the requests it carried and that were delivered.
	IDs RequestIDs `json:"ids"`
	// Answered[i] is the sequence of the response to IDs[i]; 0 while none
	// is stored.
	Answered []uint64 `json:"answered"`
	// Ended: the stream's end is stored; a call of it without a response
	// was released undelivered (Live.ReleaseCalls), and its client was
	// told so by the POST's error answer.
	Ended bool `json:"ended,omitempty"`
}

func (s *streamCalls) finished() bool {
	return s.Ended || !slices.Contains(s.Answered, 0)
}

// unfinished returns the requests whose calls did not finish: no
// response of theirs was stored, and the stream did not end (a call
// released at its end was refused to its client already).
func (s *streamCalls) unfinished() RequestIDs {
	ids := RequestIDs{}
	for i, id := range s.IDs {
		if s.Answered[i] == 0 && !s.Ended {
			ids = append(ids, id)
		}
	}
	return ids
}

// undelivered returns the requests whose responses a reader that has
// read up to sequence after has not received: stored after it, or not
// stored at all while the stream did not end.
func (s *streamCalls) undelivered(after uint64) RequestIDs {
	ids := RequestIDs{}
	for i, id := range s.IDs {
		if a := s.Answered[i]; a > after || (a == 0 && !s.Ended) {
			ids = append(ids, id)
		}
	}
	return ids
}

// answered returns the requests whose responses are stored after
// sequence after: their calls ran to their end, and a reader that has
// read up to after has not received those responses.
func (s *streamCalls) answered(after uint64) RequestIDs {
	ids := RequestIDs{}
	for i, id := range s.IDs {
		if s.Answered[i] > after {
			ids = append(ids, id)
		}
	}
	return ids
}

// ledger is the streams of one generation, by ascending stream number.
type ledger struct {
	// Generation is the generation the streams belong to.
	Generation uint64 `json:"generation"`
	// HWM is the highest sequence the ledger accounts for; a cursor above
	// it names events the ledger never saw (summarizeLog).
	HWM uint64 `json:"hwm"`
	// Streams are the streams it knows, by ascending Stream.
	Streams []streamCalls `json:"streams"`
	// Dropped is the highest stream whose opening event retention removed
	// without the record keeping its ids (store.Openings.Dropped); 0 when
	// none. A stream at or below it that Streams does not hold may have
	// had calls unfinished: which requests it carried is unknown.
	Dropped uint64 `json:"dropped,omitempty"`
}

// byStream orders a ledger's streams by number, for a binary search for
// stream number n.
func byStream(s streamCalls, n uint64) int { return cmp.Compare(s.Stream, n) }

func (g *ledger) find(stream uint64) *streamCalls {
	i, ok := slices.BinarySearchFunc(g.Streams, stream, byStream)
	if !ok {
		return nil
	}
	return &g.Streams[i]
}

// open records a new stream and the ids of its requests, in its place by
// stream number: concurrent POSTs append their opening events in one
// order and reach open in another.
func (g *ledger) open(stream uint64, ids RequestIDs) {
	i, _ := slices.BinarySearchFunc(g.Streams, stream, byStream)
	g.Streams = slices.Insert(g.Streams, i, streamCalls{Stream: stream, IDs: ids, Answered: make([]uint64, len(ids))})
	if len(g.Streams) > ledgerFinished {
		g.prune()
	}
}

// answering marks the response to id on stream as being stored: a
// client may read it before its sequence is known here, so lost waits
// (Live.Refused) until answer follows.
func (g *ledger) answering(stream uint64, id jsonrpc.ID) {
	if s := g.find(stream); s != nil {
		if i := slices.Index(s.IDs, id); i >= 0 {
			s.Answered[i] = beingStored
		}
	}
}

// beingStored is the Answered value of a response being appended.
const beingStored = ^uint64(0)

// storing reports whether a response of stream is being appended.
func (g *ledger) storing(stream uint64) bool {
	s := g.find(stream)
	return s != nil && slices.Contains(s.Answered, beingStored)
}

// answer records the response to id on stream at sequence seq (0: it was
// not stored); end says it ended the stream.
func (g *ledger) answer(stream uint64, id jsonrpc.ID, seq uint64, end bool) {
	s := g.find(stream)
	if s == nil {
		return
	}
	if i := slices.Index(s.IDs, id); i >= 0 {
		s.Answered[i] = seq
	}
	s.Ended = s.Ended || end
	if s.finished() {
		g.prune()
	}
}

// release forgets id, a request of stream that was never delivered.
func (g *ledger) release(stream uint64, id jsonrpc.ID) {
	s := g.find(stream)
	if s == nil {
		return
	}
	if i := slices.Index(s.IDs, id); i >= 0 {
		s.IDs = slices.Delete(s.IDs, i, i+1)
		s.Answered = slices.Delete(s.Answered, i, i+1)
	}
}

// end records that stream's end is stored.
func (g *ledger) end(stream uint64) {
	if s := g.find(stream); s != nil {
		s.Ended = true
		g.prune()
	}
}

// prune keeps the newest ledgerFinished finished streams and every
// unfinished one.
func (g *ledger) prune() {
	finished := 0
	for i := len(g.Streams) - 1; i >= 0; i-- {
		if !g.Streams[i].finished() {
			continue
		}
		if finished++; finished > ledgerFinished {
			g.Streams = slices.Delete(g.Streams, i, i+1)
		}
	}
}

// Refused is what a 409 on a resume (generation_mismatch or
// cursor_compacted) says of the requests the refused stream carried, each
// list in the 409's error.data (transport, resumeRefusal). Every request
// of the stream is in at most one list; a request answered at or before
// the cursor is in none, since the client read its response.
type Refused struct {
	// Lost are the requests whose calls did not finish and never will: no
	// response of theirs was stored in a generation that has ended. A
	// client fails them at once, and may send them again.
	Lost RequestIDs
	// Answered are the requests whose calls finished with their responses
	// stored after the cursor: the client never receives those responses,
	// and must not send the requests again, since they ran.
	Answered RequestIDs
	// Running are the requests whose calls the live generation still runs
	// (a cursor_compacted refusal of a stream whose call goes on): their
	// responses will come after the cursor, where no resume reaches them.
	// They are not lost, so a client that sent them again would run them
	// twice; it fails them as calls whose stream is gone.
	Running RequestIDs
	// Forgotten says that the generation's ledger no longer keeps the
	// stream: it keeps every stream with a call unfinished, so the
	// stream's calls all finished (or its number names no stream), and
	// which of their responses come after the cursor is not known.
	// Answered is then empty although some may have been.
	Forgotten bool
}

// Refused returns what a 409 on a resume from the stream cursor c says
// of the requests that stream carried, read at one moment (see Refused).
// Its lists are empty for the standalone stream, which carries no
// request, and for a stream the ledger of c's generation no longer keeps
// (Refused.Forgotten: see ledgerFinished); ok is false when the session
// keeps no ledger of c's generation (see priorGenerations), or cannot tell
// which requests the stream carried (see ledger.Dropped).
func (l *Live) Refused(c replay.Cursor) (r Refused, ok bool) {
	_, ok = l.streamRequests(c, func(s *streamCalls, live bool) (RequestIDs, bool) {
		if s == nil {
			r = Refused{Lost: RequestIDs{}, Running: RequestIDs{}, Forgotten: true}
			return nil, true
		}
		r.Answered = s.answered(c.Sequence)
		if live {
			r.Lost, r.Running = RequestIDs{}, s.unfinished()
		} else {
			r.Lost, r.Running = s.unfinished(), RequestIDs{}
		}
		return nil, true
	})
	if c.Stream == replay.StandaloneStream {
		r = Refused{Lost: RequestIDs{}, Answered: RequestIDs{}, Running: RequestIDs{}}
	}
	return r, ok
}

// Undelivered returns the requests that the stream cursor c names carried
// and whose responses a reader that has read up to c has not received:
// stored after c's sequence, or not stored at all. When the session ends
// by DELETE, the transport answers these on the stream, whose log is gone
// (transport, deletedAnswers). ok is as Refused's.
func (l *Live) Undelivered(c replay.Cursor) (ids RequestIDs, ok bool) {
	return l.streamRequests(c, func(s *streamCalls, _ bool) (RequestIDs, bool) {
		if s == nil {
			return nil, false
		}
		return s.undelivered(c.Sequence), true
	})
}

// streamRequests returns pick of the calls of the stream cursor c names,
// once no response of that stream is being stored; pick's live says
// whether the stream is of the live generation, whose unanswered calls
// still run, and s is nil when the generation's ledger does not keep the
// stream (see Refused.Forgotten). It returns empty for the standalone
// stream, and ok false for a generation the session keeps no ledger of,
// or a stream of an earlier generation that its ledger does not hold at
// or below its Dropped mark.
func (l *Live) streamRequests(c replay.Cursor, pick func(s *streamCalls, live bool) (RequestIDs, bool)) (ids RequestIDs, ok bool) {
	if c.Stream == replay.StandaloneStream {
		return RequestIDs{}, true
	}
	if c.Generation == l.gen {
		l.mu.Lock()
		defer l.mu.Unlock()
		for l.ledger.storing(c.Stream) {
			if l.settled == nil {
				l.settled = sync.NewCond(&l.mu)
			}
			l.settled.Wait()
		}
		return pick(l.ledger.find(c.Stream), true)
	}
	for i := range l.prior {
		if g := &l.prior[i]; g.Generation == c.Generation && c.Sequence <= g.HWM {
			s := g.find(c.Stream)
			if s == nil && c.Stream <= g.Dropped {
				return nil, false
			}
			return pick(s, false)
		}
	}
	return nil, false
}

// encodeIDs renders the ids of a stream's requests for its opening event.
func encodeIDs(calls []*jsonrpc.Request) (RequestIDs, []byte) {
	ids := make(RequestIDs, len(calls))
	for i, c := range calls {
		ids[i] = c.ID
	}
	b, _ := ids.MarshalJSON() // strings and integers always encode
	return ids, b
}

// summarizeLog reads the events of token's current generation, gen, back
// into a ledger, before a claim discards them. The streams whose opening
// event retention removed are known from the record's openings
// (store.Record.Openings): those of rec, the record the claim starts
// from, and those a trim by the generation's owner added while the log
// was read, which the record read after the log holds. A stream whose
// opening the record does not keep either (past store.MaxOpenings or
// store.MaxOpeningBytes) is left out, and the records' mark
// (store.Openings.Dropped) becomes the ledger's Dropped, so that its 409
// says it cannot tell.
func (r *Registry) summarizeLog(ctx context.Context, rec store.Record, gen uint64) (ledger, error) {
	g := ledger{Generation: gen, Dropped: rec.Openings.Dropped()}
	g.seed(rec.Openings)
	after := uint64(0)
	for {
		evs, b, err := r.st.Read(ctx, rec.Token, after, 512)
		if err != nil {
			return g, err
		}
		if len(evs) == 0 {
			g.HWM = max(g.HWM, b.HWM)
			break
		}
		for i := range evs {
			g.note(&evs[i])
		}
		after = evs[len(evs)-1].Seq
		g.HWM = after
	}
	if now, err := r.st.Get(ctx, rec.Token); err == nil && now.Generation == gen {
		g.seed(now.Openings)
		g.Dropped = max(g.Dropped, now.Openings.Dropped())
	}
	return g, nil
}

// seed adds the streams of openings that g does not know yet, with none of
// their calls answered: their responses, if retention removed them too,
// count as lost (a client that has them has no call of that id waiting,
// so naming it fails nothing).
func (g *ledger) seed(openings store.Openings) {
	for _, o := range openings {
		var ids RequestIDs
		if len(o.Data) == 0 || g.find(o.Stream) != nil || json.Unmarshal(o.Data, &ids) != nil {
			continue
		}
		i, _ := slices.BinarySearchFunc(g.Streams, o.Stream, byStream)
		g.Streams = slices.Insert(g.Streams, i, streamCalls{Stream: o.Stream, IDs: ids, Answered: make([]uint64, len(ids))})
	}
}

// note adds what one event of the log tells to g.
func (g *ledger) note(e *store.Event) {
	if e.Stream == replay.StandaloneStream {
		return
	}
	switch {
	case e.Kind == store.KindPriming && e.Stream == e.Seq && len(e.Data) > 0:
		var ids RequestIDs
		if json.Unmarshal(e.Data, &ids) == nil {
			g.open(e.Stream, ids)
		}
	case e.Kind == store.KindMessage && bytes.Contains(e.Data, []byte(`"id"`)):
		msg, err := jsonrpc.DecodeMessage(e.Data)
		if resp, ok := msg.(*jsonrpc.Response); err == nil && ok {
			g.answer(e.Stream, resp.ID, e.Seq, e.End)
			return
		}
	}
	if e.End {
		g.end(e.Stream)
	}
}
