package session

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
)

func mustID(t *testing.T, v any) jsonrpc.ID {
	t.Helper()
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// hibernatedLedger is the ledger a wake at generation gen reads from
// state, a record's State.
func hibernatedLedger(t *testing.T, state []byte, gen uint64) ledger {
	t.Helper()
	_, g := hibernatedLive(state, gen)
	return g
}

// TestHibernatedLedgerShape: a hibernated record keeps the live ledger
// as [generation, stream, …], each stream [number, ids, answered], with
// 1 after them when it ended with a call unanswered, and reads back the
// same streams, of the generation it was saved at only; a member it
// cannot read gives an empty ledger.
func TestHibernatedLedgerShape(t *testing.T) {
	live := ledger{Generation: 3, Streams: []streamCalls{
		{Stream: 5, IDs: RequestIDs{mustID(t, float64(2)), mustID(t, float64(-3))}, Answered: []uint64{7, 8}},
		{Stream: 9, IDs: RequestIDs{mustID(t, "a\"],[\\"), mustID(t, float64(-4))}, Answered: []uint64{11, 0}, Ended: true},
		{Stream: 12, IDs: RequestIDs{}, Answered: []uint64{}, Ended: true},
	}}
	member := func(b []byte) string {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return string(m[ledgerKey])
	}
	b, err := encodeHibernated(&engine.State{}, nil, live, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := `[3,[5,[2,-3],[7,8]],[9,["a\"],[\\",-4],[11,0],1],[12,[],[]]]`
	if got := member(b); got != want {
		t.Fatalf("encoded %s, want the member %s", b, want)
	}
	if lossy, err := encodeHibernated(&engine.State{}, nil, live, false, 0); err != nil || member(lossy) != want {
		t.Fatalf("lossy hibernation encoded %s, %v; want the member %s", lossy, err, want)
	}
	// Ended says nothing of stream 12, whose calls (none) all have their
	// responses: it is not kept.
	back := live
	back.Streams = slices.Clone(live.Streams)
	back.Streams[2].Ended = false
	if got := hibernatedLedger(t, b, 3); !reflect.DeepEqual(got, back) {
		t.Fatalf("read back %+v, want %+v", got, back)
	}
	if got := hibernatedLedger(t, b, 4); got.Generation != 4 || got.Streams != nil {
		t.Fatalf("read at generation 4: %+v, want an empty ledger of 4", got)
	}
	if b, err := encodeHibernated(&engine.State{}, nil, ledger{Generation: 3}, true, 0); err != nil || member(b) != "" {
		t.Fatalf("hibernation of no stream encoded %s, %v; want no member %s", b, err, ledgerKey)
	}
	for _, bad := range []string{
		`{"hibernatedLedger":[]}`,
		`{"hibernatedLedger":[3,[5,[2]]]}`,
		`{"hibernatedLedger":[3,[5,[2],[7,8]]]}`,
		`{"hibernatedLedger":[3,[5,[true],[7]]]}`,
		`{"hibernatedLedger":[3,[9,[2],[10]],[5,[3],[7]]]}`,
		`{"hibernatedLedger":[3,[5,[2],[7]],[5,[3],[8]]]}`,
		`{"hibernatedLedger":{"generation":3}}`,
		`{"hibernatedLedger":[3,[5,[2],[7],2]]}`,
		`{"hibernatedLedger":[3,[5,[1,,2],[7,8,9]]]}`,
		`{"hibernatedLedger":[3,[5,[1],[-7]]]}`,
		`{"hibernatedLedger":[3,[5,["a],[7]]]}`,
		`{"hibernatedLedger":[3,[5,[1],[99999999999999999999999]]]}`,
		`{"hibernatedLedger":[-3,[5,[1],[7]]]}`,
		`{"hibernatedLedger":[3,[5,[1],[7]],]}`,
	} {
		if got := hibernatedLedger(t, []byte(bad), 3); got.Generation != 3 || got.Streams != nil {
			t.Errorf("read %s: %+v, want an empty ledger of 3", bad, got)
		}
	}
}

// TestLedgerMerge: a claim's ledger read back from the log takes the
// streams the hibernation saved, whose account of a stream replaces the
// log's (retention may have removed its responses), keeps the streams
// only the log knows, and keeps its bound of finished streams.
func TestLedgerMerge(t *testing.T) {
	finished := func(stream uint64, id float64) streamCalls {
		return streamCalls{Stream: stream, IDs: RequestIDs{mustID(t, id)}, Answered: []uint64{stream + 1}}
	}
	fromLog := ledger{Generation: 2, HWM: 90, Streams: []streamCalls{
		{Stream: 3, IDs: RequestIDs{mustID(t, float64(1))}, Answered: []uint64{0}}, // its opening kept in the record only
		finished(80, 80),
	}}
	saved := ledger{Generation: 2, Streams: []streamCalls{finished(3, 1), finished(5, 2)}}
	fromLog.merge(saved)
	want := ledger{Generation: 2, HWM: 90, Streams: []streamCalls{finished(3, 1), finished(5, 2), finished(80, 80)}}
	if !reflect.DeepEqual(fromLog, want) {
		t.Fatalf("merged %+v, want %+v", fromLog, want)
	}

	var many []streamCalls
	for i := range uint64(ledgerFinished) {
		many = append(many, finished(10+2*i, float64(i)))
	}
	fromLog = ledger{Generation: 2, Streams: []streamCalls{finished(200, 200)}}
	fromLog.merge(ledger{Generation: 2, Streams: many})
	if n := len(fromLog.Streams); n != ledgerFinished || fromLog.Streams[0].Stream != 12 || fromLog.Streams[n-1].Stream != 200 {
		t.Fatalf("merged %d streams, %d to %d; want the newest %d, 12 to 200",
			n, fromLog.Streams[0].Stream, fromLog.Streams[n-1].Stream, ledgerFinished)
	}
}
